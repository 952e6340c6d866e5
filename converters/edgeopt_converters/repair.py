"""An artifact that fails to build, load or be judged: repaired where it can be, else listed as failed
with its one-line cause while the others go on.

- A runtime that refuses a static INT8 naming a node (`Node (If_0)`): built again with that node kept in
  float, up to MAX_REPAIRS times.
- A quantizer that crashes on a static INT8 (`passes.errors.QuantizerCrashed`): what it fails on is
  found and kept in float, or the scheme changed (precision/crash_repair.py).
- Preprocessing that fails: quantized from the FP32 export as it is.
- A static INT8 that none of these builds: dynamic INT8; a dynamic INT8 that cannot be built either:
  weight-only INT8 of the matrix products (where the graph has any).
Every failure is listed in the manifest's `failed_artifacts`, with what replaced it where something did.
"""
from __future__ import annotations

import logging
import re
from typing import List, Optional

from edgeopt_agent.errors import UserError

from .context import ConversionContext
from .passes.errors import QuantizerCrashed
from .phase_clock import SEARCH
from .recipe import (PlannedArtifact, repair_dynamic_variant, repair_weight_only_variant, with_exclusions, with_int8,
                     without_preprocessing)

log = logging.getLogger("edgeopt.convert")
_NAMED_NODE = re.compile(r"Node \(([^()\s]+)\)")
MAX_REPAIRS = 3


def after_failure(ctx: ConversionContext, item: PlannedArtifact, exc: Exception) -> List[PlannedArtifact]:
    """What to build next after `item` failed with `exc` (built before anything else still queued)."""
    if ctx.options.strict:
        _artifact_failed(ctx, item, exc)  # raises
    repaired = _refused_node(ctx, item, exc)
    if repaired is not None:
        return [repaired]
    if item.int8 is not None and getattr(exc, "step", "") == "preprocess-onnx" and item.base in ctx.built:
        _artifact_failed(ctx, item, exc, replaced_by="quantized without preprocessing")
        return [without_preprocessing(item)]
    if item.int8 is not None and isinstance(exc, QuantizerCrashed) and item.base in ctx.built:
        repaired = _crash_repaired(ctx, item, exc)
        if repaired is not None:
            return [repaired]
    else:
        _artifact_failed(ctx, item, exc)
    variant = _next_mode(ctx, item, exc)
    if variant is None or any(a.key == variant.key for a in ctx.plan.artifacts):
        return []
    ctx.plan.artifacts.append(variant)
    return [variant]


def _next_mode(ctx: ConversionContext, item: PlannedArtifact, exc: Exception) -> Optional[PlannedArtifact]:
    """The INT8 mode to try after `item`'s could not be built: static -> dynamic -> weight-only."""
    if item.int8 is not None:
        return repair_dynamic_variant(item, one_line(exc)[:120])
    if item.format == "onnx" and item.precision == "int8" and item.variant == "dynamic" and "onnx-fp32" in ctx.built:
        return repair_weight_only_variant(item, one_line(exc)[:120])
    return None


def _crash_repaired(ctx: ConversionContext, item: PlannedArtifact, exc: QuantizerCrashed) -> Optional[PlannedArtifact]:
    """The static INT8 built with what crashed the quantizer kept in float (or another scheme); None when
    no stage builds. Listed as failed either way, with what replaced it."""
    from .precision.crash_repair import repair_crash

    with ctx.clock.phase(SEARCH):
        repair, built = repair_crash(ctx, item, str(exc))
    report = repair.to_dict(built)
    if built is None:
        _artifact_failed(ctx, item, exc, replaced_by=f"no stage built it ({repair.stopped}); dynamic INT8 next",
                         repair=report)
        return None
    _artifact_failed(ctx, item, exc, replaced_by=f"built with {built.stage}", repair=report)
    repaired = with_int8(item, built.int8)
    ctx.keep_prebuilt(repaired.key, built.path, dict(built.info, quantizer_repair=report,
                                                     inputs_of={"quantize-onnx-static": repair.prepared}))
    ctx.note(f"{item.key}: onnxruntime's quantizer crashed ({one_line(exc)[:160]}); built with {built.stage} "
                     f"after {len(repair.attempts)} attempts")
    return repaired


def _artifact_failed(ctx: ConversionContext, item: PlannedArtifact, exc: Exception, replaced_by: str = "",
                     repair: Optional[dict] = None) -> None:
    """An artifact that could not be built, loaded or judged: listed as failed with its one-line
    cause (manifest, table, warnings) and, where something replaced it, with what; its file is not
    published. The traceback is logged for -v. With --strict the conversion stops here."""
    cause = one_line(exc)
    log.debug("%s failed", item.key, exc_info=True)
    if ctx.options.strict:
        raise UserError(f"{item.key} failed: {cause} (--strict stops at the first artifact that fails)") from exc
    ctx.forget_built(item.key)
    (ctx.work / item.filename).unlink(missing_ok=True)
    entry = {"key": item.key, "format": item.format, "precision": item.precision, "cause": cause}
    if getattr(exc, "step", ""):
        entry["step"] = exc.step
    if replaced_by:
        entry["repaired"] = replaced_by
    if repair is not None:
        entry["quantizer_repair"] = repair
    ctx.fail(entry)
    ctx.warn(f"{item.key} failed: {cause}" + (f"; {replaced_by}" if replaced_by else "; left out"))


def _refused_node(ctx: ConversionContext, item: PlannedArtifact, exc: Exception) -> Optional[PlannedArtifact]:
    """A static ONNX INT8 that a runtime refused, naming a node of the graph (onnxruntime's `Node (If_0)`)
    or a tensor (`'layernorm.bias_DequantizeLinear'`): the same artifact with the nodes it names kept in
    float, at most MAX_REPAIRS times. None: nothing to repair."""
    if item.int8 is None or item.base not in ctx.built or getattr(exc, "step", ""):  # a build failure: not a refusal
        return None
    kept = list(item.int8.nodes_to_exclude or ())
    if ctx.refusals.get(item.key, 0) >= MAX_REPAIRS:
        return None
    import onnx

    from .precision.crash_repair import nodes_named

    prepared = ctx.work / ".steps" / f"{item.key}.0.preprocess-onnx.onnx"
    graph = onnx.load(str(prepared if prepared.is_file() else ctx.built[item.base]), load_external_data=False).graph
    named = [n for n in nodes_named(graph, str(exc)) if n not in kept][:4]
    if not named:
        return None
    ctx.forget_built(item.key)
    ctx.count_refusal(item.key)
    ctx.note(f"{item.key}: the runtime refused it ({one_line(exc)[:160]}); built again with "
                     f"{', '.join(named)} kept in float")
    return with_exclusions(item, kept + named)


def one_line(exc: Exception) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0] if lines else ""
    if not isinstance(exc, UserError):
        text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if len(text) <= 2000 else text[:1997] + "..."

