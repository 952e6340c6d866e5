"""The Python API; it mirrors the CLI (`edgeopt convert`, `edgeopt devices`)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Tuple, Union

from edgeopt_agent.profiles import DeviceProfile, all_profiles

PathLike = Union[str, Path]


def convert(model: Any, device: str, output_dir: PathLike = "edgeopt-out", *, progress=None, **options: Any
            ) -> Dict[str, Any]:
    """Convert `model` for `device`; returns the manifest (also written to OUTDIR/manifest.json).

    `model` is an nn.Module, or the same spec the CLI takes: "file.py:factory", a TorchScript
    file, a .pt2 ExportedProgram, an .onnx file or "example:digits-cnn". The keyword options are
    `edgeopt convert`'s, named as its flags are (`--input-shape` -> `input_shape`; `--format` ->
    `formats`, `--no-timing` -> `time_on_host=False`): `edgeopt_converters.options.ConvertOptions`
    defines each once, with its default and help, and refuses a name it does not know.
    `input_shape` is also a tuple like (1, 3, 224, 224), a list of those for several inputs, or a
    dict by input name ({"input": (1, 512), "sr": ()}; () is a scalar); `input_dtype` and
    `input_value` ({"sr": 16000}) likewise; `calibration` a path or a list of paths; `output_kinds`
    and `state` a dict or the CLI's "NAME=VALUE" strings. An artifact that cannot be built or run is
    listed in `failed_artifacts` with its cause and the others go on; `strict=True` raises instead.
    """
    from edgeopt_converters.options import ConvertOptions
    from edgeopt_converters.pipeline import convert as run
    from edgeopt_converters.progress import ProgressReporter

    options = ConvertOptions.read(device=device, output_dir=output_dir, **options)
    return run(model, options, progress or ProgressReporter())


def devices() -> Tuple[DeviceProfile, ...]:
    """The bundled device profiles."""
    return all_profiles()
