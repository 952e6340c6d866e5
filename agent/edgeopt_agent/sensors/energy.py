"""Energy over a time window, from power samples or energy-counter samples, and energy per inference.

Samples are (time.time(), value) pairs in time order: watts for instantaneous sensors, cumulative
joules for counters. Values at the window's edges are interpolated linearly between the samples
around them, so the window need not start or end on a sample.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple

Sample = Tuple[float, float]


@dataclass(frozen=True)
class EnergyReading:
    """Energy over one window. joules is None (with a reason) when it could not be measured."""

    joules: Optional[float]
    mean_watts: Optional[float]
    source: Optional[str]  # "measured_rail" | "board_total" | "estimate" | None
    rail: Optional[str]
    samples: int
    reason: Optional[str]
    duration_s: Optional[float] = None


class WindowNotCovered(ValueError):
    """The samples do not reach both edges of the window."""


def value_at(samples: Sequence[Sample], t: float) -> float:
    if not samples or t < samples[0][0] or t > samples[-1][0]:
        raise WindowNotCovered(f"no samples around t={t:.3f}")
    times = [s[0] for s in samples]
    right = bisect.bisect_left(times, t)
    if times[right] == t:
        return samples[right][1]
    (ta, va), (tb, vb) = samples[right - 1], samples[right]
    return va + (vb - va) * (t - ta) / (tb - ta)


def inside(samples: Sequence[Sample], t0: float, t1: float) -> int:
    return sum(1 for t, _ in samples if t0 <= t <= t1)


def counter_energy(samples: Sequence[Sample], t0: float, t1: float) -> float:
    """Joules between t0 and t1 from cumulative-joule samples of a counter."""
    _check_window(t0, t1)
    return value_at(samples, t1) - value_at(samples, t0)


def integrate_power(samples: Sequence[Sample], t0: float, t1: float) -> float:
    """Joules between t0 and t1 from watt samples, by the trapezoid rule."""
    _check_window(t0, t1)
    points = [(t0, value_at(samples, t0))]
    points += [(t, w) for t, w in samples if t0 < t < t1]
    points.append((t1, value_at(samples, t1)))
    return sum((tb - ta) * (wa + wb) / 2.0 for (ta, wa), (tb, wb) in zip(points, points[1:]))


def _check_window(t0: float, t1: float) -> None:
    if not t1 > t0:
        raise ValueError(f"the window must end after it starts (t0={t0}, t1={t1})")


def energy_fields(measured: EnergyReading, idle: EnergyReading, inferences: int) -> Dict[str, object]:
    """Result fields for one benchmark: energy per inference net of the idle baseline.

    energy per inference = (measured energy - idle mean watts x measured duration) / inferences.
    Without a sensor, a baseline, or power above idle, it is None and power_reason says why.
    """
    if inferences <= 0:
        raise ValueError(f"inferences must be positive, got {inferences}")
    fields: Dict[str, object] = {
        "energy_per_inference_mj": None,
        "avg_power_w": measured.mean_watts,
        "idle_power_w": idle.mean_watts,
        "power_source": measured.source,
        "power_rail": measured.rail,
        "power_reason": measured.reason,
    }
    if measured.joules is None or measured.mean_watts is None:
        fields["power_reason"] = measured.reason or "no power measurement for the measured phase"
        return fields
    if idle.mean_watts is None:
        fields["power_reason"] = (
            f"no idle baseline ({idle.reason or 'not measured'}): energy per inference needs one"
        )
        return fields
    if (idle.source, idle.rail) != (measured.source, measured.rail):
        fields["power_reason"] = "the idle baseline and the measured phase come from different power sensors"
        return fields
    duration = measured.duration_s
    if duration is None:
        if measured.mean_watts <= 0:
            fields["power_reason"] = "the measured phase has no duration to subtract the idle baseline over"
            return fields
        duration = measured.joules / measured.mean_watts
    net_joules = measured.joules - idle.mean_watts * duration
    if net_joules <= 0:
        fields["power_reason"] = (
            f"average power {measured.mean_watts:.3f} W is not above the idle {idle.mean_watts:.3f} W:"
            f" the model's energy is below what {measured.rail} resolves"
        )
        return fields
    fields["energy_per_inference_mj"] = net_joules / inferences * 1000.0
    return fields
