"""The measured loop: each call timed on its own, stopping once both minimums are met."""
from __future__ import annotations

import hashlib
import time
from typing import Callable, List, Sequence, Tuple

import numpy as np

from ..runners.base import TensorInfo


def time_calls(call: Callable[[], object], min_runs: int, min_seconds: float, max_seconds: float) -> Tuple[List[float], float]:
    """Call `call` until it ran `min_runs` times and `min_seconds` passed, or `max_seconds` passed.

    Returns the per-call durations and the phase's elapsed time, both in seconds. Only the call
    itself sits between the two clock reads.
    """
    durations: List[float] = []
    if min_runs <= 0 and min_seconds <= 0:
        return durations, 0.0
    append = durations.append
    clock = time.perf_counter
    start = clock()
    while True:
        t0 = clock()
        call()
        t1 = clock()
        append(t1 - t0)
        elapsed = t1 - start
        if (len(durations) >= min_runs and elapsed >= min_seconds) or elapsed >= max_seconds:
            return durations, elapsed


def output_digest(infos: Sequence[TensorInfo], arrays: Sequence[np.ndarray]) -> str:
    """sha256 over every output's name, dtype, shape and bytes, in the model's output order."""
    digest = hashlib.sha256()
    for info, array in zip(infos, arrays):
        array = np.ascontiguousarray(array)
        digest.update(f"{info.name}|{array.dtype.str}|{list(array.shape)}\n".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()
