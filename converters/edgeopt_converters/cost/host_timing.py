"""An interleaved latency measurement of each artifact on the host, run until its speed-ups are known.

Timings on a shared machine drift by more than the differences we compare, so every variant is
timed in turn, round after round. Each round gives every variant a median latency, and a
variant's speed-up over its baseline (FP32 of its format) is the ratio within the same round, so
drift between rounds cancels. Rounds go on until every speed-up is known within `margin` (the
half-width of its 95 % interval, relative) or the time cap is reached; the interval is reported
either way.

On a loaded host a few rounds can be far off (another process took a core for one variant's
turn), and a t-interval on them is confidently wrong. So each round starts with another variant
(no variant always follows the same neighbour), the estimate is the median of the per-round log
ratios with a distribution-free interval (order statistics of the binomial, widened to the
t-interval where that is wider), the two halves of the rounds are compared (drift: the speed-up
moved while it was measured, so more rounds are timed, up to the cap, and the drift is recorded),
and the host's load average is recorded beside every timing.
"""
from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Optional, Tuple

import numpy as np

Run = Callable[[], object]
# onnxruntime's pool threads spin after a run ends; timed side by side on a small host, an idle
# session's spinning threads take the cores from the one being timed (the corpus detector's FP32 ran
# 26 ms p50 next to two INT8 sessions, 11.7 ms with this set, and the INT8/FP32 ratio moved by 5-10 %).
# The setting stops the spinning when a run returns; the next run spins as usual.
ORT_SIDE_BY_SIDE = {"session.force_spinning_stop": "1"}
# Two-sided 95 % Student t quantiles for 1..30 degrees of freedom.
_T_95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)


@dataclass(frozen=True)
class Speedup:
    estimate: float
    low: float
    high: float
    baseline: str
    drift: Optional[float] = None  # relative change of the estimate between the first and second half of the rounds

    def text(self) -> str:
        return speedup_text(self.estimate, self.low, self.high)

    def to_dict(self) -> dict:
        out = {"estimate": round(self.estimate, 3), "interval": [round(self.low, 3), round(self.high, 3)],
               "baseline": self.baseline}
        if self.drift is not None:
            out["drift"] = round(self.drift, 3)
        return out


def speedup_text(estimate: float, low: Optional[float] = None, high: Optional[float] = None, times: str = "x") -> str:
    """A speed-up and its 95 % interval as every table, reason and report shows it: `1.12x [1.00, 1.32]`.
    From the figures as the manifest keeps them (3 decimals), so a figure shown from the manifest and
    one shown while converting never differ in the last digit."""
    shown = f"{round(estimate, 3):.2f}{times}"
    if low is None or high is None:
        return shown
    return f"{shown} [{round(low, 3):.2f}, {round(high, 3):.2f}]"


@dataclass(frozen=True)
class HostTiming:
    p50_ms: float
    p90_ms: float
    runs: int
    rounds: int = 0
    speedup: Optional[Speedup] = None  # against its baseline; None for a baseline itself
    load: Optional[Tuple[float, float]] = None  # the host's 1-minute load average before and after timing
    round_ms: Tuple[float, ...] = ()  # its median in each round: any two artifacts timed together pair up by round

    def to_dict(self) -> dict:
        out = {"p50_ms": round(self.p50_ms, 4), "p90_ms": round(self.p90_ms, 4), "runs": self.runs,
               "rounds": self.rounds, "speedup": self.speedup.to_dict() if self.speedup else None}
        if self.load is not None:
            out["load"] = [round(v, 2) for v in self.load]
        return out


def _t_quantile(samples: int) -> float:
    degrees = samples - 1
    if degrees < 1:
        return float("inf")
    return _T_95[degrees - 1] if degrees <= len(_T_95) else 1.96


def ratio_interval(baseline: List[float], candidate: List[float]) -> Speedup:
    """Speed-up (baseline / candidate) from paired round medians: the median log ratio, with the wider
    of a distribution-free interval for the median and a t-interval on the log ratios."""
    logs = sorted(math.log(b / c) for b, c in zip(baseline, candidate) if b > 0 and c > 0)
    if not logs:
        return Speedup(float("nan"), float("nan"), float("nan"), "")
    if len(logs) == 1:
        return Speedup(math.exp(logs[0]), 0.0, float("inf"), "")
    centre = statistics.median(logs)
    mean = statistics.fmean(logs)
    half = _t_quantile(len(logs)) * statistics.stdev(logs) / math.sqrt(len(logs))
    low, high = _median_interval(logs)
    return Speedup(math.exp(centre), math.exp(min(low, mean - half)), math.exp(max(high, mean + half)), "")


