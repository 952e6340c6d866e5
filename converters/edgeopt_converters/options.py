"""Every `edgeopt convert` option, written once: name, type, default, help, choices and how a value
given from the CLI or the Python API is read (the mechanism, shared with the benchmark options, is
`edgeopt_agent.wire.options`). `edgeopt convert`'s flags and `edgeopt.api.convert`'s keywords are
generated from these fields, so adding an option is one field here plus its use.
"""
from __future__ import annotations

import numbers
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

from edgeopt_agent.runtimes import FORMATS, PRECISIONS
from edgeopt_agent.wire.options import OptionSet, Spec, option

from .accuracy.kinds import KINDS, parse_output_kinds
from .manifest import check_build_version
from .accuracy.streaming import parse_state_pairs
from .passes.quantize_onnx import CALIBRATION_METHODS

DEFAULT_MAX_CALIBRATION = 256
DEFAULT_MAX_EVAL = 1000
RECOMMEND_BUDGET = 1.0  # percentage points an artifact may lose and still be recommended, unless --max-accuracy-drop says


def _strings(value) -> Tuple[str, ...]:
    """Shapes, dtypes or values as the CLI's strings: one shape (1, 3, 224, 224), "1,3,224,224", a list
    of either, or a dict by input name ({"input": (1, 512), "sr": ()}: () is a scalar)."""
    if value is None:
        return ()
    if isinstance(value, Mapping):
        return tuple(f"{name}={_one(item)}" for name, item in value.items())
    if isinstance(value, (str, os.PathLike)):
        return (str(value),)
    if _is_shape(value):
        return (_one(value),)
    return tuple(_one(v) if _is_shape(v) else str(v) for v in value)


def _is_shape(value) -> bool:
    return isinstance(value, (tuple, list)) and bool(value) and all(isinstance(v, numbers.Integral) for v in value)


def _one(item) -> str:
    if isinstance(item, (tuple, list)):
        return ",".join(str(int(d)) for d in item)
    return str(item)


def _paths(value) -> Tuple[Path, ...]:
    """One data file, or several (of different shapes)."""
    if not value:
        return ()
    return (Path(value),) if isinstance(value, (str, os.PathLike)) else tuple(Path(v) for v in value)


def _path(value) -> Optional[Path]:
    return Path(value) if value else None


def _names(value) -> Tuple[str, ...]:
    """formats="onnx" and formats=["onnx", "tflite"] both work."""
    return (value,) if isinstance(value, str) else tuple(value or ())


def _pairs(parse: Callable[[Sequence[str]], Dict[str, str]]) -> Callable[[Any], Dict[str, str]]:
    """{name: value} as given, or the CLI's NAME=VALUE strings parsed."""
    def read(value) -> Dict[str, str]:
        if not value:
            return {}
        if isinstance(value, Mapping):
            return {str(k): str(v) for k, v in value.items()}
        return parse([value] if isinstance(value, str) else list(value))
    return read


