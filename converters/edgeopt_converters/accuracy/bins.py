"""Ordinal bins (pitch salience, depth or age bins): the value a head encodes, decoded as CREPE does.

A bin head scores B ordered bins (CREPE: 360 pitch bins of 20 cents); the value it encodes is the
weighted average of the bin indices within LOCAL_WINDOW bins of the argmax, weighted by the
activations (sigmoid outputs as they are, anything else through a softmax over the window). Top-1
over bins counts a one-bin wobble as a wrong answer; the decoded value moves by a fraction of a
bin then, so the judge counts rows whose decoded value moves by more than
`Tolerances.max_bin_shift` bins.

Evidence besides a name: around the argmax the FP32 activations fall off smoothly on both sides
(neighbouring bins share the peak's evidence), which class scores, whose neighbours are unrelated
classes, do not. A saturated softmax (PESTO's) leaves a near one-hot row with no visible fall-off; its
runner-up is still a neighbour of the peak, where a classifier's runner-up lands next to it by chance
(ADJACENT bins of B).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Optional, Tuple

import numpy as np

from .evidence import Evidence, in_unit_range, name_hint
from .judges import UNRESOLVED, Judgement, common_figures, counted

NAME_PATTERN = r"salience|pitch|(^|[^a-z])(f0|bins?|age)($|[^a-z])|depth|ordinal"
MIN_BINS = 16
LOCAL_WINDOW = 4  # bins each side of the argmax in the decoded average (CREPE's to_local_average_cents)
SMOOTH_WINDOW = 3  # bins each side of the argmax that must fall off monotonically
SMOOTH_SLACK = 0.05  # of the peak's height above the row's minimum: noise a fall-off may have
NEIGHBOUR_SHARE = 0.3  # the argmax's neighbours keep at least this share of the peak's height
SMOOTH_ROWS = 0.7  # share of rows with a peak that must be smooth
CONFIDENT = 0.5  # a sigmoid head's peak at or above this is a confident row (CREPE's voicing decision)
ADJACENT = 2  # bins from the peak a saturated row's runner-up sits in
MIN_RUNNER_UP_ROWS = 32  # rows whose runner-up is above zero needed before its place is evidence


def rows(array: np.ndarray) -> np.ndarray:
    """[N, B] or [N, T, B] as [rows, B] float64."""
    return array.reshape(-1, array.shape[-1]).astype(np.float64)


def smooth_share(ref: np.ndarray) -> Tuple[float, int]:
    """(share of rows whose peak is smooth, rows with a peak at all)."""
    data = rows(ref)
    smooth = peaked = 0
    for row in data:
        peak = int(row.argmax())
        height = row[peak] - row.min()
        if not height > 0:
            continue
        peaked += 1
        slack = SMOOTH_SLACK * height
        left, right = row[max(peak - SMOOTH_WINDOW, 0):peak + 1], row[peak:peak + SMOOTH_WINDOW + 1]
        neighbours = row[max(peak - 1, 0):peak + 2]
        neighbours = np.delete(neighbours, int(neighbours.argmax()))
        if (np.diff(left) >= -slack).all() and (np.diff(right) <= slack).all() and \
                neighbours.size and neighbours.mean() - row.min() >= NEIGHBOUR_SHARE * height:
            smooth += 1
    return (smooth / peaked if peaked else 0.0), peaked


def runner_up_share(ref: np.ndarray) -> Tuple[float, int]:
    """(share of rows whose second-highest bin is within ADJACENT bins of the highest, rows whose
    second-highest activation is above the row's minimum)."""
    data = rows(ref)
    order = np.argsort(-data, axis=1, kind="stable")[:, :2]
    index = np.arange(len(data))
    counted = data[index, order[:, 1]] > data.min(axis=1)
    near = np.abs(order[:, 0] - order[:, 1]) <= ADJACENT
    total = int(counted.sum())
    return (float((near & counted).sum() / total) if total else 0.0), total


def bins_evidence(name: str, ref: np.ndarray) -> Optional[Evidence]:
    if ref.ndim not in (2, 3) or ref.shape[-1] < MIN_BINS or not ref.size or not np.isfinite(ref).all():
        return None
    hint = name_hint(name, NAME_PATTERN)
    if hint and ref.ndim == 2:
        return Evidence(f"name '{name}' ('{hint.strip('_-./:')}'): {ref.shape[-1]} ordinal bins")
    share, peaked = smooth_share(ref)
    if peaked and share >= SMOOTH_ROWS:
        return Evidence(f"{ref.shape[-1]} bins whose FP32 activations fall off smoothly on both sides of the peak in "
                        f"{share:.0%} of {peaked} rows: ordinal bins, not class scores")
    share, counted = runner_up_share(ref)
    if counted >= MIN_RUNNER_UP_ROWS and share >= SMOOTH_ROWS:
        return Evidence(f"{ref.shape[-1]} bins whose FP32 runner-up is within {ADJACENT} bins of the peak in {share:.0%} "
                        f"of {counted} rows (a saturated peak): ordinal bins, not class scores")
    return None


def decode(array: np.ndarray, sigmoid: Optional[bool] = None) -> Tuple[np.ndarray, np.ndarray]:
    """(decoded value in bins, peak activation) per row: the local weighted average around the argmax.
    `sigmoid`: the activations are probabilities (None: when in [0, 1]); a candidate is read as FP32 is."""
    data = rows(array)
    if sigmoid is None:
        sigmoid = in_unit_range(array)
    peaks = data.argmax(-1)
    index = peaks[:, None] + np.arange(-LOCAL_WINDOW, LOCAL_WINDOW + 1)[None, :]
    inside = (index >= 0) & (index < data.shape[1])
    values = np.take_along_axis(data, np.clip(index, 0, data.shape[1] - 1), axis=1)
    if sigmoid:
        weights = np.where(inside, values, 0.0)
    else:
        weights = np.where(inside, np.exp(values - values.max(1, keepdims=True)), 0.0)
    total = weights.sum(1)
    decoded = np.where(total > 0, (weights * index).sum(1) / np.where(total > 0, total, 1.0), peaks.astype(np.float64))
    return decoded, data[np.arange(len(data)), peaks]


def judge_bins(name, kind, ref, cand, tol):
    """Rows whose decoded value moved more than `tol.max_bin_shift` bins, or (a sigmoid head) whose peak
    crossed CONFIDENT, against the budget; rows neither side is confident on are not counted."""
    figures = common_figures(ref, cand)
    sigmoid = in_unit_range(ref)
    ref_value, ref_peak = decode(ref, sigmoid)
    cand_value, cand_peak = decode(cand, sigmoid)
    shift = np.abs(ref_value - cand_value)
    if sigmoid:
        ref_sure, cand_sure = ref_peak >= CONFIDENT, cand_peak >= CONFIDENT
    else:
        ref_sure = cand_sure = np.ones(len(shift), dtype=bool)
    both, either = ref_sure & cand_sure, ref_sure | cand_sure
    moved = both & (shift > tol.max_bin_shift)
    flipped = ref_sure != cand_sure
    figures.update(confident_rows=int(either.sum()), confidence_flipped=int(flipped.sum()),
                   rows_moved=int(moved.sum()),
                   decoded_shift_mean_bins=float(shift[both].mean()) if both.any() else None,
                   decoded_shift_p95_bins=float(np.percentile(shift[both], 95)) if both.any() else None,
                   decoded_shift_max_bins=float(shift[both].max()) if both.any() else None)
    if not either.any():
        return Judgement(name, kind, UNRESOLVED, f"no row has a peak at or above {CONFIDENT:g} in FP32 or the "
                         f"artifact, so no decoded value shows whether the artifact keeps it; give --eval-data "
                         f"the head is confident on", figures)
    judged = counted(name, kind, figures, int((moved | flipped).sum()), int(either.sum()),
                     f"rows whose decoded bin moved more than {tol.max_bin_shift:g} bin"
                     + (f" or whose peak crossed {CONFIDENT:g}" if sigmoid else ""), tol)
    p95 = figures["decoded_shift_p95_bins"]
    return replace(judged, task_excellent=bool(not (moved | flipped).any() and p95 is not None
                                               and p95 <= tol.excellent_bin_shift))