def _median_interval(ordered: List[float]) -> Tuple[float, float]:
    """About 95 % for the median from order statistics (binomial, normal approximation); the whole
    range below six values, where no narrower distribution-free interval exists."""
    n = len(ordered)
    k = int(math.floor((n - 1.96 * math.sqrt(n)) / 2))
    if k < 1:
        return ordered[0], ordered[-1]
    return ordered[k - 1], ordered[n - k]


def drift(baseline: List[float], candidate: List[float]) -> Optional[float]:
    """How far the speed-up of the second half of the rounds is from the first's (relative); None
    under eight rounds, too few to split."""
    if len(baseline) < 8:
        return None
    half = len(baseline) // 2
    first = ratio_interval(baseline[:half], candidate[:half]).estimate
    second = ratio_interval(baseline[half:], candidate[half:]).estimate
    return abs(second / first - 1) if first > 0 and math.isfinite(first) and math.isfinite(second) else None


def _load() -> Optional[float]:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def _known(speedup: Speedup, margin: float) -> bool:
    return math.isfinite(speedup.high) and speedup.high / speedup.estimate - 1 <= margin \
        and 1 - speedup.low / speedup.estimate <= margin


def time_interleaved(runs: Mapping[str, Run], baselines: Optional[Mapping[str, str]] = None,
                     min_rounds: int = 5, max_rounds: int = 40, max_seconds: float = 60.0,
                     margin: float = 0.05, min_round_s: float = 0.05, warmup: int = 3,
                     on_round: Optional[Callable[[], None]] = None, rank_fastest: bool = False,
                     decide_at: Optional[float] = None, extra_seconds: float = 0.0) -> Dict[str, HostTiming]:
    """Time every run in turn, round after round. `baselines` maps a key to the key it is compared with.
    With `rank_fastest`, the two fastest runs so far must also be known apart within `margin` before the
    rounds stop (a choice between them then rests on an interval, not on two medians). With `decide_at`, a
    speed-up whose interval still holds that value while its estimate is past it (more rounds may show it)
    keeps the rounds going for up to `extra_seconds` (and as many rounds again) past the caps."""
    baselines = {k: b for k, b in (baselines or {}).items() if b in runs and b != k}
    keys = list(runs)
    samples: Dict[str, List[float]] = {key: [] for key in runs}
    medians: Dict[str, List[float]] = {key: [] for key in runs}
    for run in runs.values():
        for _ in range(warmup):
            run()
    load_before = _load()
    started = time.perf_counter()
    rounds = 0
    while True:
        for key in keys[rounds % len(keys):] + keys[:rounds % len(keys)]:
            run = runs[key]
            this_round = []
            start_round = time.perf_counter()
            while True:
                start = time.perf_counter()
                run()
                end = time.perf_counter()
                this_round.append((end - start) * 1000.0)
                if end - start_round >= min_round_s:
                    break
            samples[key].extend(this_round)
            medians[key].append(statistics.median(this_round))
        rounds += 1
        if on_round:
            on_round()
        pairs = dict(baselines)
        if rank_fastest and len(keys) > 1:
            first, second = sorted(keys, key=lambda k: statistics.median(medians[k]))[:2]
            pairs.setdefault(second, first)
        if rounds < min_rounds:
            continue
        if all(_known(ratio_interval(medians[b], medians[k]), margin) and not _drifting(medians[b], medians[k], margin)
               for k, b in pairs.items()):
            break
        elapsed = time.perf_counter() - started
        if elapsed >= max_seconds or rounds >= max_rounds:
            undecided = decide_at is not None and any(_straddles(ratio_interval(medians[b], medians[k]), decide_at)
                                                       for k, b in baselines.items())
            if not undecided or elapsed >= max_seconds + extra_seconds or rounds >= 2 * max_rounds:
                break
    load_after = _load()
    load = (load_before, load_after) if load_before is not None and load_after is not None else None
    result = {}
    for key, values in samples.items():
        speedup = None
        if key in baselines:
            measured = ratio_interval(medians[baselines[key]], medians[key])
            speedup = Speedup(measured.estimate, measured.low, measured.high, baselines[key],
                              drift(medians[baselines[key]], medians[key]))
        result[key] = HostTiming(statistics.median(values), float(np.percentile(values, 90, method="inverted_cdf")),
                                 len(values), rounds, speedup, load, tuple(medians[key]))
    return result


def _straddles(speedup: Speedup, threshold: float) -> bool:
    """The interval holds `threshold` while the estimate is past it: more rounds may decide it."""
    return speedup.low < threshold < speedup.high and speedup.estimate > threshold


def _drifting(baseline: List[float], candidate: List[float], margin: float) -> bool:
    """The two halves of the rounds disagree by more than twice the margin: keep timing."""
    moved = drift(baseline, candidate)
    return moved is not None and moved > 2 * margin