@dataclass(frozen=True)
class ConvertOptions(OptionSet):
    device: str = option(None, "Target board profile: a name from `edgeopt devices` or a TOML file (see "
                               "`edgeopt devices --template`).", flags=("-d", "--device", "--profile"),
                         metavar="PROFILE", required=True)
    output_dir: Path = option(Path("edgeopt-out"), "Folder for the artifacts and manifest.json.", read=Path,
                              flags=("-o", "--output"), kind=Path, folder=True)
    input_shape: Tuple[str, ...] = option(
        (), "Input shape, NAME=SHAPE for a named input (NAME= or NAME=scalar: a scalar); repeat per input. Dims "
            "the model declares are read from it, and dims the --calibration data fix are read from that: give "
            "only the others.", read=_strings, multiple=True, metavar="[NAME=]1,3,224,224")
    input_dtype: Tuple[str, ...] = option((), "Input dtype: one for all inputs, one per input in order, or NAME=DTYPE.",
                                          read=_strings, multiple=True, metavar="[NAME=]float32")
    input_value: Tuple[str, ...] = option(
        (), "A constant argument (a TorchScript int, a Python float), baked into the export; for an ONNX input, "
            "the value it is always fed.", read=_strings, multiple=True, metavar="NAME=16000")
    calibration: Tuple[Path, ...] = option(
        (), ".npy, or .npz keyed by input name, with representative inputs for INT8 calibration: an array "
            "[N, *input_shape] holds N samples (batch-first [N, *input_shape[1:]] also works); repeat for files "
            "of other shapes (sequence lengths) to calibrate over each.", read=_paths, multiple=True, kind=Path)
    eval_data: Optional[Path] = option(
        None, "Like --calibration, plus optional integer `labels` for the accuracy check: class indices [N], or "
              "for a CTC output the true symbols [N, L] padded with -1.", read=_path, kind=Path)
    formats: Tuple[str, ...] = option((), "Override the profile's formats (repeatable).", read=_names,
                                      flags=("--format",), choices=FORMATS, multiple=True)
    precisions: Tuple[str, ...] = option((), "Override the profile's precisions (repeatable).", read=_names,
                                         flags=("--precision",), choices=PRECISIONS, multiple=True)
    max_accuracy_drop: Optional[float] = option(
        None, "Fail when any artifact loses more than this many percentage points against FP32 (also the loss "
              "a recommended artifact may have; default 1).", kind=float, minimum=0, metavar="POINTS")
    min_cosine: Optional[float] = option(
        None, "Fail when any artifact's outputs have a cosine similarity to FP32 below X (any output kind).",
        kind=float, minimum=-1, maximum=1, metavar="X")
    output_kinds: Dict[str, str] = option(
        None, "How an output is judged (repeatable): " + ", ".join(KINDS) + ". Inferred from evidence (name, "
        "values, graph, labels) when not given.", read=_pairs(parse_output_kinds), flags=("--output-kind",),
        multiple=True, metavar="NAME=KIND")
    state: Dict[str, str] = option(
        None, "A recurrent state the model returns and takes back (repeatable); stateful models are judged "
              "streamed, each artifact fed its own state. Detected from names and shapes when not given.",
        read=_pairs(parse_state_pairs), multiple=True, metavar="INPUT=OUTPUT")
    stream_steps: int = option(64, "Steps a stateful model is streamed through (at most the evaluation samples).",
                               kind=int, minimum=2)
    metric: Optional[str] = option(None, "Your own metric: FN(reference, candidate, labels) -> number, higher is "
                                         "better; outputs come as {name: array}.", metavar="FILE.py:FN")
    max_metric_drop: Optional[float] = option(None, "Fail when an artifact's --metric is more than X below FP32's.",
                                              kind=float, metavar="X")
    threads: Optional[int] = option(None, "Threads for host timing (default: the profile's, capped at this "
                                          "machine's cores).", kind=int, minimum=1)
    calibrate_method: str = option(
        "minmax", "How ONNX INT8 activation ranges are chosen: minmax (each tensor's range), percentile (99.999% "
                  "of its values), entropy (onnxruntime's KL calibrator at its defaults, which keeps the whole "
                  "range, symmetric about 0).", choices=CALIBRATION_METHODS)
    max_calibration_samples: int = option(DEFAULT_MAX_CALIBRATION, "Calibrate on at most this many samples "
                                                                   "(0: all).", kind=int, minimum=0, metavar="N")
    max_eval_samples: int = option(DEFAULT_MAX_EVAL, "Validate on at most this many samples (0: all).", kind=int,
                                   minimum=0, metavar="N")
    weights: Optional[Path] = option(None, "state_dict for a file.py:factory model (loaded with weights_only=True).",
                                     read=_path, kind=Path)
    trust_model_code: bool = option(False, "Load a TorchScript MODEL, which runs code when loaded: only for files "
                                           "from a source you trust.", kind=bool)
    opset: int = option(18, "ONNX opset of the export.", kind=int, minimum=7)
    time_on_host: bool = option(True, "Skip the host timing (the recommendation then falls back to the profile's "
                                      "prediction).", kind=bool, negated_by="--no-timing")
    mixed_precision: bool = option(True, "Keep a failed INT8 as it is instead of keeping its most sensitive nodes "
                                         "in float until it passes.", kind=bool, negated_by="--no-mixed-precision")
    time_budget: float = option(
        600.0, "Seconds the whole conversion may take: the mixed-precision search of a failed INT8 stops before an "
               "attempt that would overrun it, keeping its best split so far (0: no limit).", kind=float, minimum=0,
        metavar="SECONDS")
    strict: bool = option(False, "Fail the conversion when any artifact cannot be built or run (by default it is "
                                 "listed as failed with its cause and the others go on).", kind=bool)
    build_version: Optional[str] = option(
        None, "A version for this build (a release name, a CI run number), kept in the manifest: `edgeopt fleet "
              "compare` and the report name the build by it (deploy --build-version overrides it).",
        read=check_build_version, metavar="VERSION")

    @classmethod
    def what(cls) -> str:
        return "convert option"


def specs() -> Dict[str, Spec]:
    """{option name: Spec}, in definition order (what the CLI and the API are generated from)."""
    return ConvertOptions.specs()


def defaults() -> Dict[str, Any]:
    return ConvertOptions.defaults()
