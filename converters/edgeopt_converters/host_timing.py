"""A short, interleaved latency measurement of each artifact on the host.

Timings on a shared machine drift by more than the differences we compare, so every variant is
timed in turn, round after round, and each gets the median of all its rounds.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable, Dict, Mapping

import numpy as np

Run = Callable[[], object]


@dataclass(frozen=True)
class HostTiming:
    p50_ms: float
    p90_ms: float
    runs: int

    def to_dict(self) -> dict:
        return {"p50_ms": round(self.p50_ms, 4), "p90_ms": round(self.p90_ms, 4), "runs": self.runs}


def time_interleaved(runs: Mapping[str, Run], rounds: int = 7, min_round_s: float = 0.05,
                     warmup: int = 3, on_round: Callable[[], None] = None) -> Dict[str, HostTiming]:
    samples: Dict[str, list] = {key: [] for key in runs}
    for run in runs.values():
        for _ in range(warmup):
            run()
    for _ in range(rounds):
        for key, run in runs.items():
            start_round = time.perf_counter()
            while True:
                start = time.perf_counter()
                run()
                end = time.perf_counter()
                samples[key].append((end - start) * 1000.0)
                if end - start_round >= min_round_s:
                    break
        if on_round:
            on_round()
    result = {}
    for key, values in samples.items():
        result[key] = HostTiming(statistics.median(values), float(np.percentile(values, 90, method="inverted_cdf")), len(values))
    return result
