"""Accuracy-aware mixed precision: when static INT8 fails its verdict, keep nodes in float.

Nodes are ranked by the SQNR they lose (sensitivity.py, on a few calibration samples), then the
most sensitive 1, 2, 4, 8, ... are kept in float, each attempt re-quantized with the same
calibration ranges and judged by the same per-output verdicts as every artifact. The first attempt
that passes is kept; the search stops when three attempts in a row gain nothing or after MAX_TRIES.
The best attempt replaces the whole-graph artifact, and the manifest says which nodes stayed float.
"""
from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List

from . import accuracy as acc
from .accuracy.judges import SEVERITY
from .passes.errors import StepFailed
from .recipe import with_exclusions
from .sensitivity import node_sensitivity, quantized_nodes
from .tensors import feed_batch

MAX_TRIES = 8
STALE_TRIES = 3
SENSITIVITY_SAMPLES = 4
MAX_FLOAT_SHARE = 0.5  # past half of the quantized nodes in float, INT8 has little left to give


def _badness(a) -> tuple:
    """Lower is better: the verdict, then decisions lost, then cosine."""
    return (SEVERITY[a.verdict], a.drop_points if a.drop_points is not None else 0.0, -a.min_cosine)


def _summary(a, floats: int) -> Dict[str, Any]:
    return {"float_nodes": floats, "verdict": a.verdict, "reason": a.reason,
            "drop_points": a.drop_points, "cosine": round(a.min_cosine, 6)}


def search_mixed_precision(ctx, record, prepared: Path, validate):
    item = record.planned
    target = ctx.work / item.filename
    feeds = [feed for feed, _ in ctx.calibration.batches(feed_batch(ctx.specs))][:SENSITIVITY_SAMPLES]
    candidates = quantized_nodes(target)
    ranked = node_sensitivity(prepared, target, feeds, ctx.threads, candidates)
    tries: List[Dict[str, Any]] = [_summary(record.accuracy, 0)]
    report: Dict[str, Any] = {"whole_graph": tries[0], "tries": tries,
                              "sensitivity": [s.to_dict() for s in ranked[:10]]}
    best, best_path, stale = record, target, 0
    limit = max(1, int(len(ranked) * MAX_FLOAT_SHARE))
    count = 1
    while count <= limit and len(tries) <= MAX_TRIES and best.accuracy.verdict == acc.FAILED:
        nodes = [s.name for s in ranked[:count]]
        attempt = with_exclusions(item, nodes)
        trial = ctx.work / ".steps" / f"mixed-{count}.onnx"
        try:
            info = _quantize(ctx, attempt, prepared, trial, target)
        except StepFailed as exc:
            tries.append({"float_nodes": count, "verdict": "not built", "reason": str(exc)})
            break
        accuracy, io = validate(attempt, trial)
        tries.append(_summary(accuracy, count))
        if _badness(accuracy) < _badness(best.accuracy):
            info = dict(record.info, **info)
            best = replace(record, planned=attempt, accuracy=accuracy, io=io, info=info)
            best_path, stale = trial, 0
        else:
            stale += 1
            if stale >= STALE_TRIES:
                report["stopped"] = f"{STALE_TRIES} attempts in a row gained nothing"
                break
        count = min(count * 2, limit) if count < limit else limit + 1
    if best is not record:
        os.replace(best_path, target)
    floats = list(best.planned.int8.nodes_to_exclude) if best.planned.int8 else []
    report["float_nodes"] = floats
    if best.accuracy.verdict == acc.FAILED:
        report["result"] = (f"no split found: with up to {tries[-1]['float_nodes']} of {len(ranked)} ranked nodes in "
                            f"float the verdict stayed failed")
        ctx.warnings.append(f"{item.key}: mixed precision found no passing split ({best.accuracy.reason})")
    else:
        report["result"] = f"{best.accuracy.verdict} with {len(floats)} nodes in float"
        ctx.notes.append(f"{item.key}: whole-graph INT8 failed ({record.accuracy.reason}); {len(floats)} nodes kept "
                         f"in float make it {best.accuracy.verdict}: {', '.join(floats)}")
    best.info["mixed_precision"] = report
    best.info["float_nodes"] = floats
    best.info["scheme"] = best.planned.int8.scheme if best.planned.int8 else best.info.get("scheme")
    return best


def _quantize(ctx, attempt, prepared: Path, trial: Path, whole_graph: Path) -> Dict[str, Any]:
    """Re-quantize with the whole-graph attempt's calibration ranges (no second calibration)."""
    from .passes.base import StepContext
    from .passes.calibration import load_calibration
    from .passes.quantize_onnx import QuantizeOnnxStatic, calibration_cache

    step = QuantizeOnnxStatic(attempt.int8)
    step_ctx = StepContext(ctx.source, ctx.specs, ctx.calibration, feed_batch(ctx.specs))
    cache = calibration_cache(whole_graph)
    calibration = load_calibration(cache) if cache.is_file() else step.calibrate(step_ctx, prepared, cache)
    return step.run(step_ctx, prepared, trial, calibration).info
