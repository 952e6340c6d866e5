"""The Python API; it mirrors the CLI (`edgeopt convert`, `edgeopt devices`)."""
from __future__ import annotations

import numbers
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple, Union

from edgeopt_agent.profiles import DeviceProfile, all_profiles

PathLike = Union[str, Path]


def _is_shape(value) -> bool:
    return isinstance(value, (tuple, list)) and bool(value) and all(isinstance(v, numbers.Integral) for v in value)


def _as_list(value) -> Tuple[str, ...]:
    """Shapes, dtypes or values as the CLI strings: one shape (1, 3, 224, 224), "1,3,224,224", a list
    of either, or a dict by input name ({"input": (1, 512), "sr": ()})."""
    if value is None:
        return ()
    if isinstance(value, dict):
        return tuple(f"{name}={_one(item)}" for name, item in value.items())
    if isinstance(value, (str, Path)):
        return (str(value),)
    if _is_shape(value):
        return (",".join(str(int(v)) for v in value),)
    return tuple(",".join(str(int(d)) for d in v) if _is_shape(v) else str(v) for v in value)


def _one(item) -> str:
    if isinstance(item, (tuple, list)):
        return ",".join(str(int(d)) for d in item)  # () -> "": a scalar
    return str(item)


def _paths(value) -> Optional[Tuple[Path, ...]]:
    """One data file, or several (of different shapes)."""
    if not value:
        return None
    return (Path(value),) if isinstance(value, (str, Path)) else tuple(Path(v) for v in value)


def _names(value) -> Tuple[str, ...]:
    """formats="onnx" and formats=["onnx", "tflite"] both work."""
    return (value,) if isinstance(value, str) else tuple(value or ())


def _pairs(value, parse) -> Dict[str, str]:
    """{name: value} as given, or the CLI's NAME=VALUE strings parsed."""
    if not value:
        return {}
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()}
    return parse([value] if isinstance(value, str) else list(value))


def convert(
    model: Any,
    device: str,
    output_dir: PathLike = "edgeopt-out",
    *,
    input_shape=None,
    input_dtype=None,
    input_value=None,
    calibration: Union[PathLike, Sequence[PathLike], None] = None,
    eval_data: Optional[PathLike] = None,
    formats: Sequence[str] = (),
    precisions: Sequence[str] = (),
    max_accuracy_drop: Optional[float] = None,
    min_cosine: Optional[float] = None,
    output_kinds=None,
    state=None,
    stream_steps: int = 64,
    metric: Optional[str] = None,
    max_metric_drop: Optional[float] = None,
    threads: Optional[int] = None,
    calibrate_method: str = "minmax",
    weights: Optional[PathLike] = None,
    trust_model_code: bool = False,
    time_on_host: bool = True,
    mixed_precision: bool = True,
    strict: bool = False,
    progress=None,
) -> Dict[str, Any]:
    """Convert `model` for `device`; returns the manifest (also written to OUTDIR/manifest.json).

    `model` is an nn.Module, or the same spec the CLI takes: "file.py:factory", a TorchScript
    file, a .pt2 ExportedProgram, an .onnx file or "example:digits-cnn". `input_shape` is a tuple
    like (1, 3, 224, 224), a string "1,3,224,224", a list of those for several inputs, or a dict by
    input name ({"input": (1, 512), "sr": ()}; () is a scalar); give only what the model does not
    declare. `input_dtype` likewise; `input_value` ({"sr": 16000}) gives constant arguments.
    `calibration` is a data file, or a list of files of different shapes (sequence lengths).
    `trust_model_code=True` is needed for a TorchScript file, which runs code when loaded.
    `mixed_precision=False` keeps a failed INT8 whole-graph instead of searching nodes to keep in float.
    An artifact that cannot be built or run is listed in `failed_artifacts` with its cause and the
    others go on; `strict=True` raises instead.
    `output_kinds` ({name: kind} or ["name=kind"]) says how outputs are judged; `state`
    ({input: output}) names recurrent state for streamed judgement; `metric` is "file.py:fn".
    """
    from edgeopt_converters.accuracy.kinds import parse_output_kinds
    from edgeopt_converters.accuracy.streaming import parse_state_pairs
    from edgeopt_converters.pipeline import ConvertOptions, convert as run
    from edgeopt_converters.progress import ProgressReporter

    options = ConvertOptions(
        device=device,
        output_dir=Path(output_dir),
        input_shapes=_as_list(input_shape),
        input_dtypes=_as_list(input_dtype),
        input_values=_as_list(input_value),
        calibration=_paths(calibration),
        eval_data=Path(eval_data) if eval_data else None,
        formats=_names(formats),
        precisions=_names(precisions),
        max_accuracy_drop=max_accuracy_drop,
        min_cosine=min_cosine,
        output_kinds=_pairs(output_kinds, parse_output_kinds),
        state_pairs=_pairs(state, parse_state_pairs),
        stream_steps=stream_steps,
        metric=metric,
        max_metric_drop=max_metric_drop,
        threads=threads,
        calibrate_method=calibrate_method,
        weights=Path(weights) if weights else None,
        trust_model_code=trust_model_code,
        time_on_host=time_on_host,
        mixed_precision=mixed_precision,
        strict=strict,
    )
    return run(model, options, progress or ProgressReporter())


def devices() -> Tuple[DeviceProfile, ...]:
    """The bundled device profiles."""
    return all_profiles()
