"""Which runtime runs which file, decided from the file alone (stdlib only, nothing loaded).

The runtimes themselves are listed in edgeopt_agent.runtimes.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Union

from ..runtimes import ENGINE_RUNTIMES, FORMAT_RUNTIMES, PRECISIONS, RUNTIMES
from .errors import ArtifactError, UnsupportedModelError


def detect_format(path: Union[str, Path]) -> str:
    """"onnx" or "tflite", from the extension or, failing that, the file's first bytes."""
    path = Path(path)
    if not path.is_file():
        raise ArtifactError(f"artifact not found: {path}")
    suffix = path.suffix.lower()
    if suffix in (".onnx", ".tflite"):
        return suffix[1:]
    with path.open("rb") as f:
        head = f.read(8)
    if head[4:8] == b"TFL3":  # the FlatBuffer file identifier of TFLite models
        return "tflite"
    raise ArtifactError(f"{path} is not a model: expected a .onnx or .tflite file")


def resolve_runtime(path: Union[str, Path], runtime: Optional[str] = None) -> str:
    """The runtime that will run `path`: `runtime` if given and able to, else the format's default."""
    fmt = detect_format(path)
    allowed = FORMAT_RUNTIMES[fmt]
    if runtime is None:
        return allowed[0]
    if runtime not in RUNTIMES:
        raise UnsupportedModelError(f"unknown runtime '{runtime}'; available: {', '.join(RUNTIMES)}")
    if runtime not in allowed:
        raise UnsupportedModelError(f"runtime '{runtime}' cannot run a .{fmt} file; use: {', '.join(allowed)}")
    return runtime


def check_precision(runtime: Optional[str], precision: Optional[str]) -> None:
    """Refuse a precision the runtime cannot act on (runtime None: not known yet, only the name is checked)."""
    if precision is None:
        return
    if precision not in PRECISIONS:
        raise UnsupportedModelError(f"unknown precision '{precision}'; available: {', '.join(PRECISIONS)}")
    if runtime is not None and runtime not in ENGINE_RUNTIMES:
        raise UnsupportedModelError(
            f"precision applies to runtimes that build an engine on the board ({', '.join(ENGINE_RUNTIMES)}); "
            f"with runtime '{runtime}' the artifact's own precision is what runs: leave precision out"
        )
