"""Confidence bounds for rates measured on a finite evaluation set.

Verdicts ask a one-sided question ("is the loss at most the budget?"), so the bounds are one-sided
at 95 % (z = 1.645). Rates are fractions in [0, 1]; callers speak percentage points.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

Z_ONE_SIDED_95 = 1.6449
MAX_SAMPLES_NEEDED = 10_000_000


@dataclass(frozen=True)
class Bounds:
    estimate: float
    low: float
    high: float


def wilson(successes: float, trials: int, z: float = Z_ONE_SIDED_95) -> Bounds:
    """Wilson score bounds of a binomial proportion (or of the mean of a variable in [0, 1], whose variance is
    at most a proportion's: `successes` its sum); trials == 0 says nothing: [0, 1]."""
    if trials <= 0:
        return Bounds(0.0, 0.0, 1.0)
    p = successes / trials
    z2 = z * z
    centre = (p + z2 / (2 * trials)) / (1 + z2 / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials)) / (1 + z2 / trials)
    return Bounds(p, max(0.0, centre - half), min(1.0, centre + half))


def mean_bounds(values: np.ndarray, z: float = Z_ONE_SIDED_95) -> Bounds:
    """One-sided 95 % bounds of the mean of per-sample values in [0, 1] from their spread (normal
    approximation, as paired_difference), clipped to [0, 1]."""
    values = np.asarray(values, dtype=np.float64)
    if values.size < 2:
        return Bounds(float(values.mean()) if values.size else 0.0, 0.0, 1.0)
    mean = float(values.mean())
    half = z * float(values.std(ddof=1)) / math.sqrt(values.size)
    return Bounds(mean, max(0.0, mean - half), min(1.0, mean + half))


def paired_difference(lost: int, gained: int, trials: int, z: float = Z_ONE_SIDED_95) -> Bounds:
    """Bounds of (lost - gained) / trials for paired right/wrong outcomes (Agresti-Min adjusted Wald).

    `lost`: samples the reference got right and the candidate wrong; `gained`: the reverse.
    """
    if trials <= 0:
        return Bounds(0.0, -1.0, 1.0)
    estimate = (lost - gained) / trials
    b, c, n = lost + 0.5, gained + 0.5, trials + 2.0
    centre = (b - c) / n
    half = z * math.sqrt(max((b + c) - (b - c) ** 2 / n, 0.0)) / n
    return Bounds(estimate, max(-1.0, centre - half), min(1.0, centre + half))


def samples_needed(rate: float, budget: float, z: float = Z_ONE_SIDED_95) -> Optional[int]:
    """Fewest samples at which a rate observed at `rate` would have Wilson bounds on one side of `budget`.

    None when no number up to MAX_SAMPLES_NEEDED decides it (the rate sits on the budget).
    """
    def decided(n: int) -> bool:
        bounds = wilson(int(round(rate * n)), n, z)
        return bounds.high <= budget if rate <= budget else bounds.low > budget

    high = 1
    while not decided(high):
        high *= 2
        if high > MAX_SAMPLES_NEEDED:
            return None
    low = high // 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if decided(middle) else (middle, high)
    return high
