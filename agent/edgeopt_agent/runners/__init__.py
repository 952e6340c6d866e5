"""Model runners: one small interface (load, infer, close) over ONNX Runtime, TensorRT and TFLite.

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
from .. import runtimes
from ..runtimes import ENGINE_RUNTIMES, FORMAT_RUNTIMES, ORT_PROVIDERS, PRECISIONS, RUNTIMES
from .formats import detect_format, resolve_runtime

if TYPE_CHECKING:  # pragma: no cover
    from .base import Runner, TensorInfo
    from .quantization import Quantization, dequantize, quantize

# Names that live in modules needing numpy or a runtime, imported on first use.
_LAZY = {
    "Runner": ".base",
    "runtime_report": ".availability",
    "unavailable_reason": ".availability",
    "TensorInfo": ".base",
    "Quantization": ".quantization",
    "quantize": ".quantization",
    "dequantize": ".quantization",
}

__all__ = [
    "ArtifactError",
    "ENGINE_RUNTIMES",
    "FORMAT_RUNTIMES",
    "InputError",
    "ORT_PROVIDERS",
    "PRECISIONS",
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
    "runtime_report",
    "unavailable_reason",
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
    "onnxruntime-tensorrt" / "onnxruntime-cuda" (ONNX Runtime's TensorRT / CUDA provider, which
    the build must have), "tensorrt" (a native TensorRT engine built here from the ONNX file), or
    "tflite", "ncnn" or "executorch" (edgeopt_agent.runtimes lists them). A runtime this machine lacks
    raises UnsupportedModelError saying why.
    options: `session_config` (onnxruntime session config entries) for "onnxruntime"; `xnnpack=False` for TFLite; `precision`, `cache_dir` for "tensorrt" and
    "onnxruntime-tensorrt"; `max_batch`, `workspace_mb` for "tensorrt".
    """
    if threads is not None and threads < 1:
        raise InputError(f"threads must be at least 1, got {threads}")
    chosen = runtimes.BY_NAME[resolve_runtime(path, runtime)]
    runner = chosen.runner_class()
    if chosen.provider is not None:  # one runner class serves every ONNX Runtime provider runtime
        return runner(path, chosen.name, threads=threads, **options)
    return runner(path, threads=threads, **options)
