"""The user's accuracy gates over a whole conversion, and the verdicts left open.

An artifact that fails a gate (--max-accuracy-drop, --max-metric-drop, --min-cosine) is left out and
listed with why; the conversion fails only when no artifact is left, or at the first one with --strict.
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

from edgeopt_agent.errors import UserError

from . import FAILED, UNRESOLVED


def gate_failures(records: List, opts) -> List[Tuple[Any, str]]:
    """(record, why) for each artifact a gate rejects: a failed verdict where a budget or metric limit
    was given, a cosine below --min-cosine."""
    failures = []
    for r in records:
        a = r.accuracy
        if a.verdict == FAILED and (opts.max_accuracy_drop is not None or opts.max_metric_drop is not None):
            lost = f"lost {a.drop_points:.2f} points" if a.drop_points is not None else "failed"
            failures.append((r, f"{lost} ({a.reason})"))
        elif opts.min_cosine is not None and a.min_cosine < opts.min_cosine:
            failures.append((r, f"cosine similarity {a.min_cosine:.5f}"))
    return failures


def limits(opts) -> str:
    return " and ".join(x for x in (
        f"--max-accuracy-drop {opts.max_accuracy_drop:g}" if opts.max_accuracy_drop is not None else "",
        f"--max-metric-drop {opts.max_metric_drop:g}" if opts.max_metric_drop is not None else "",
        f"--min-cosine {opts.min_cosine:g}" if opts.min_cosine is not None else "") if x)


def apply_gates(records: List, opts, failed: List[Dict[str, Any]], warnings: List[str]) -> List:
    """The records the gates keep. Each rejected one is listed in `failed` (and warned about); with
    --strict, or when none is left, the conversion fails with every rejection named."""
    rejected = gate_failures(records, opts)
    if not rejected:
        return records
    said = "; ".join(f"{r.planned.key} {why}" for r, why in rejected)
    kept = [r for r in records if all(r is not x for x, _ in rejected)]
    if opts.strict or not kept:
        left = "--strict stops at the first" if opts.strict else "no artifact is left"
        raise UserError(f"accuracy budget exceeded ({limits(opts)}; {left}): {said}; try more representative "
                        f"--calibration data, --calibrate-method entropy/percentile, or a larger --time-budget "
                        f"for the mixed-precision search")
    for r, why in rejected:
        failed.append({"key": r.planned.key, "format": r.planned.format, "precision": r.planned.precision,
                       "cause": f"fails {limits(opts)}: {why}", "step": "accuracy gate"})
        warnings.append(f"{r.planned.key} is left out: it fails {limits(opts)}: {why}")
    return kept


def unresolved_warnings(records: List) -> List[str]:
    return [f"{r.planned.key}: accuracy unresolved: {r.accuracy.reason}" for r in records
            if r.accuracy.verdict == UNRESOLVED]
