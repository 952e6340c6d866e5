"""Where a conversion's time goes, by phase (export, reference, calibration, validation, search, ...).

A phase opened inside another counts toward the outer one only (a search's own calibrations and
validations are the search's time), so the phases add up to the time measured. The search phase is
what `--time-budget` limits: exports, the FP32 reference and the first verdicts are reported apart.
"""
from __future__ import annotations

import contextlib
import time
from typing import Dict, Iterator, List, Optional, Tuple

SEARCH = "search"  # mixed-precision searches and the repairs of quantizers that crash: --time-budget's


class PhaseClock:
    def __init__(self) -> None:
        self._closed: Dict[str, float] = {}
        self._open: List[Tuple[str, float]] = []

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if self._open:  # inside another phase: its time is the outer phase's
            yield
            return
        self._open.append((name, time.monotonic()))
        try:
            yield
        finally:
            _, started = self._open.pop()
            self._closed[name] = self._closed.get(name, 0.0) + time.monotonic() - started

    def current(self) -> Optional[str]:
        return self._open[0][0] if self._open else None

    def seconds(self, name: str) -> float:
        """Time spent in `name` so far, a phase still open included."""
        running = sum(time.monotonic() - t for n, t in self._open if n == name)
        return self._closed.get(name, 0.0) + running

    def totals(self) -> Dict[str, float]:
        return {name: round(self.seconds(name), 1) for name in dict.fromkeys(list(self._closed) + [n for n, _ in self._open])}
