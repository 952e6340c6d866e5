"""From a device profile (and the user's overrides) to the list of artifacts to build.

Decisions come from what the profile says about the hardware (ISA features, accelerators,
runtimes), never from the board's name.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Optional, Sequence, Tuple

from edgeopt_agent.errors import UserError
from edgeopt_agent.profiles import Artifact, DeviceProfile
from edgeopt_agent import runtimes
from edgeopt_agent.runtimes import PRECISIONS

from .passes.base import Step, StepCall, step_class
from .passes.export_onnx import OnnxExportOptions
from .passes.export_tflite import TfliteOptions
from .passes.fp16_onnx import OnnxFp16Options
from .passes.preprocess_onnx import PreprocessOptions
from .passes.quantize_dynamic import RECURRENT_OPS, TRANSFORMER_OPS, OnnxDynamicOptions
from .passes.quantize_onnx import OnnxInt8Options
from .passes.quantize_weight_only import WeightOnlyOptions


@dataclass(frozen=True)
class PlannedArtifact:
    format: str
    precision: str
    why: str
    variant: str = ""  # a second mode of the same format and precision, e.g. "dynamic"
    steps: Tuple[StepCall, ...] = ()
    base: Optional[str] = None  # key of the artifact whose file the first step reads (None: the source)

    @property
    def int8(self) -> Optional[OnnxInt8Options]:
        """The static INT8 scheme, as its quantize step has it (None for every other artifact)."""
        return next((c.options for c in self.steps if isinstance(c.options, OnnxInt8Options)), None)

    @property
    def main_step(self) -> Step:
        """The step that writes the artifact: the last one."""
        return self.steps[-1].build()

    @property
    def label(self) -> str:
        return self.main_step.label()

    @property
    def calibrates(self) -> bool:
        return any(c.build().calibrates for c in self.steps)

    @property
    def scales_per_run(self) -> bool:
        """Its activations are quantized with scales from each run (dynamic INT8)."""
        return any(step_class(c.name).scales_per_run for c in self.steps)

    @property
    def key(self) -> str:
        return f"{self.format}-{self.precision}" + (f"-{self.variant}" if self.variant else "")

    @property
    def filename(self) -> str:
        return f"model.{self.precision}{'-' + self.variant if self.variant else ''}.{self.format}"


def _steps(fmt: str, precision: str, int8: Optional[OnnxInt8Options], opset: int) -> Tuple[StepCall, ...]:
    if fmt != "onnx":  # a format a runtime's row brings: its export step writes each precision it offers
        name = runtimes.format_of(fmt).export_step
        return (StepCall(name, step_class(name).Options(precision=precision)),)
    if precision == "fp32":
        return (StepCall("export-onnx", OnnxExportOptions(opset=opset)),)
    if precision == "fp16":
        return (StepCall("convert-onnx-fp16", OnnxFp16Options()),)
    return (StepCall("preprocess-onnx", PreprocessOptions()), StepCall("quantize-onnx-static", int8))


def _engine_ready(item: PlannedArtifact) -> bool:
    """Whether a runtime that builds an engine on the board (TensorRT) can take this artifact: an ONNX
    file in float, or INT8 only as explicit QDQ in TensorRT's layout (symmetric activations)."""
    if item.format != "onnx":
        return False
    if item.precision != "int8":
        return True
    return item.variant == "" and item.int8 is not None and item.int8.symmetric_activations


def board_config(profile: DeviceProfile, item: PlannedArtifact) -> Dict[str, Any]:
    """How the board runs this artifact: the first runtime of the profile that can run its format (a
    runtime that builds an engine only where the artifact suits one), the precision such an engine is
    built at (the artifact's own: FP32/FP16 from the float ONNX, INT8 from the QDQ ONNX; None for a
    runtime that runs the file as it is), the profile's threads, the profile's other runtimes for the
    format to fall back to when the board lacks the first. The board reads each of them from the job; how it
    builds an engine (workspace, cache) is its runtime's own (edgeopt_agent.runners.tensorrt.options).
    """
    rows = runtimes.BY_NAME
    able = [name for name in profile.runtimes if item.format in rows[name].formats
            and (not rows[name].builds_engine or _engine_ready(item))]
    if not able:  # the profile lists none for this format: the format's default runtime
        able = [runtimes.FORMAT_RUNTIMES[item.format][0]]
    runtime = rows[able[0]]
    return {
        "runtime": runtime.name,
        "precision": item.precision if runtime.builds_engine else None,
        "threads": profile.default_threads,
        "fallback_runtimes": able[1:],
    }


