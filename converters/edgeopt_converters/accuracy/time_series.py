"""Time series: one value or probability per frame along one axis ([N, T], [N, T, 1] or [N, 1, T]), as
a pitch tracker's F0 in Hz per frame and its voicing probability per frame.

Such a row is no distribution over its axis: frames are independent readings of one quantity, so the
argmax over them (a bins judge's "bin shift") means nothing. Evidence, told apart from ordinal bins
(bins.py) by what a row looks like: bins are a distribution over the axis (rows summing to 1, or one
narrow peak with falling neighbours); a time series is not a distribution, changes smoothly from frame
to frame, and its high values are no single narrow peak (a voiced stretch, a plateau, several runs).

Judged per frame: values by their error against FP32's spread (the standard deviation of all its
frames: they share one unit), probabilities by the frames whose decision at 0.5 flips and their error.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from .evidence import Evidence, Hints, in_unit_range, sigmoid_like, softmax_rows
from .judges import FAILED, OK, Judgement, common_figures, counted

MIN_FRAMES = 16
# Mean squared step between neighbouring frames over twice the variance along the row (von Neumann's
# ratio): 1 for independent values, 0 for a constant. The largest JUMPS of the steps are left out (a
# voicing boundary is a jump in a smooth contour); independent values then give about 0.56. At most
# MAX_ROUGHNESS: smooth.
JUMPS = 0.1
MAX_ROUGHNESS = 0.25
NARROW = 0.125  # one run above half a row's height no wider than this share of the axis: a bin's peak
# ... unless the row never falls near zero: positive values whose minimum is at least FLOOR of the maximum
# are a level with an excursion (a pitch tracker's octave glitch), where a distribution's mass leaves the
# bins away from its peak near zero.
FLOOR = 0.1
WIDE_ROWS = 0.7  # share of rows with any height whose high values are not one narrow peak on a low floor
PROBABILITY_OPS = ("Sigmoid", "HardSigmoid", "Softmax")


def frames(array: np.ndarray) -> Optional[np.ndarray]:
    """[N, T] float64 where each sample has one axis of at least MIN_FRAMES and no other longer than 1."""
    long = [size for size in array.shape[1:] if size > 1]
    if array.ndim < 2 or len(long) != 1 or long[0] < MIN_FRAMES:
        return None
    return array.reshape(len(array), long[0]).astype(np.float64)


def roughness(series: np.ndarray) -> Optional[float]:
    steps = np.sort((np.diff(series, axis=1) ** 2).ravel())
    steps = float(steps[:int(np.ceil(len(steps) * (1 - JUMPS)))].sum())
    variance = float(((series - series.mean(axis=1, keepdims=True)) ** 2).sum())
    return steps / (2 * variance) if variance > 0 else None


def one_narrow_peak(row: np.ndarray) -> bool:
    """The values above half the row's height form one run no wider than NARROW of the axis, and the
    row falls near zero away from it (it is not positive with a minimum of FLOOR of its maximum or more)."""
    high = row >= row.min() + 0.5 * (row.max() - row.min())
    runs = int(high[0]) + int((np.diff(high.astype(np.int8)) == 1).sum())
    floored = row.min() > 0 and row.min() >= FLOOR * row.max()
    return runs == 1 and high.sum() <= NARROW * len(row) and not floored


def wide_share(series: np.ndarray) -> float:
    """Share of rows with any height whose high values are not one narrow peak on a low floor."""
    rows = [row for row in series if row.max() > row.min()]
    return sum(not one_narrow_peak(row) for row in rows) / len(rows) if rows else 0.0


def time_series_evidence(reference: np.ndarray, hints: Hints) -> Optional[Evidence]:
    series = frames(reference)
    # A softmax over this axis sums to 1 along it; one over another axis (a voicing probability taken
    # from two classes per frame) does not, so the values decide, not the op.
    if series is None or not np.isfinite(series).all() or softmax_rows(series):
        return None
    rough = roughness(series)
    if rough is None or rough > MAX_ROUGHNESS:
        return None
    wide = wide_share(series)
    if wide < WIDE_ROWS:
        return None
    probabilities = in_unit_range(series) and (hints.producer in PROBABILITY_OPS or sigmoid_like(series))
    what = "probabilities" if probabilities else "values"
    return Evidence(f"[N, {series.shape[1]}] {what} per frame, smooth along the axis (roughness {rough:.2f}), not a "
                    f"distribution and no single narrow peak in {wide:.0%} of rows: a time series, not bins",
                    {"probabilities": probabilities})


def judge_time_series(name, kind, ref, cand, tol) -> Judgement:
    series, moved = frames(ref), frames(cand)
    if series is None or moved is None:
        series, moved = ref.reshape(len(ref), -1).astype(np.float64), cand.reshape(len(cand), -1).astype(np.float64)
    figures = common_figures(ref, cand)
    error = np.abs(series - moved)
    if kind.fact("probabilities", in_unit_range(series)):
        flipped = (series >= 0.5) != (moved >= 0.5)
        figures.update(p99_abs_error=float(np.percentile(error, 99)) if error.size else 0.0,
                       flipped_frames=int(flipped.sum()), frames=int(flipped.size))
        judged = counted(name, kind, figures, int(flipped.sum()), int(flipped.size),
                         "frames whose decision at 0.5 flipped", tol)
        if figures["p99_abs_error"] > tol.max_probability_error and judged.verdict != FAILED:
            return Judgement(name, kind, FAILED, f"per-frame probabilities moved by up to {figures['p99_abs_error']:.3f} "
                             f"(99th percentile; limit {tol.max_probability_error:g}); {judged.reason}", figures,
                             judged.loss_points)
        return judged
    spread = float(series.std())
    relative = error / spread if spread > 0 else np.where(error > 0, np.inf, 0.0)
    figures.update(frame_spread=spread, frame_error_mean=float(relative.mean()) if relative.size else 0.0,
                   frame_error_p95=float(np.percentile(relative, 95)) if relative.size else 0.0,
                   frames_moved_pct=float((relative > tol.max_spread_error_p95).mean() * 100) if relative.size else 0.0)
    ok = figures["frame_error_mean"] <= tol.max_spread_error and figures["frame_error_p95"] <= tol.max_spread_error_p95
    shown = (f"per-frame error {figures['frame_error_mean']:.3f} of FP32's spread {spread:.4g} on average, "
             f"{figures['frame_error_p95']:.3f} at the 95th percentile (limits {tol.max_spread_error:g} and "
             f"{tol.max_spread_error_p95:g}); {figures['frames_moved_pct']:.2f} % of frames moved more than "
             f"{tol.max_spread_error_p95:g}")
    return Judgement(name, kind, OK if ok else FAILED, shown, figures)
