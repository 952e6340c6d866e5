"""Building a TensorRT engine from an ONNX file, on the machine that will run it.

Works with the TensorRT 8.x (JetPack 4.6 and 5) and 10.x (JetPack 6) Python APIs: explicit batch
networks, `build_serialized_network`, a timing cache, and the workspace set through
`set_memory_pool_limit` where it exists (8.4+) or `max_workspace_size` before that.

INT8 comes only from explicit quantization: a QDQ ONNX built with the INT8 flag (and FP16, so
the layers left unquantized run in FP16), never from a calibrator, which TensorRT 10 deprecates.
TensorRT 11 builds every network strongly typed and has no FP16/INT8 builder flags: there an
engine's precision is the ONNX file's own (FP16 from the FP16 ONNX, INT8 from the QDQ ONNX).
"""
from __future__ import annotations

import importlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, List, Mapping, Optional, Sequence, Tuple

from ..errors import ArtifactError, UnsupportedModelError, looks_like_out_of_memory
from ..precision import PRECISIONS

TENSORRT_HINT = (
    "on a Jetson, TensorRT's Python bindings come with JetPack (sudo apt install python3-libnvinfer); "
    "elsewhere install TensorRT from NVIDIA's package index"
)


def import_tensorrt() -> Any:
    """The `tensorrt` module (8.0 or newer), or UnsupportedModelError saying why it cannot be had."""
    try:
        trt = importlib.import_module("tensorrt")
    except (ImportError, OSError) as exc:  # OSError: the bindings are there but libnvinfer is not
        raise UnsupportedModelError(f"TensorRT is not installed ({exc}); {TENSORRT_HINT}") from None
    if not hasattr(trt, "Builder"):  # e.g. a folder named tensorrt on sys.path, imported as a namespace package
        where = ", ".join(getattr(trt, "__path__", [])) or (getattr(trt, "__file__", None) or "?")
        raise UnsupportedModelError(f"TensorRT is not installed (the 'tensorrt' module found, {where}, is not TensorRT); {TENSORRT_HINT}")
    version = getattr(trt, "__version__", "")
    if _major(version) < 8:
        raise UnsupportedModelError(f"TensorRT {version or '(unknown version)'} is too old: edgeopt needs 8.0 or newer")
    return trt


def _major(version: str) -> int:
    try:
        return int(version.split(".")[0])
    except ValueError:
        return 0


_LOGGER: Optional[Any] = None


def make_logger(trt: Any) -> Any:
    """The process's TensorRT logger, emptied: it keeps the warnings and errors logged from now on,
    so failures can say what TensorRT said. One per process, because TensorRT keeps the first
    logger it is given and sends every later builder's and runtime's messages there."""
    global _LOGGER
    if _LOGGER is None:

        class CapturingLogger(trt.ILogger):
            def __init__(self) -> None:
                trt.ILogger.__init__(self)
                self.messages: List[str] = []

            def log(self, severity: Any, msg: str) -> None:
                if int(severity) <= int(trt.ILogger.Severity.WARNING):
                    self.messages.append(str(msg).strip())
                    del self.messages[:-50]

            def errors(self) -> List[str]:
                return self.messages[-5:]

        _LOGGER = CapturingLogger()
    _LOGGER.messages.clear()
    return _LOGGER


def create(trt_class: Any, logger: Any, what: str) -> Any:
    """trt.Builder(logger) or trt.Runtime(logger), or UnsupportedModelError with TensorRT's reason."""
    try:
        made = trt_class(logger)
    except TypeError as exc:  # pybind11 raises this when TensorRT's factory returns null
        made, detail = None, str(exc)
    else:
        detail = "no reason given"
    if made is None:
        said = "; ".join(logger.errors()) or detail
        raise UnsupportedModelError(f"TensorRT could not create a {what} (is the GPU usable?): {said}")
    return made


# -- precision ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PrecisionPlan:
    precision: str
    flags: Tuple[str, ...]  # names in trt.BuilderFlag
    notes: Tuple[str, ...] = ()


def strongly_typed_only(trt: Any) -> bool:
    """True where TensorRT has no precision builder flags (11.0 and newer): types come from the network."""
    return not hasattr(trt.BuilderFlag, "FP16")


