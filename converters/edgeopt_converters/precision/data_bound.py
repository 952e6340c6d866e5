"""When no split can turn a verdict ok: the evaluation data's doing, not the quantization's.

An unresolved verdict with no decision lost cannot move by keeping nodes in float; nor can one counted on
so few decisions that even none lost would not decide it (6 detections bound a loss of 0 at 31 %). A
search there only optimises noise (seen: 104 s and 191 nodes kept in float for a 0-of-6 that stayed
unresolved), so the repair loop does not start, or stops, and says how many samples would decide it.
"""
from __future__ import annotations

from typing import Optional

from .. import accuracy as acc
from ..accuracy import intervals


def data_bound(accuracy, budget_points: float) -> Optional[str]:
    """Why no split can turn `accuracy` ok, in words; None where one might (it is failed, or unresolved with
    decisions lost on enough decisions)."""
    if accuracy.verdict != acc.UNRESOLVED or accuracy.metric is not None:
        return None
    open_ = [j for j in accuracy.judgements if j.verdict != acc.OK]
    if not open_ or any(j.loss_points is None for j in open_):
        return None
    budget = budget_points / 100.0
    too_few = [j for j in open_ if j.trials and intervals.wilson(0, j.trials).high > budget]
    if not too_few and any(j.loss_points.estimate > 0 for j in open_):
        return None
    needed = max((j.samples_needed or 0) for j in open_)
    why = (f"too few decisions for the data to decide even with none lost "
           f"({', '.join(f'{j.name}: {j.trials}' for j in too_few)})" if too_few
           else f"no decision lost on {accuracy.samples} samples")
    return f"unresolved with {why}: no split can change that" + (
        f"; about {needed} evaluation samples would decide it" if needed else "")
