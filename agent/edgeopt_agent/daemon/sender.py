"""Feeds the outbox to the MQTT session a window at a time; rows leave only on PUBACK.

Runs on the session's network thread. paho keeps its own copy of every unacknowledged QoS 1
message and sends it again after a reconnect (same packet id), so the in-flight map stays valid
across reconnects of one paho client; only a new client (protocol fallback) or a new process
starts over from the oldest row in the outbox.
"""
from __future__ import annotations

import logging
import time
from typing import Callable, Dict, List

from .outbox import Outbox

log = logging.getLogger(__name__)

Publish = Callable[[str, bytes, bool], int]  # (topic, payload, retain) -> packet id
RETRY_AFTER_S = 5.0


class OutboxSender:
    def __init__(self, outbox: Outbox, window: int = 20, clock: Callable[[], float] = time.monotonic):
        self._outbox = outbox
        self._window = window
        self._clock = clock
        self._in_flight: Dict[int, int] = {}  # packet id -> outbox row id
        self._cursor = 0  # highest outbox row id handed to the session
        self._acked: List[int] = []
        self._refused: List[int] = []
        self._retry_at = 0.0

    def restart(self) -> None:
        """The MQTT client was replaced: nothing is in flight any more."""
        self._in_flight.clear()
        self._refused.clear()
        self._cursor = 0

    def acknowledged(self, packet_id: int, accepted: bool) -> None:
        row = self._in_flight.pop(packet_id, None)
        if row is None:
            return  # not an outbox message (status)
        if accepted:
            self._acked.append(row)
        else:
            log.warning("broker refused outbox message %d; it stays queued and is retried in %.0f s",
                        row, RETRY_AFTER_S)
            self._refused.append(row)
            self._retry_at = self._clock() + RETRY_AFTER_S

    def idle(self) -> bool:
        """Nothing handed to the session is still waiting for its PUBACK."""
        return not self._in_flight

    def flush(self) -> None:
        """Delete acknowledged rows (one transaction for the batch)."""
        if self._acked:
            self._outbox.remove(self._acked)
            self._acked = []

    def tick(self, publish: Publish) -> None:
        self.flush()
        room = self._window - len(self._in_flight)
        if room <= 0:
            return
        if self._refused and self._clock() >= self._retry_at:
            retry, self._refused = self._refused[:room], self._refused[room:]
            for message in self._outbox.get(retry):
                self._in_flight[publish(message.topic, message.payload, message.retain)] = message.id
            room = self._window - len(self._in_flight)
        if room > 0 and self._outbox.last_id > self._cursor:
            for message in self._outbox.pending(after_id=self._cursor, limit=room):
                self._in_flight[publish(message.topic, message.payload, message.retain)] = message.id
                self._cursor = message.id