@dataclass
class Plan:
    artifacts: List[PlannedArtifact]
    notes: List[str] = field(default_factory=list)


def onnx_int8_options(profile: DeviceProfile, calibrate_method: str = "minmax") -> OnnxInt8Options:
    """The INT8 scheme whose kernels are fast and exact on the target's ISA."""
    symmetric = any(runtimes.BY_NAME[r].int8_scheme == "symmetric" for r in profile.runtimes)
    if symmetric and profile.accelerator_supports("int8"):
        return OnnxInt8Options.for_tensorrt(calibrate_method)
    return cpu_int8_options(profile, calibrate_method)


def cpu_int8_options(profile: DeviceProfile, calibrate_method: str = "minmax") -> OnnxInt8Options:
    """The INT8 scheme of the board's CPU runtimes (its accelerator's, if any, aside)."""
    if profile.cpu.arch == "x86_64":
        has_vnni = profile.cpu.has("avx512_vnni") or profile.cpu.has("avx_vnni")
        # Without VNNI, U8xS8 products go through VPMADDUBSW whose int16 sums saturate:
        # 7-bit weights (reduce_range) keep them exact.
        return OnnxInt8Options("uint8", "int8", reduce_range=not has_vnni, calibrate_method=calibrate_method)
    # Arm: S8S8 maps onto SDOT where present and onto the signed NEON kernels elsewhere.
    return OnnxInt8Options("int8", "int8", reduce_range=False, calibrate_method=calibrate_method)


def _why(profile: DeviceProfile, art: Artifact, int8: Optional[OnnxInt8Options]) -> str:
    if art.precision == "int8" and int8 is not None:
        return f"{int8.scheme} for {profile.cpu.arch}" + (
            " without VNNI" if int8.reduce_range else "") + (" (TensorRT explicit quantization)" if int8.symmetric_activations else "")
    if art.precision == "fp16":
        return "FP16 for the GPU (" + ", ".join(a.name for a in profile.accelerators if "fp16" in a.precisions) + ")"
    if art.format == "tflite" and art.precision == "int8":
        return "full-integer TFLite with INT8 inputs/outputs (PT2E, per-channel weights)"
    if art.format != "onnx":
        label = step_class(runtimes.format_of(art.format).export_step)(precision=art.precision).label()
        return f"{art.precision.upper()} {art.format} for {', '.join(runtimes.FORMAT_RUNTIMES[art.format])}: {label}"
    return "FP32 reference artifact"