def plan_precision(
    requested: Optional[str],
    model_precision: str,
    fast_fp16: Optional[bool],
    fast_int8: Optional[bool],
    model_name: str = "the model",
    strongly_typed: bool = False,
) -> PrecisionPlan:
    """The builder flags for building `model_name` at `requested` (None: at the model's own precision).

    model_precision: "int8" when the network holds Q/DQ layers, "fp16" when it holds FP16
    tensors, else "fp32". fast_fp16/fast_int8: what TensorRT says of this GPU (None: not asked).
    strongly_typed: TensorRT takes every layer's precision from the network (see strongly_typed_only).
    """
    precision = requested or model_precision
    if precision not in PRECISIONS:
        raise UnsupportedModelError(f"unknown precision '{precision}'; available: {', '.join(PRECISIONS)}")
    if model_precision == "int8" and precision != "int8":
        raise UnsupportedModelError(
            f"{model_name} holds Q/DQ nodes (explicit INT8 quantization), so it builds only at precision int8; "
            f"for {precision}, give the FP32 ONNX artifact"
        )
    if precision == "int8" and model_precision != "int8":
        raise UnsupportedModelError(
            f"precision int8 needs an INT8 QDQ ONNX (explicit quantization, as `edgeopt convert` makes for Jetson "
            f"profiles with INT8); {model_name} has no Q/DQ nodes and edgeopt does not use implicit calibration"
        )
    if precision == "int8" and fast_int8 is False:
        raise UnsupportedModelError(
            "this GPU has no fast INT8 path (TensorRT: platform_has_fast_int8 is False); build at fp16 instead"
        )
    if strongly_typed:
        return _strongly_typed_plan(precision, model_precision, model_name)
    notes: List[str] = []
    if precision in ("fp16", "int8") and fast_fp16 is False:
        notes.append("this GPU has no fast FP16: TensorRT may choose FP32 kernels for FP16 layers")
    if precision == "fp32" and model_precision == "fp16":
        notes.append("the model's FP16 tensors run without the FP16 builder flag: TensorRT may compute them in FP32")
    flags: Tuple[str, ...] = ()
    if precision == "fp16":
        flags = ("FP16",)
    elif precision == "int8":
        # FP16 as well: the layers TensorRT cannot fuse into INT8 then run in FP16, not FP32.
        flags = ("INT8",) if fast_fp16 is False else ("INT8", "FP16")
    return PrecisionPlan(precision, flags, tuple(notes))


_ARTIFACT_FOR = {"fp32": "the FP32 ONNX artifact", "fp16": "the FP16 ONNX artifact (`edgeopt convert` makes one for Jetson profiles)"}


def _strongly_typed_plan(precision: str, model_precision: str, model_name: str) -> PrecisionPlan:
    if precision != model_precision:
        raise UnsupportedModelError(
            f"this TensorRT builds every network strongly typed (TensorRT 11 has no FP16/INT8 builder flags), so "
            f"{model_name} builds only at its own precision, {model_precision}; for {precision}, give {_ARTIFACT_FOR[precision]}"
        )
    notes: Tuple[str, ...] = ()
    if precision == "int8":
        notes = ("strongly typed build: layers outside Q/DQ pairs run at the ONNX file's float type (FP32 in edgeopt's "
                 "INT8 QDQ ONNX), not in FP16 as TensorRT 8-10 builds with the FP16 flag run them",)
    return PrecisionPlan(precision, (), notes)


# -- parsing ----------------------------------------------------------------------------------------


@dataclass
class ParsedNetwork:
    builder: Any
    network: Any
    parser: Any  # kept alive: the network refers to weights the parser owns

    @property
    def inputs(self) -> List[Tuple[str, Tuple[int, ...]]]:
        return [
            (self.network.get_input(i).name, tuple(int(d) for d in self.network.get_input(i).shape))
            for i in range(self.network.num_inputs)
        ]


def network_flags(trt: Any) -> int:
    """Explicit batch: required before TensorRT 10, the only mode (and the flag deprecated) since."""
    flag = getattr(trt.NetworkDefinitionCreationFlag, "EXPLICIT_BATCH", None)
    if flag is None or _major(trt.__version__) >= 10:
        return 0
    return 1 << int(flag)


def parse_onnx(trt: Any, logger: Any, path: Path) -> ParsedNetwork:
    builder = create(trt.Builder, logger, "builder")
    network = builder.create_network(network_flags(trt))
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(path)):
        errors = [str(parser.get_error(i)).strip() for i in range(parser.num_errors)]
        detail = "; ".join(errors or logger.errors()) or "no reason given"
        raise ArtifactError(f"TensorRT cannot parse {path.name}: {detail}")
    return ParsedNetwork(builder, network, parser)


def model_precision(trt: Any, network: Any) -> str:
    """"int8" for a network with Q/DQ layers, "fp16" for one with FP16 tensors, else "fp32"."""
    quantizing = (trt.LayerType.QUANTIZE, trt.LayerType.DEQUANTIZE)
    half = trt.DataType.HALF
    has_half = any(network.get_input(i).dtype == half for i in range(network.num_inputs))
    for index in range(network.num_layers):
        layer = network.get_layer(index)
        if layer.type in quantizing:
            return "int8"
        if not has_half:
            has_half = any(layer.get_output(j).dtype == half for j in range(layer.num_outputs))
    return "fp16" if has_half else "fp32"


