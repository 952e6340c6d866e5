"""`open_runner`: the runner for a file, from the runtime table's row (imported when first opened)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

from .. import runtimes
from .errors import InputError
from .formats import resolve_runtime

if TYPE_CHECKING:  # pragma: no cover
    from .base import Runner


def open_runner(
    path: Union[str, Path], threads: Optional[int] = None, runtime: Optional[str] = None, **options: Any
) -> "Runner":
    """A runner for `path`, not yet loaded.

    runtime: "onnxruntime" (best execution provider present: TensorRT, CUDA, then CPU),
    "onnxruntime-tensorrt" / "onnxruntime-cuda" (ONNX Runtime's TensorRT / CUDA provider, which
    the build must have), "tensorrt" (a native TensorRT engine built here from the ONNX file), or
    "tflite", "ncnn" or "executorch" (edgeopt_agent.runtimes lists them). A runtime this machine lacks
    raises UnsupportedModelError saying why.
    options: `session_config` (onnxruntime session config entries) for "onnxruntime"; `xnnpack=False` for
    TFLite; `precision`, `cache_dir` for "tensorrt" and "onnxruntime-tensorrt"; `max_batch`, `workspace_mb`
    for "tensorrt"; `extract_dir`, `fp16` for "ncnn".
    """
    if threads is not None and threads < 1:
        raise InputError(f"threads must be at least 1, got {threads}")
    chosen = runtimes.BY_NAME[resolve_runtime(path, runtime)]
    runner = chosen.runner_class()
    if chosen.provider is not None:  # one runner class serves every ONNX Runtime provider runtime
        return runner(path, chosen.name, chosen.provider, threads=threads, **options)
    return runner(path, threads=threads, **options)
