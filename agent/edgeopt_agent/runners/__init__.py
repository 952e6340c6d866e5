"""Model runners: one small interface (load, infer, close) over ONNX Runtime and TFLite.

    from edgeopt_agent.runners import open_runner
    with open_runner("model.tflite", threads=4) as runner:
        outputs = runner.infer({"input": image})

`open_runner` picks the runtime from the file (or `runtime=`), imports it, and returns the runner
unloaded; `load()` (or entering the `with` block) parses the model. Importing this package
imports no numpy or runtime, so a daemon can use `resolve_runtime` and stay small.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

from .errors import ArtifactError, InputError, UnsupportedModelError, looks_like_out_of_memory
from .formats import FORMAT_RUNTIMES, RUNTIMES, detect_format, resolve_runtime

if TYPE_CHECKING:  # pragma: no cover
    from .base import Runner, TensorInfo
    from .quantization import Quantization, dequantize, quantize

# Names that live in modules needing numpy, imported on first use.
_LAZY = {
    "Runner": ".base",
    "TensorInfo": ".base",
    "Quantization": ".quantization",
    "quantize": ".quantization",
    "dequantize": ".quantization",
}

__all__ = [
    "ArtifactError",
    "FORMAT_RUNTIMES",
    "InputError",
    "Quantization",
    "RUNTIMES",
    "Runner",
    "TensorInfo",
    "UnsupportedModelError",
    "dequantize",
    "detect_format",
    "looks_like_out_of_memory",
    "open_runner",
    "quantize",
    "resolve_runtime",
]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def open_runner(
    path: Union[str, Path], threads: Optional[int] = None, runtime: Optional[str] = None, **options: Any
) -> "Runner":
    """A runner for `path`, not yet loaded.

    runtime: "onnxruntime" (best execution provider present: TensorRT, CUDA, then CPU),
    "tensorrt" (ONNX Runtime's TensorRT provider, which must be present), or "tflite".
    options: `xnnpack=False` for TFLite.
    """
    if threads is not None and threads < 1:
        raise InputError(f"threads must be at least 1, got {threads}")
    chosen = resolve_runtime(path, runtime)
    if chosen == "tflite":
        from .tflite_runner import TFLiteRunner

        return TFLiteRunner(path, threads=threads, **options)
    from .onnxruntime_runner import OnnxRuntimeRunner

    required = "TensorrtExecutionProvider" if chosen == "tensorrt" else None
    return OnnxRuntimeRunner(path, threads=threads, required_provider=required, **options)
