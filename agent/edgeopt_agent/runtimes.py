"""The runtimes edgeopt knows: one table every other place reads (stdlib only, nothing imported).

Adding a runtime is one row here and one runner module (with its availability check).

  onnxruntime            ONNX Runtime with the best execution provider the build has
  onnxruntime-tensorrt   ONNX Runtime's TensorRT execution provider (must be in the build)
  onnxruntime-cuda       ONNX Runtime's CUDA execution provider (must be in the build)
  tensorrt               a native TensorRT engine, built on this machine from the ONNX file
  tflite                 TFLite / LiteRT
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Tuple

PRECISIONS = ("fp32", "fp16", "int8")


@dataclass(frozen=True)
class Runtime:
    name: str
    formats: Tuple[str, ...]  # artifact formats it runs
    runner: str  # "module:Class" inside edgeopt_agent.runners, imported when first used
    available: str  # "module:function" inside edgeopt_agent.runners: function(runtime) -> None or why not
    gpu: bool = False  # runs on an NVIDIA GPU through CUDA
    builds_engine: bool = False  # builds an engine on the board, so takes the precision to build it at
    in_profiles: bool = True  # a device profile may list it (the provider variants are chosen when benchmarking)
    provider: Optional[str] = None  # the ONNX Runtime execution provider it insists on
    distributions: Tuple[str, ...] = ()  # the packages whose versions a result reports

    def runner_class(self) -> type:
        return _load(self.runner)

    def unavailable_reason(self) -> Optional[str]:
        return _load(self.available)(self)


def _load(target: str) -> Any:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(f".runners.{module}", __package__), name)


# In order of preference: the first runtime that runs a format is its default.
TABLE: Tuple[Runtime, ...] = (
    Runtime("onnxruntime", ("onnx",), "onnxruntime_runner:OnnxRuntimeRunner", "availability:onnxruntime_reason",
            distributions=("onnxruntime",)),
    Runtime("tensorrt", ("onnx",), "tensorrt_runner:TensorRTRunner", "availability:tensorrt_reason",
            gpu=True, builds_engine=True, distributions=("tensorrt",)),
    Runtime("onnxruntime-tensorrt", ("onnx",), "ort_gpu_runner:OnnxRuntimeGpuRunner",
            "availability:onnxruntime_reason", gpu=True, builds_engine=True, in_profiles=False,
            provider="TensorrtExecutionProvider"),
    Runtime("onnxruntime-cuda", ("onnx",), "ort_gpu_runner:OnnxRuntimeGpuRunner",
            "availability:onnxruntime_reason", gpu=True, in_profiles=False, provider="CUDAExecutionProvider"),
    Runtime("tflite", ("tflite",), "tflite_runner:TFLiteRunner", "availability:tflite_reason",
            distributions=("ai-edge-litert", "tflite-runtime")),
)
BY_NAME: Dict[str, Runtime] = {r.name: r for r in TABLE}


def _names(keep: Callable[[Runtime], bool]) -> Tuple[str, ...]:
    return tuple(r.name for r in TABLE if keep(r))


RUNTIMES = _names(lambda r: True)
PROFILE_RUNTIMES = _names(lambda r: r.in_profiles)
ENGINE_RUNTIMES = _names(lambda r: r.builds_engine)
GPU_RUNTIMES = _names(lambda r: r.gpu)
ORT_PROVIDERS = {r.name: r.provider for r in TABLE if r.provider is not None}
DISTRIBUTIONS = tuple(dict.fromkeys(d for r in TABLE for d in r.distributions))
FORMATS = tuple(dict.fromkeys(f for r in TABLE for f in r.formats))
# For each format, the runtimes that can run it; the first is the default.
FORMAT_RUNTIMES = {fmt: _names(lambda r, fmt=fmt: fmt in r.formats) for fmt in FORMATS}