def profile_shapes(
    inputs: Sequence[Tuple[str, Tuple[int, ...]]],
    max_batch: int,
    known: Optional[Mapping[str, Sequence[int]]] = None,
    ranges: Optional[Mapping[str, Sequence[Sequence[int]]]] = None,
) -> List[Tuple[str, Tuple[int, ...], Tuple[int, ...], Tuple[int, ...]]]:
    """(name, min, opt, max) for each input with a dynamic axis.

    A dynamic batch axis (0) spans 1..max_batch. Other dynamic axes are built for the size the
    input description gives (`known`: the shapes the manifest recorded as validated) and span
    the sizes the conversion's data held (`ranges`: [min shape, max shape]); without a size they
    cannot be built.
    """
    shapes = []
    for name, shape in inputs:
        if all(d >= 0 for d in shape):
            continue
        given = list(known[name]) if known and name in known else None
        if given is not None and len(given) != len(shape):
            raise UnsupportedModelError(f"input '{name}' has shape {list(shape)}, but its description says {given}")
        low, high = (list(b) for b in ranges[name]) if ranges and name in ranges else (given, given)
        smallest, optimal, largest = [], [], []
        for axis, d in enumerate(shape):
            if d >= 0:
                smallest.append(d)
                optimal.append(d)
                largest.append(d)
            elif axis == 0:
                smallest.append(1)
                optimal.append(max_batch)
                largest.append(max_batch)
            elif given is not None:
                smallest.append(min(low[axis], given[axis]))
                optimal.append(given[axis])
                largest.append(max(high[axis], given[axis]))
            else:
                dynamic = [a for a, x in enumerate(shape) if x < 0 and a != 0]
                raise UnsupportedModelError(
                    f"input '{name}' has dynamic sizes on axes {dynamic} ({list(shape)}); TensorRT needs their sizes: "
                    f"give the input's shape (edgeopt bench --input-shape {name}=...; a deploy sends the manifest's)"
                )
        shapes.append((name, tuple(smallest), tuple(optimal), tuple(largest)))
    return shapes


# -- building -----------------------------------------------------------------------------------------


@dataclass
class BuiltEngine:
    plan: bytes
    timing_cache: bytes
    build_s: float
    precision: str
    notes: List[str] = field(default_factory=list)


def set_workspace(trt: Any, config: Any, nbytes: int) -> None:
    if hasattr(config, "set_memory_pool_limit"):
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, nbytes)
    else:  # TensorRT 8.0-8.3
        config.max_workspace_size = nbytes


def build_engine(
    trt: Any,
    logger: Any,
    parsed: ParsedNetwork,
    precision: Optional[str],
    max_batch: int,
    workspace_mb: int,
    timing_cache: bytes,
    model_name: str,
    known_shapes: Optional[Mapping[str, Sequence[int]]] = None,
    known_ranges: Optional[Mapping[str, Sequence[Sequence[int]]]] = None,
) -> BuiltEngine:
    """Build `parsed` into a serialized engine; timing_cache is the serialized cache to start from (b"": none)."""
    builder = parsed.builder
    plan = plan_precision(
        precision,
        model_precision(trt, parsed.network),
        getattr(builder, "platform_has_fast_fp16", None),
        getattr(builder, "platform_has_fast_int8", None),
        model_name,
        strongly_typed=strongly_typed_only(trt),
    )
    config = builder.create_builder_config()
    set_workspace(trt, config, workspace_mb << 20)
    for flag in plan.flags:
        config.set_flag(getattr(trt.BuilderFlag, flag))
    shapes = profile_shapes(parsed.inputs, max_batch, known_shapes, known_ranges)
    if shapes:
        profile = builder.create_optimization_profile()
        for name, smallest, optimal, largest in shapes:
            profile.set_shape(name, smallest, optimal, largest)
        config.add_optimization_profile(profile)
    notes = list(plan.notes)
    cache = config.create_timing_cache(timing_cache)
    if cache is None or not config.set_timing_cache(cache, False):
        if timing_cache:
            notes.append("the stored timing cache was refused by this TensorRT; built with a new one")
        config.set_timing_cache(config.create_timing_cache(b""), False)

    start = time.perf_counter()
    serialized = builder.build_serialized_network(parsed.network, config)
    build_s = time.perf_counter() - start
    if serialized is None:
        said = "; ".join(logger.errors()) or "no reason given"
        if looks_like_out_of_memory(said):
            raise MemoryError(f"TensorRT ran out of memory building {model_name} at {plan.precision}: {said}")
        raise UnsupportedModelError(f"TensorRT could not build {model_name} at {plan.precision}: {said}")
    used_cache = config.get_timing_cache()
    return BuiltEngine(
        plan=bytes(memoryview(serialized)),
        timing_cache=bytes(memoryview(used_cache.serialize())) if used_cache is not None else b"",
        build_s=build_s,
        precision=plan.precision,
        notes=notes,
    )