def make_plan(profile: DeviceProfile, formats: Sequence[str] = (), precisions: Sequence[str] = (),
              source_kind: str = "module", calibrate_method: str = "minmax", opset: int = 18) -> Plan:
    known = runtimes.FORMAT_TABLE
    for f in formats:
        if f not in known:
            raise UserError(f"unknown --format '{f}'; choose from {', '.join(known)}")
    for p in precisions:
        if p not in PRECISIONS:
            raise UserError(f"unknown --precision '{p}'; choose from {', '.join(PRECISIONS)}")
    notes: List[str] = []
    if formats or precisions:
        wanted_formats = list(formats) or list(profile.formats)
        candidates = [Artifact(f, p) for f in wanted_formats for p in (precisions or _recipe_precisions(profile, f))]
        unsupported = [a for a in candidates if a.precision not in known[a.format].precisions]
        if unsupported and len(unsupported) == len(candidates):
            offered = "; ".join(f"{f} {'/'.join(known[f].precisions)}" for f in dict.fromkeys(a.format for a in unsupported))
            raise UserError(f"{unsupported[0].format} {unsupported[0].precision.upper()} is not offered; "
                            f"the formats offer: {offered}")
        candidates = [a for a in candidates if a not in unsupported]
        fp16_ok = profile.accelerator_supports("fp16") or profile.cpu.has("fp16")
        if any(a.precision == "fp16" for a in candidates) and not fp16_ok:
            notes.append(f"{profile.name} has no FP16 compute: the FP16 artifact is built on request but will not be faster")
        if any(a.precision == "int8" for a in candidates) and profile.has_gpu and not profile.accelerator_supports("int8"):
            notes.append(f"{profile.name}'s GPU has no INT8 path: INT8 runs on the CPU only")
    else:
        candidates = list(profile.recipe)
        if profile.has_gpu and not profile.accelerator_supports("int8"):
            notes.append(
                f"{profile.name}: no INT8 artifact, because its GPU ({', '.join(a.name for a in profile.accelerators)}) "
                f"has no INT8 path; FP16 is its fastest precision"
            )
        for fmt in dict.fromkeys(a.format for a in candidates if a.format != "onnx"):
            install = step_class(runtimes.format_of(fmt).export_step).missing()
            if install:
                notes.append(f"{runtimes.format_of(fmt).title} artifacts skipped: the host cannot convert to {fmt} "
                             f"without its tools: {install}")
                candidates = [a for a in candidates if a.format != fmt]
    if source_kind not in ("module", "exported"):
        for fmt in [f for f in dict.fromkeys(a.format for a in candidates) if _traces_source(f)]:
            title = runtimes.format_of(fmt).title
            if fmt in formats:
                raise UserError(
                    f"{title} export needs a PyTorch model that torch.export can trace, not a {source_kind} file; "
                    f"give file.py:factory or a .pt2, or use --format onnx"
                )
            notes.append(f"{title} artifacts skipped: its export needs a traceable PyTorch model, the source is {source_kind}")
            candidates = [a for a in candidates if a.format != fmt]
    # Validation compares against FP32, so the FP32 artifact of each format is always built first,
    # after the artifact an export reads (ncnn's: the FP32 ONNX).
    ordered: List[Artifact] = []
    for art in candidates:
        fp32 = Artifact(art.format, "fp32")
        for needed in (_export_base(art.format), fp32, art):
            if needed is not None and needed not in ordered:
                ordered.append(needed)
    ordered.sort(key=lambda a: (a.precision != "fp32", _export_base(a.format) is not None))
    int8 = onnx_int8_options(profile, calibrate_method)
    artifacts = []
    for a in ordered:
        own = int8 if (a.format, a.precision) == ("onnx", "int8") else None
        base = "onnx-fp32" if a.format == "onnx" and a.precision != "fp32" else runtimes.format_of(a.format).export_base
        planned = PlannedArtifact(a.format, a.precision, _why(profile, a, int8 if a.format == "onnx" else None),
                                  steps=_steps(a.format, a.precision, own, opset), base=base)
        artifacts.append(planned)
    return Plan(artifacts, notes)


def _recipe_precisions(profile: DeviceProfile, fmt: str) -> List[str]:
    """The precisions the profile's recipe builds `fmt` at; for a format it does not list, all of its precisions."""
    listed = [a.precision for a in profile.recipe if a.format == fmt]
    return listed or list(profile.precisions)


def _traces_source(fmt: str) -> bool:
    """Whether the format's export traces the PyTorch source itself (the ONNX export also takes an ONNX source)."""
    return fmt != "onnx" and step_class(runtimes.format_of(fmt).export_step).from_source


def _export_base(fmt: str) -> Optional[Artifact]:
    """The artifact whose file the format's export step reads (None: it reads the source model)."""
    key = runtimes.format_of(fmt).export_base if fmt != "onnx" else None
    if key is None:
        return None
    base_format, _, precision = key.partition("-")
    return Artifact(base_format, precision)


