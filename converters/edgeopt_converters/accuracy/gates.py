"""The user's accuracy gates over a whole conversion, and the verdicts left open."""
from __future__ import annotations

from typing import List

from edgeopt_agent.errors import UserError

from . import FAILED, UNRESOLVED


def check_budget(records: List, opts) -> None:
    """A failed verdict (with a budget or metric limit given) or a low cosine fails the run."""
    failures = []
    if opts.max_accuracy_drop is not None or opts.max_metric_drop is not None:
        for r in records:
            a = r.accuracy
            if a.verdict == FAILED:
                lost = f"lost {a.drop_points:.2f} points" if a.drop_points is not None else "failed"
                failures.append(f"{r.planned.key} {lost} ({a.reason})")
    if opts.min_cosine is not None:
        failures += [f"{r.planned.key} has cosine similarity {r.accuracy.min_cosine:.5f}" for r in records
                     if r.accuracy.min_cosine < opts.min_cosine]
    if failures:
        limits = " and ".join(x for x in (
            f"--max-accuracy-drop {opts.max_accuracy_drop}" if opts.max_accuracy_drop is not None else "",
            f"--max-metric-drop {opts.max_metric_drop}" if opts.max_metric_drop is not None else "",
            f"--min-cosine {opts.min_cosine}" if opts.min_cosine is not None else "") if x)
        raise UserError(f"accuracy budget exceeded ({limits}): {'; '.join(failures)}; "
                        f"try more representative --calibration data or --calibrate-method entropy/percentile")


def unresolved_warnings(records: List) -> List[str]:
    return [f"{r.planned.key}: accuracy unresolved: {r.accuracy.reason}" for r in records
            if r.accuracy.verdict == UNRESOLVED]
