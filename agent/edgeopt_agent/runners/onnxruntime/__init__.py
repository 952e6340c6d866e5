"""The ONNX Runtime backend, as the runtime table's rows use it: "onnxruntime" (the best execution provider
the build has) and "onnxruntime-tensorrt" / "onnxruntime-cuda" (the provider the row names, or nothing).

    runner.py      OnnxRuntimeRunner, and the choice of execution providers
    gpu_runner.py  OnnxRuntimeGpuRunner: one provider insisted on; the TensorRT provider's options
    importing.py   importing onnxruntime with its telemetry off (every import goes through it)
    profiler.py    onnxruntime's per-op profiler

Importing this package imports neither numpy nor onnxruntime: the functions below do, when called.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Optional

from .profiler import profile_ops

if TYPE_CHECKING:  # pragma: no cover
    from ...runtimes import Runtime

__all__ = ["gpu_runner_class", "profile_ops", "runner_class", "tensorrt_provider_options", "unavailable_reason"]


def runner_class() -> type:
    from .runner import OnnxRuntimeRunner

    return OnnxRuntimeRunner


def gpu_runner_class() -> type:
    from .gpu_runner import OnnxRuntimeGpuRunner

    return OnnxRuntimeGpuRunner


def unavailable_reason(runtime: "Runtime") -> Optional[str]:
    """None when onnxruntime imports here and its build has the provider the row insists on, else why not."""
    from .importing import import_onnxruntime

    ort = import_onnxruntime("agent-onnx", "ONNX models")
    available = list(ort.get_available_providers())
    if runtime.provider is not None and runtime.provider not in available:
        return f"this onnxruntime build ({ort.__version__}) has no {runtime.provider}; it has: {', '.join(available)}"
    return None


def tensorrt_provider_options(spec: Any) -> Dict[str, Any]:
    """What the TensorRT provider's runner takes from a benchmark spec: the precision to build its engines
    at and the folder to cache them in."""
    return {"precision": spec.precision, "cache_dir": spec.engine_cache_dir}
