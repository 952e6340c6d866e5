"""ONNX Runtime on the GPU: its TensorRT or CUDA execution provider, which this build must have.

"onnxruntime-tensorrt" lets ONNX Runtime build TensorRT engines for the parts of the graph
TensorRT takes (the rest falls back to CUDA, then CPU), at the precision asked, with its own
engine cache under the agent's engine folder. "onnxruntime-cuda" runs the graph with CUDA kernels.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional, Union

from ..engine_cache import default_cache_dir
from ..errors import UnsupportedModelError
from ..precision import check_known
from .runner import GPU_PROVIDERS, TENSORRT_PROVIDER, OnnxRuntimeRunner


def provider_options(provider: str, precision: Optional[str], cache_dir: Union[str, Path, None]) -> Dict[str, Any]:
    """ONNX Runtime options for `provider` (empty for providers that take none from edgeopt).

    precision None enables neither FP16 nor INT8 (FP32 engines); a QDQ model needs "int8".
    """
    if provider != TENSORRT_PROVIDER:
        return {}
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return {
        "trt_fp16_enable": precision in ("fp16", "int8"),
        "trt_int8_enable": precision == "int8",
        "trt_engine_cache_enable": True,
        "trt_engine_cache_path": str(folder / "onnxruntime-tensorrt"),
    }


class OnnxRuntimeGpuRunner(OnnxRuntimeRunner):
    def __init__(
        self,
        path: Union[str, Path],
        runtime: str,
        provider: str,
        threads: Optional[int] = None,
        precision: Optional[str] = None,
        cache_dir: Union[str, Path, None] = None,
    ):
        """`runtime` is the name results report; `provider` the execution provider its row insists on."""
        if provider not in GPU_PROVIDERS:
            raise ValueError(f"provider must be one of {', '.join(GPU_PROVIDERS)}, got {provider!r}")
        check_known(precision)
        if precision is not None and provider != TENSORRT_PROVIDER:
            raise UnsupportedModelError(f"precision applies to ONNX Runtime's {TENSORRT_PROVIDER}, which builds an "
                                        f"engine; with runtime '{runtime}' the artifact's own precision is what runs: "
                                        "leave precision out")
        super().__init__(path, threads, required_provider=provider)
        self.runtime = runtime
        self.required_provider = provider
        self.precision = precision
        self.options = provider_options(provider, precision, cache_dir)
        if self.options:
            self.providers = [(p, self.options) if p == provider else p for p in self.providers]

    def _load(self) -> None:
        folder = self.options.get("trt_engine_cache_path")
        if folder:
            Path(folder).mkdir(parents=True, exist_ok=True)
        super()._load()
        if self.required_provider not in self.providers:
            # ONNX Runtime lists a provider its build has even where its libraries (CUDA, TensorRT)
            # are missing, and then falls back with only a warning: that would be another runtime.
            running = ", ".join(self.providers)
            self._close()
            raise UnsupportedModelError(
                f"onnxruntime could not start {self.required_provider} for {self.path.name} and fell back to "
                f"{running}; check that this machine's CUDA/TensorRT libraries match the onnxruntime build"
            )

    def describe(self) -> Dict[str, Any]:
        described = super().describe()
        described["precision"] = self.precision
        if self.options:
            described["provider_options"] = dict(self.options)
        return described
