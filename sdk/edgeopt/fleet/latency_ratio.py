"""How much slower one build's latency is than another's on a board, with an interval drawn from the
two latency distributions the boards sent (edgeopt_agent.wire.LatencyHistogram).

The interval is a bootstrap of the stored histograms, two levels deep: each resample draws the side's
runs again with replacement (when a build ran more than once on the board, so the spread between runs
counts), then each drawn run's durations again from its histogram (a multinomial draw over its
buckets), pools them and takes the percentile by nearest rank, as the board does. The ratio's interval
is the central `confidence` share of the candidate / baseline ratios over the resamples, widened by
the histograms' own resolution (each percentile read from a histogram is within its relative accuracy,
0.5 %, of the exact one).

Why a bootstrap and not a rank-based interval: an order-statistics interval is exact for one
percentile of one sample, but there is no such interval for the ratio of two percentiles (combining
the two sides' intervals end to end is far wider than the ratio's), none for several runs pooled, and
none for a geometric mean over boards; the resampled ratios give all three. What neither captures,
from one run a side, is a change in the board between runs that the run itself does not show (a
warmer room): the verdict asks the ratio to pass a threshold as well for that reason (releases.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, Iterable, Mapping, Sequence, Tuple

import numpy as np

from edgeopt_agent.wire import LatencyHistogram

PERCENTILES = (50, 90, 99)
RESAMPLES = 2000
CONFIDENCE = 0.95
METHOD = ("bootstrap of the latency histograms: runs resampled, then each run's durations from its "
          "histogram; percentile interval of the ratio, widened by the histograms' resolution")


@dataclass(frozen=True)
class Ratio:
    """candidate / baseline of one percentile: its estimate and interval; `log_resamples` holds the
    resampled log ratios (what a combination over boards is drawn from), `widened` how far (in log) the
    interval was widened for the histograms' resolution."""

    percentile: int
    estimate: float
    low: float
    high: float
    baseline_ms: float
    candidate_ms: float
    log_resamples: np.ndarray = field(repr=False, compare=False)
    widened: float = 0.0


def percentile_ratios(baseline: Sequence[LatencyHistogram], candidate: Sequence[LatencyHistogram],
                      rng: np.random.Generator, percentiles: Sequence[int] = PERCENTILES,
                      confidence: float = CONFIDENCE, resamples: int = RESAMPLES) -> Dict[int, Ratio]:
    """The ratio of each percentile, candidate over baseline, each side the runs of one build on one board.
    ValueError when a side has no run or its histograms differ in bucket width."""
    base_point, base_draws = _resampled(baseline, percentiles, resamples, rng)
    cand_point, cand_draws = _resampled(candidate, percentiles, resamples, rng)
    # Each side's percentile is within its relative accuracy a of the exact one: the ratio within (1+a)/(1-a).
    widen = sum(math.log((1 + a) / (1 - a)) / 2 for a in (_accuracy(baseline), _accuracy(candidate)))
    ratios = {}
    for p in percentiles:
        logs = np.log(cand_draws[p]) - np.log(base_draws[p])
        low, high = _interval(logs, confidence)
        ratios[p] = Ratio(p, cand_point[p] / base_point[p], math.exp(low - widen), math.exp(high + widen),
                          base_point[p], cand_point[p], logs, widen)
    return ratios


def combined(ratios: Sequence[Ratio], confidence: float = CONFIDENCE) -> Ratio:
    """The geometric mean of one percentile's ratios over several boards (each drawn with the same number
    of resamples), its interval from the resampled means: the boards are the ones measured, not a sample."""
    logs = np.mean([r.log_resamples for r in ratios], axis=0)
    widen = _mean(r.widened for r in ratios)
    low, high = _interval(logs, confidence)
    return Ratio(ratios[0].percentile, math.exp(_mean(math.log(r.estimate) for r in ratios)),
                 math.exp(low - widen), math.exp(high + widen), math.exp(_mean(math.log(r.baseline_ms) for r in ratios)),
                 math.exp(_mean(math.log(r.candidate_ms) for r in ratios)), logs, widen)


def pooled_percentiles(runs: Sequence[LatencyHistogram], percentiles: Sequence[int] = PERCENTILES) -> Dict[int, float]:
    """Each percentile of the runs' durations pooled, by nearest rank (ms)."""
    pooled = runs[0]
    for run in runs[1:]:
        pooled = pooled.merged(run)
    return {p: pooled.percentile(p) for p in percentiles}


def _interval(logs: np.ndarray, confidence: float) -> Tuple[float, float]:
    low, high = np.quantile(logs, [(1 - confidence) / 2, 1 - (1 - confidence) / 2])
    return float(low), float(high)


def _mean(values: Iterable[float]) -> float:
    listed = list(values)
    return sum(listed) / len(listed)


def _accuracy(runs: Sequence[LatencyHistogram]) -> float:
    return max(run.relative_accuracy for run in runs)


def _resampled(runs: Sequence[LatencyHistogram], percentiles: Sequence[int], resamples: int,
               rng: np.random.Generator) -> Tuple[Dict[int, float], Dict[int, np.ndarray]]:
    """The pooled runs' percentiles, and each percentile over `resamples` bootstrap resamples."""
    if not runs:
        raise ValueError("a side without runs cannot be compared")
    if len({run.gamma for run in runs}) > 1:
        raise ValueError("its runs' histograms have different bucket widths")
    grid = sorted({index for run in runs for index, _ in run.buckets})
    position = {index: k for k, index in enumerate(grid)}
    values = np.array([runs[0].value(index) for index in grid])
    counts = np.zeros((len(runs), len(grid)), dtype=np.int64)
    for j, run in enumerate(runs):
        for index, count in run.buckets:
            counts[j, position[index]] = count
    pooled = np.zeros((resamples, len(grid)), dtype=np.int64)
    picks = rng.integers(0, len(runs), size=(resamples, len(runs))) if len(runs) > 1 else \
        np.zeros((resamples, 1), dtype=np.int64)
    for j in range(len(runs)):
        total = int(counts[j].sum())
        chances = counts[j] / total
        times = (picks == j).sum(axis=1)
        for time in range(1, int(times.max(initial=0)) + 1):
            rows = np.nonzero(times >= time)[0]
            pooled[rows] += rng.multinomial(total, chances, size=len(rows))
    point = _percentiles(counts.sum(axis=0, keepdims=True), values, percentiles)
    draws = _percentiles(pooled, values, percentiles)
    return {p: float(point[p][0]) for p in percentiles}, draws


def _percentiles(counts: np.ndarray, values: np.ndarray, percentiles: Sequence[int]) -> Mapping[int, np.ndarray]:
    """Each row's percentiles by nearest rank: the value of the bucket holding the ceil(p * n / 100)-th duration."""
    cumulative = np.cumsum(counts, axis=1)
    totals = cumulative[:, -1]
    found = {}
    for p in percentiles:
        ranks = np.maximum(1, (p * totals + 99) // 100)
        found[p] = values[(cumulative < ranks[:, None]).sum(axis=1)]
    return found
