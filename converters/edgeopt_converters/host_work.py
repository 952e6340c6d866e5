"""How this host runs a conversion's accuracy work (the FP32 reference, calibration, validation):
with how many threads, and how many samples per run.

Not its timing: host timing keeps the profile's threads, since it measures what the board will run.

Threads are measured, not assumed. On a 2-core host where another process keeps a core busy, two
threads wait on each other: a MobileNetV2 reference in PyTorch took 1.97 s per sample with 2 threads
and 0.09 s with 1 (measured 2026-11-27 at load 9). So one feed is run with one thread and with all
cores, in turn, and more threads are used only where they are clearly faster.

Samples per run: small inputs (audio frames, token rows) pay more for each call than for its
arithmetic, so they are fed many at a time; an image of 224x224 gains nothing from a batch on a
CPU (its activations leave the caches) and is fed one at a time. A batch is used only where the
model takes one (every input shares axis 0) and gives each sample what it gives it alone.
"""
from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

Predict = Callable[[Mapping[str, np.ndarray]], Sequence[np.ndarray]]

BATCH_ELEMENTS = 65536  # input elements per run (256 KiB of float32): beyond this a CPU gains nothing
MAX_BATCH = 64
PROBE_ROUNDS = 3
MORE_THREADS_GAIN = 0.8  # all cores must take at most this share of one thread's time to be used
SLOW_SAMPLE_S = 1.0  # a sample slower than this is timed once per thread count, not PROBE_ROUNDS times
SAME_OUTPUT = 1e-3  # of an output's largest magnitude: a batched run must give each sample this close


@dataclass(frozen=True)
class AccuracyRuns:
    threads: int
    batch: int  # samples per run where the model takes a batch; 1 feed = 1 sample elsewhere
    why: str = ""

    def describe(self) -> str:
        samples = f"{self.batch} samples per run" if self.batch > 1 else "one sample per run"
        return f"accuracy work on this host: {self.threads} thread{'s' if self.threads > 1 else ''}, {samples}" + (
            f" ({self.why})" if self.why else "")


def host_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def batch_for(sample_elements: int) -> int:
    """Samples per run for inputs of `sample_elements` values each: a power of two up to MAX_BATCH."""
    batch = 1
    while batch * 2 <= MAX_BATCH and batch * 2 * max(sample_elements, 1) <= BATCH_ELEMENTS:
        batch *= 2
    return batch


def choose_threads(make: Callable[[int], Callable[[], object]], cores: Optional[int] = None) -> "tuple[int, str]":
    """(threads, why): one thread against all cores, each timed PROBE_ROUNDS times in turn on the
    same call (`make(threads)` returns it, ready to run)."""
    cores = cores or host_cores()
    if cores <= 1:
        return 1, ""
    runs = {1: make(1), cores: make(cores)}
    warmup = []
    for run in runs.values():  # warm-up: first calls allocate
        start = time.perf_counter()
        run()
        warmup.append(time.perf_counter() - start)
    seconds: Dict[int, List[float]] = {1: [], cores: []}
    for _ in range(PROBE_ROUNDS if max(warmup) < SLOW_SAMPLE_S else 1):
        for threads, run in runs.items():
            start = time.perf_counter()
            run()
            seconds[threads].append(time.perf_counter() - start)
    one, many = statistics.median(seconds[1]), statistics.median(seconds[cores])
    if many <= MORE_THREADS_GAIN * one:
        return cores, f"{cores} threads ran a sample in {many * 1e3:.0f} ms, 1 thread in {one * 1e3:.0f} ms"
    return 1, f"1 thread ran a sample in {one * 1e3:.0f} ms, {cores} threads in {many * 1e3:.0f} ms{_load()}"


def same_per_sample(predict: Predict, batched: Mapping[str, np.ndarray], batch: int, base: int) -> bool:
    """Whether `predict` gives the first samples of a batched feed what it gives them fed alone
    (`base` rows at a time, the model's own batch)."""
    together = [np.asarray(o) for o in predict(batched)]
    for start in range(0, min(2 * base, batch), base):
        alone = [np.asarray(o) for o in predict({k: v[start:start + base] for k, v in batched.items()})]
        for whole, part in zip(together, alone):
            if whole.shape[1:] != part.shape[1:] or whole.shape[0] != part.shape[0] * batch // base:
                return False
            mine = whole[start:start + base].astype(np.float64)
            scale = float(np.max(np.abs(part))) if part.size else 0.0
            if not np.allclose(mine, part, rtol=0, atol=SAME_OUTPUT * scale + 1e-6, equal_nan=True):
                return False
    return True


def _load() -> str:
    try:
        return f"; load average {os.getloadavg()[0]:.1f} on {host_cores()} cores"
    except OSError:
        return ""
