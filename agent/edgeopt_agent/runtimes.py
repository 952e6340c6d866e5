"""The runtimes edgeopt knows: one table every other place reads.

Adding a runtime is one row here and one backend (its runner, availability check, options and profiler;
the built-in ones are the folders of edgeopt_agent.runners). A row points at its backend's functions
themselves, so a reader can follow them; each backend package is light (it imports its runtime and numpy
inside those functions), so importing this table imports no runtime and no numpy.

  onnxruntime            ONNX Runtime with the best execution provider the build has
  onnxruntime-tensorrt   ONNX Runtime's TensorRT execution provider (must be in the build)
  onnxruntime-cuda       ONNX Runtime's CUDA execution provider (must be in the build)
  tensorrt               a native TensorRT engine, built on this machine from the ONNX file
  tflite                 TFLite / LiteRT
  ncnn                   Tencent's ncnn (CPU); the artifact bundles its .param and .bin (bundle.py)
  executorch             PyTorch's ExecuTorch, `.pte` programs delegated to XNNPACK

The lists below (RUNTIMES, FORMATS, ...) are computed from TABLE each time they are read, so a
reader that looks them up here when it needs them (`runtimes.FORMATS`) sees every row.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from .runners import executorch, ncnn, onnxruntime, tensorrt, tflite
from .runners.precision import PRECISIONS

# A row's hooks, each a function of its backend.
RunnerClass = Callable[[], type]  # imports the runtime's module and returns its Runner subclass
Availability = Callable[["Runtime"], Optional[str]]  # None when it can run here, else why not (or raises UserError)
SpecOptions = Callable[[Any], Dict[str, Any]]  # (benchmark spec) -> what open_runner takes beyond threads
# (runner, artifact, feeds, threads, runs, top) -> the per-op profile (edgeopt_agent.op_profile.summarize's shape)
Profiler = Callable[[Any, str, Mapping[str, Any], Optional[int], int, Optional[int]], Dict[str, Any]]


@dataclass(frozen=True)
class Format:
    """An artifact format: how a file of it is recognised and how the host writes one."""

    name: str
    title: str  # what users call it ("TFLite")
    suffix: str  # the artifact file's suffix, dot included
    magic: Optional[Tuple[int, bytes]] = None  # (offset, bytes) that identify a file whose suffix does not
    precisions: Tuple[str, ...] = ("fp32",)  # what the host can write in this format
    export_step: Optional[str] = None  # the converter step writing it; its Options take `precision=`
    export_base: Optional[str] = None  # the artifact key ("onnx-fp32") whose file it reads; None: the source model
    # How the roofline costs it: "own" (its own graph), "onnx" (the ONNX graph of its precision: the same
    # arithmetic), or None (it cannot: the recommendation says so).
    roofline: Optional[str] = None
    one_shape: bool = False  # takes one shape per input (traced or planned for it): data of several shapes rules it out


@dataclass(frozen=True)
class Runtime:
    name: str
    formats: Tuple[str, ...]  # artifact formats it runs
    runner: RunnerClass
    available: Availability
    gpu: bool = False  # runs on an NVIDIA GPU through CUDA
    builds_engine: bool = False  # builds an engine on the board, so takes the precision to build it at
    in_profiles: bool = True  # a device profile may list it (the provider variants are chosen when benchmarking)
    provider: Optional[str] = None  # the ONNX Runtime execution provider it insists on
    distributions: Tuple[str, ...] = ()  # the packages whose versions a result reports
    defines: Tuple[Format, ...] = ()  # the formats this runtime brings (a format is defined by one row)
    spec_options: Optional[SpecOptions] = None  # what its runner takes from a benchmark spec beyond threads
    profiler: Optional[Profiler] = None  # its per-op profiler
    no_profiler: str = ""  # without `profiler`: why there is no per-op profile
    int8_scheme: Optional[str] = None  # "symmetric": takes ONNX INT8 only as symmetric QDQ (explicit quantization)
    dynamic_int8: bool = False  # runs ONNX dynamic INT8 (MatMulInteger & co.), so the recipe may plan it
    executed_graph: bool = False  # the converter can cost the graph this runtime executes (graph_cost)
    # Why a timing on a host of another CPU architecture says nothing of a board (kernels written per
    # architecture); "": its kernels are alike enough that a large gap carries over.
    foreign_host_timing: str = ""
    notes: str = ""  # what this runtime does not offer, in words (runtime_report shows it)

    def runner_class(self) -> type:
        return self.runner()

    def unavailable_reason(self) -> Optional[str]:
        return self.available(self)


ONNX = Format("onnx", "ONNX", ".onnx", precisions=PRECISIONS, roofline="own")
TFLITE = Format("tflite", "TFLite", ".tflite", magic=(4, b"TFL3"), precisions=("fp32", "int8"),
                export_step="export-tflite", roofline="onnx", one_shape=True)
NCNN = Format("ncnn", "ncnn", ".ncnn", precisions=("fp32", "fp16"), export_step="export-ncnn",
              export_base="onnx-fp32", roofline="onnx", one_shape=True)
PTE = Format("pte", "ExecuTorch", ".pte", magic=(4, b"ET12"), precisions=("fp32", "int8"),
             export_step="export-executorch", roofline="onnx", one_shape=True)

# In order of preference: the first runtime that runs a format is its default.
TABLE: Tuple[Runtime, ...] = (
    Runtime("onnxruntime", ("onnx",), onnxruntime.runner_class, onnxruntime.unavailable_reason,
            distributions=("onnxruntime",), defines=(ONNX,), profiler=onnxruntime.profile_ops,
            dynamic_int8=True, executed_graph=True),
    Runtime("tensorrt", ("onnx",), tensorrt.runner_class, tensorrt.unavailable_reason,
            gpu=True, builds_engine=True, distributions=("tensorrt",), spec_options=tensorrt.spec_options,
            profiler=tensorrt.profile_ops, int8_scheme="symmetric"),
    Runtime("onnxruntime-tensorrt", ("onnx",), onnxruntime.gpu_runner_class, onnxruntime.unavailable_reason,
            gpu=True, builds_engine=True, in_profiles=False, provider="TensorrtExecutionProvider",
            spec_options=onnxruntime.tensorrt_provider_options,
            no_profiler="onnxruntime's TensorRT provider reports one fused node per engine"),
    Runtime("onnxruntime-cuda", ("onnx",), onnxruntime.gpu_runner_class, onnxruntime.unavailable_reason,
            gpu=True, in_profiles=False, provider="CUDAExecutionProvider", profiler=onnxruntime.profile_ops),
    Runtime("tflite", ("tflite",), tflite.runner_class, tflite.unavailable_reason,
            distributions=("ai-edge-litert", "tflite-runtime"), defines=(TFLITE,),
            no_profiler="the LiteRT/TFLite Python interpreter exposes no per-op profiler (its op profiling is C++ "
                        "and benchmark_model only)"),
    Runtime("ncnn", ("ncnn",), ncnn.runner_class, ncnn.unavailable_reason,
            distributions=("ncnn",), defines=(NCNN,), spec_options=ncnn.spec_options,
            no_profiler="ncnn's Python bindings expose no per-layer timing (its benchncnn tool is C++)",
            foreign_host_timing="ncnn's CPU kernels are hand-written per architecture and tuned for ARM NEON; on an "
                                "x86 host it measured 0.01x to 1.8x ONNX Runtime's speed by threads and load "
                                "(docs/BENCHMARKS.md)",
            notes="no INT8: ncnn's INT8 tools (ncnn2table, ncnn2int8) are in no registry package"),
    Runtime("executorch", ("pte",), executorch.runner_class, executorch.unavailable_reason,
            distributions=("executorch-numpy-runtime", "executorch"), defines=(PTE,),
            no_profiler="ExecuTorch's Python runtimes expose no per-op timing (ETDump needs a devtools build)"),
)


def _names(keep: Callable[[Runtime], bool]) -> Tuple[str, ...]:
    return tuple(r.name for r in TABLE if keep(r))


def _format_table() -> Dict[str, Format]:
    return {f.name: f for r in TABLE for f in r.defines}


_DERIVED: Dict[str, Callable[[], Any]] = {
    "BY_NAME": lambda: {r.name: r for r in TABLE},
    "RUNTIMES": lambda: _names(lambda r: True),
    "PROFILE_RUNTIMES": lambda: _names(lambda r: r.in_profiles),
    "ENGINE_RUNTIMES": lambda: _names(lambda r: r.builds_engine),
    "GPU_RUNTIMES": lambda: _names(lambda r: r.gpu),
    "ORT_PROVIDERS": lambda: {r.name: r.provider for r in TABLE if r.provider is not None},
    "DISTRIBUTIONS": lambda: tuple(dict.fromkeys(d for r in TABLE for d in r.distributions)),
    "FORMAT_TABLE": _format_table,
    "FORMATS": lambda: tuple(_format_table()),
    # For each format, the runtimes that can run it; the first is the default.
    "FORMAT_RUNTIMES": lambda: {fmt: _names(lambda r, fmt=fmt: fmt in r.formats) for fmt in _format_table()},
}


def __getattr__(name: str) -> Any:
    if name in _DERIVED:
        return _DERIVED[name]()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def format_of(name: str) -> Format:
    """The format called `name` (KeyError if no row defines it)."""
    return _format_table()[name]