def one_shape_per_input(plan: Plan, shape_sets: List[Dict[str, Tuple[int, ...]]], asked: Sequence[str],
                         notes: List[str]) -> None:
    """Formats that take one shape per input (TFLite, ncnn, ExecuTorch: their rows' `one_shape`):
    data of several shapes leaves them out (or, when asked for by --format, is an error)."""
    differ = [n for n in shape_sets[0] if len({tuple(s.get(n, ())) for s in shape_sets}) > 1]
    fixed = [f for f in dict.fromkeys(a.format for a in plan.artifacts) if runtimes.format_of(f).one_shape]
    if not differ or not fixed:
        return
    name = differ[0]
    seen = " and ".join(str(list(shape)) for shape in dict.fromkeys(tuple(s[name]) for s in shape_sets if name in s))
    for fmt in fixed:
        title = runtimes.format_of(fmt).title
        why = f"input '{name}' is {seen} in the data, and {title} artifacts take one shape per input"
        if fmt in asked:
            raise UserError(f"{why}; give data of one shape, or --format onnx (which keeps the dim dynamic)")
        plan.artifacts[:] = [a for a in plan.artifacts if a.format != fmt]
        notes.append(f"{title} artifacts skipped: {why}")


def tflite_dynamic_variant(item: PlannedArtifact) -> PlannedArtifact:
    """Dynamic-range TFLite INT8: what edgeopt tries when full-integer INT8 fails its verdict."""
    return PlannedArtifact("tflite", "int8", "full-integer TFLite INT8 failed its accuracy verdict: dynamic-range INT8 "
                           "(INT8 weights, activations quantized per call)", variant="dynamic",
                           steps=(StepCall("export-tflite", TfliteOptions("int8", dynamic=True)),))


def with_exclusions(item: PlannedArtifact, nodes: Sequence[str], calibrate_method: Optional[str] = None) -> PlannedArtifact:
    """The same static INT8 artifact with `nodes` kept in float (and another calibrator, if given)."""
    return with_int8(item, replace(item.int8, nodes_to_exclude=tuple(nodes),
                                   calibrate_method=calibrate_method or item.int8.calibrate_method))


def with_int8(item: PlannedArtifact, int8: OnnxInt8Options) -> PlannedArtifact:
    """The same static INT8 artifact quantized with `int8` instead."""
    steps = tuple(StepCall(c.name, int8) if c.name == "quantize-onnx-static" else c for c in item.steps)
    return replace(item, steps=steps)


def without_preprocessing(item: PlannedArtifact) -> PlannedArtifact:
    """The static INT8 quantized from the FP32 export as it is (its preprocessing failed)."""
    return replace(item, steps=tuple(c for c in item.steps if c.name != "preprocess-onnx"))


def repair_weight_only_variant(dynamic: PlannedArtifact, cause: str) -> PlannedArtifact:
    """INT8 weights of the matrix products only: what edgeopt tries when neither static nor dynamic
    INT8 can be built."""
    return PlannedArtifact("onnx", "int8", f"neither static nor dynamic INT8 could be built ({cause}): "
                           f"INT8 weights of the MatMuls only (MatMulNBits)", variant="weight-only", base="onnx-fp32",
                           steps=(StepCall("quantize-onnx-weight-only", WeightOnlyOptions()),))


def repair_dynamic_variant(static: PlannedArtifact, cause: str) -> PlannedArtifact:
    """Dynamic INT8 of the matrix products and recurrent ops, without preprocessing: what edgeopt tries
    when a runtime refuses the static QDQ INT8 of a graph (control flow, layouts its quantizer breaks)."""
    reduce_range = bool(static.int8 and static.int8.reduce_range)
    ops = tuple(dict.fromkeys(TRANSFORMER_OPS + RECURRENT_OPS))
    return PlannedArtifact("onnx", "int8", f"static INT8 was refused ({cause}): dynamic INT8 of {', '.join(ops)}",
                           variant="dynamic", base="onnx-fp32",
                           steps=(StepCall("quantize-onnx-dynamic", OnnxDynamicOptions(ops, reduce_range=reduce_range)),))
