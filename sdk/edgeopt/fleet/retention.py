"""Periodic pruning for a running collector: telemetry and rejected messages older than N days."""
from __future__ import annotations

import logging
import time
from typing import Callable, Dict, Optional

from .writer import FleetWriter

log = logging.getLogger(__name__)

DAY_S = 86400.0
DEFAULT_EVERY_S = 3600.0


class Retention:
    """`tick()` prunes when due: at the first call, then every `every_s` seconds."""

    def __init__(self, store: FleetWriter, days: float, every_s: float = DEFAULT_EVERY_S,
                 clock: Callable[[], float] = time.time):
        if days <= 0:
            raise ValueError(f"retention must be positive days, got {days}")
        self.store = store
        self.days = days
        self.every_s = every_s
        self._clock = clock
        self._next = 0.0
        self.last: Optional[Dict[str, int]] = None

    def tick(self) -> Optional[Dict[str, int]]:
        now = self._clock()
        if now < self._next:
            return None
        self._next = now + self.every_s
        try:
            self.last = self.store.prune(now - self.days * DAY_S)
        except Exception as exc:  # a failed prune must not stop collecting; the next one tries again
            log.error("pruning rows older than %g days failed: %s: %s", self.days, type(exc).__name__, exc)
            return None
        if any(self.last.values()):
            log.info("pruned %d telemetry rows and %d rejected messages older than %g days",
                     self.last["telemetry"], self.last["rejected"], self.days)
        return self.last
