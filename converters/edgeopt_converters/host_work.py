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

Where samples sit in each output: axis 0 for most models, but a CTC reader exported time-major gives
[T, N, C] and a recurrent state [layers, N, H]. Sliced on axis 0, such an output kept only its first
time step per sample (a CRNN's 20 steps judged on 1); fed two samples, the axis that doubles is theirs.
"""
from __future__ import annotations

import logging
import os
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .accuracy.sample_layout import sample_axes, samples_first

Predict = Callable[[Mapping[str, np.ndarray]], Sequence[np.ndarray]]
log = logging.getLogger("edgeopt.convert")

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
    sample_axes: Tuple[int, ...] = ()  # per output, the axis its samples sit on (none given: axis 0)

    def describe(self) -> str:
        samples = f"{self.batch} samples per run" if self.batch > 1 else "one sample per run"
        moved = [f"output {i} on its axis {axis}" for i, axis in enumerate(self.sample_axes) if axis]
        return f"accuracy work on this host: {self.threads} thread{'s' if self.threads > 1 else ''}, {samples}" + (
            f" ({self.why})" if self.why else "") + (
            f"; samples sit on another axis than 0 in {', '.join(moved)} (judged with them first)" if moved else "")


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


def probe_sample_axes(predict: Predict, one: Sequence[np.ndarray], two: Mapping[str, np.ndarray]) -> Tuple[int, ...]:
    """Where each output holds its samples, from the outputs of a run of one sample (`one`) and a run of
    the feed of two (`two`); not probed (all axis 0) where every output's axis 0 already has one row for
    one sample, nor where the model takes no second sample."""
    alone = [np.asarray(o) for o in one]
    if all(a.ndim and a.shape[0] == 1 for a in alone):
        return ()
    try:
        together = [np.asarray(o) for o in predict(two)]
    except Exception:  # a model fixed at one sample per run: its outputs stay as they are
        log.debug("two samples in one run refused; outputs keep axis 0 as their samples'", exc_info=True)
        return ()
    axes = sample_axes(alone, together, 2)
    return axes if any(axes) else ()


def same_per_sample(predict: Predict, batched: Mapping[str, np.ndarray], batch: int, base: int,
                    axes: Sequence[int] = ()) -> bool:
    """Whether `predict` gives the first samples of a batched feed what it gives them fed alone
    (`base` rows at a time, the model's own batch; `axes`: where each output holds its samples)."""
    together = samples_first(predict(batched), axes)
    for start in range(0, min(2 * base, batch), base):
        alone = samples_first(predict({k: v[start:start + base] for k, v in batched.items()}), axes)
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
