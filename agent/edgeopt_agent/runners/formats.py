"""Which runtime runs which file, decided from the file alone (stdlib only, nothing loaded)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Union

from .errors import ArtifactError, UnsupportedModelError

RUNTIMES = ("onnxruntime", "tflite", "tensorrt")
# For each format, the runtimes that can run it; the first is the default.
FORMAT_RUNTIMES = {"onnx": ("onnxruntime", "tensorrt"), "tflite": ("tflite",)}


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
