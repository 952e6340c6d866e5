"""What follows an artifact's verdict, by the step that wrote it: the ONNX export's graph decides which
INT8 modes suit the architecture; an INT8 artifact that failed is searched for nodes to keep in float and
its weights are checked for really being INT8; a failed FP16 names the ops that lose most; a TFLite INT8
that failed falls back to dynamic range, and one nearly FP32's size is flagged as not quantized."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

from .. import accuracy as acc
from ..context import ConversionContext
from ..manifest_build import ArtifactRecord
from ..progress import ProgressReporter
from ..recipe import PlannedArtifact, tflite_dynamic_variant
from .architecture import architecture_variants, classify
from ..phase_clock import SEARCH
from .data_bound import data_bound
from .mixed_precision import search_mixed_precision
from .quant_check import check_weights
from .sensitivity import node_sensitivity

Validate = Callable[[PlannedArtifact, Path], tuple]
FollowUp = Callable[[ConversionContext, ArtifactRecord, Validate, ProgressReporter],
                    Tuple[ArtifactRecord, List[PlannedArtifact]]]
log = logging.getLogger("edgeopt.convert")
TFLITE_INT8_MAX_SIZE = 0.6  # of the FP32 file: INT8 weights take about a quarter


def follow_up(ctx: ConversionContext, record: ArtifactRecord, validate: Validate,
              progress: ProgressReporter) -> Tuple[ArtifactRecord, List[PlannedArtifact]]:
    """(the record, checked or repaired; artifacts to build next) for the step that wrote the artifact."""
    action = FOLLOW_UPS.get(record.planned.main_step.name)
    if action is None:
        return record, []
    try:
        return action(ctx, record, validate, progress)
    except Exception as exc:  # the artifact was built and judged: what follows it must not lose it
        if ctx.options.strict:
            raise
        log.debug("follow-up of %s failed", record.planned.key, exc_info=True)
        cause = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        ctx.warn(f"{record.planned.key}: what follows its verdict failed ({type(exc).__name__}: {cause}); "
                            f"it stands as built and judged")
        record.info.pop("inputs_of", None)
        return record, []


def _variants_for_architecture(ctx: ConversionContext, record: ArtifactRecord, validate: Validate,
                               progress: ProgressReporter) -> Tuple[ArtifactRecord, List[PlannedArtifact]]:
    arch = classify(ctx.work / record.path)
    ctx.note(f"architecture: {arch.kind} ({arch.why})")
    planned = {a.key for a in ctx.plan.artifacts}
    return record, [v for v in architecture_variants(ctx.plan, arch, ctx.profile) if v.key not in planned]


def _check_int8(ctx: ConversionContext, record: ArtifactRecord, validate: Validate,
                progress: ProgressReporter) -> Tuple[ArtifactRecord, List[PlannedArtifact]]:
    """Weights really INT8? Verdict not ok (failed or unresolved)? Then search for a split judged ok."""
    if ctx.options.mixed_precision and record.planned.int8 is not None and _can_improve(ctx, record):
        prepared = record.info["inputs_of"]["quantize-onnx-static"]
        with ctx.clock.phase(SEARCH), progress.step(f"mixed precision for {record.planned.key} "
                                                    f"({record.accuracy.verdict})", 1) as advance:
            record = search_mixed_precision(ctx, record, prepared, validate)
            advance()
    weights = check_weights(ctx.float_artifact("onnx"), ctx.work / record.path)
    record.info["weights"] = weights.to_dict()
    if not weights.quantized:
        record.not_quantized = True
        kept = len(record.info.get("float_nodes") or [])
        ctx.warn(f"{record.planned.key} is not really quantized: {weights.describe()}"
                            + (f" ({kept} nodes kept in float)" if kept else ""))
    record.info.pop("inputs_of", None)
    return record, []


def _can_improve(ctx: ConversionContext, record: ArtifactRecord) -> bool:
    """Whether a search can turn the verdict ok: not where it is ok, nor where the data alone keeps it open
    (data_bound: said, and no time spent on it)."""
    if record.accuracy.verdict == acc.OK:
        return False
    why = data_bound(record.accuracy, ctx.tolerances.budget_points)
    if why:
        ctx.note(f"{record.planned.key}: {why}")
    return why is None


def _blame_fp16(ctx: ConversionContext, record: ArtifactRecord, validate: Validate,
                progress: ProgressReporter) -> Tuple[ArtifactRecord, List[PlannedArtifact]]:
    """A failed FP16 names the nodes whose outputs lose the most against FP32."""
    if record.accuracy.verdict != acc.FAILED:
        return record, []
    feeds = [feed for feed, _ in ctx.evaluation.batches(ctx.batch)][:4]
    try:
        ranked = [s for s in node_sensitivity(ctx.float_artifact("onnx"), ctx.work / record.path, feeds, ctx.accuracy_runs.threads)
                  if s.drop_db > 1.0][:5]
    except Exception as exc:  # the verdict stands; only the diagnosis is missing
        ctx.warn(f"{record.planned.key}: could not measure which ops lose precision ({exc})")
        return record, []
    record.info["fp16_sensitive_nodes"] = [s.to_dict() for s in ranked]
    if ranked:
        ctx.warn(f"{record.planned.key} failed; the ops losing most precision in FP16: "
                            + ", ".join(f"{s.name} ({s.op_type}, -{s.drop_db:.0f} dB)" for s in ranked)
                            + " (keep them in FP32 with ConvertOnnxFp16's node_block_list)")
    return record, []


def _check_tflite_int8(ctx: ConversionContext, record: ArtifactRecord, validate: Validate,
                       progress: ProgressReporter) -> Tuple[ArtifactRecord, List[PlannedArtifact]]:
    options = record.planned.main_step.options
    if options.precision != "int8":
        return record, []
    extra = []
    if ctx.options.mixed_precision and not options.dynamic and _can_improve(ctx, record):
        extra.append(tflite_dynamic_variant(record.planned))
    _check_tflite_size(ctx, record, ctx.float_artifact("tflite"), ctx.work / record.path)
    return record, extra


def _check_tflite_size(ctx: ConversionContext, record: ArtifactRecord, fp32: Optional[Path], int8: Path) -> None:
    """A TFLite 'INT8' whose file is nearly FP32's size kept its weights in float (an LSTM litert-torch
    does not quantize): warned about, and not recommended at 0.9x or more, as for ONNX."""
    if fp32 is None or not fp32.is_file():
        return
    ratio = int8.stat().st_size / max(fp32.stat().st_size, 1)
    record.info.setdefault("weights", {"ratio": round(ratio, 3), "measured_by": "file size against the FP32 TFLite",
                                       "quantized": ratio <= TFLITE_INT8_MAX_SIZE})
    if ratio > TFLITE_INT8_MAX_SIZE:
        record.not_quantized = True
        ctx.warn(f"{record.planned.key} is not really quantized: its file is {ratio:.2f}x the FP32 "
                            f"TFLite's (INT8 weights should make it about 0.25x)")


FOLLOW_UPS: Dict[str, FollowUp] = {
    "export-onnx": _variants_for_architecture,
    "quantize-onnx-static": _check_int8,
    "quantize-onnx-dynamic": _check_int8,
    "quantize-onnx-weight-only": _check_int8,
    "convert-onnx-fp16": _blame_fp16,
    "export-tflite": _check_tflite_int8,
}
