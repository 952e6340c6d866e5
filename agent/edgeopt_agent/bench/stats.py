"""Latency statistics: nearest-rank percentiles, mean, population standard deviation, and the
distribution itself as a compact histogram (what a later build is compared against)."""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Dict, Mapping, Sequence

from ..wire.latency_histogram import LatencyHistogram

PERCENTILES = (50, 90, 95, 99)


def nearest_rank(sorted_values: Sequence[float], percentile: float) -> float:
    """The smallest value with at least `percentile`% of the values at or below it.

    Rank = ceil(p/100 * n), computed exactly (no float rounding at the boundaries).
    """
    if not sorted_values:
        raise ValueError("no values")
    if not 0 < percentile <= 100:
        raise ValueError(f"percentile must be in (0, 100], got {percentile}")
    rank = math.ceil(Fraction(str(percentile)) * len(sorted_values) / 100)
    return sorted_values[max(rank, 1) - 1]


def summarize_ms(seconds: Sequence[float]) -> Dict[str, float]:
    """{p50, p90, p95, p99, mean, std, min, max} in milliseconds from per-run durations in seconds."""
    return summarize_milliseconds([s * 1000.0 for s in seconds])


def histogram_ms(seconds: Sequence[float]) -> Dict[str, Any]:
    """The per-run durations (seconds) as a result's `latency_histogram` (ms, within 0.5 %)."""
    return LatencyHistogram.of_durations(s * 1000.0 for s in seconds).to_dict()


def summarize_milliseconds(values: Sequence[float]) -> Dict[str, float]:
    """The same summary from durations already in milliseconds (CUDA event timings)."""
    ms = sorted(values)
    n = len(ms)
    mean = math.fsum(ms) / n
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in ms) / n)
    summary = {f"p{p}": nearest_rank(ms, p) for p in PERCENTILES}
    summary.update(mean=mean, std=std, min=ms[0], max=ms[-1])
    return {k: round(v, 6) for k, v in summary.items()}


# Per-call GPU timings a runner may report (CUDA events), and the result key each becomes.
DEVICE_TIMING_KEYS = {
    "gpu_compute": "gpu_compute_ms",  # the engine alone: events around the enqueue
    "gpu_latency": "gpu_latency_ms",  # H2D copy + compute + D2H copy on the GPU's clock (trtexec's "Latency")
    "h2d": "h2d_ms",
    "d2h": "d2h_ms",
    "enqueue": "enqueue_ms",  # host time to enqueue the engine; the GPU idles for it after the input copy
}


def device_timing_fields(timings: Mapping[str, Sequence[float]]) -> Dict[str, Dict[str, float]]:
    """Summaries of a runner's per-call GPU timings (ms), for the kinds it measured."""
    return {
        field: summarize_milliseconds(timings[kind])
        for kind, field in DEVICE_TIMING_KEYS.items()
        if timings.get(kind)
    }
