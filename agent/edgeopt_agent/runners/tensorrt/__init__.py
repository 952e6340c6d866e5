"""The TensorRT backend: an engine built on the board from the ONNX artifact, cached, run on a CUDA stream.

    runner.py        TensorRTRunner: load (engine from the cache, or built), infer, per-layer profile
    build.py         importing TensorRT, parsing the ONNX, the precision plan, the optimization profile, the build
    options.py       the engine's settings, each defined once, and what the runner takes from a benchmark spec
    cuda_runtime.py  the CUDA runtime calls the runner makes (cuda-python)
    tensor_io.py     engine inputs and outputs across TensorRT's two I/O APIs
    layers.py        per-layer times from TensorRT's IProfiler

Importing this package imports neither numpy, TensorRT nor CUDA: the functions below do, when called.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional

from .options import spec_options

if TYPE_CHECKING:  # pragma: no cover
    from ...runtimes import Runtime

__all__ = ["profile_ops", "runner_class", "spec_options", "unavailable_reason"]


def runner_class() -> type:
    from .runner import TensorRTRunner

    return TensorRTRunner


def unavailable_reason(runtime: "Runtime") -> Optional[str]:
    """None when TensorRT imports here and CUDA finds a GPU; otherwise UnsupportedModelError says why."""
    from .build import import_tensorrt
    from .cuda_runtime import CudaRuntime

    import_tensorrt()
    CudaRuntime.load()
    return None


def profile_ops(runner: Any, artifact: str, feeds: Mapping[str, Any], threads: Optional[int], runs: int,
                top: Optional[int]) -> Dict[str, Any]:
    """The row's per-op profiler: TensorRT's IProfiler on the runner's own engine (attached for good, so
    the benchmark calls it after every measurement)."""
    result = runner.profile_layers(runner.prepare(feeds), runs)
    result["nodes"] = result["nodes"][:top] if top else result["nodes"]
    return result
