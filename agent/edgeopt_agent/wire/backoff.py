"""Jittered exponential back-off for reconnecting to the broker.

The jitter spreads a fleet's reconnects out after a broker restart instead of having every
board knock at the same instant.
"""
from __future__ import annotations

import random
from typing import Callable


class Backoff:
    """Delays of initial * factor**n, capped at `maximum`, each shortened by up to `jitter` (a fraction)."""

    def __init__(
        self,
        initial: float = 1.0,
        maximum: float = 60.0,
        factor: float = 2.0,
        jitter: float = 0.5,
        rng: Callable[[], float] = random.random,
    ):
        if not 0 < initial <= maximum:
            raise ValueError(f"back-off needs 0 < initial ({initial}) <= maximum ({maximum})")
        if factor < 1 or not 0 <= jitter < 1:
            raise ValueError("back-off needs factor >= 1 and 0 <= jitter < 1")
        self.initial = initial
        self.maximum = maximum
        self.factor = factor
        self.jitter = jitter
        self._rng = rng
        self._attempt = 0

    def next(self) -> float:
        """The delay before the next attempt; each call backs off further."""
        base = min(self.maximum, self.initial * self.factor ** min(self._attempt, 64))
        self._attempt += 1
        return base * (1.0 - self.jitter * self._rng())

    def reset(self) -> None:
        """Start again from `initial` (after a successful connection)."""
        self._attempt = 0
