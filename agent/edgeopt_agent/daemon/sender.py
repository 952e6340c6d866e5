"""Feeds the outbox to the MQTT session a window at a time, and sends again what was not confirmed.

Runs on the session's network thread. Each message goes through two acknowledgements:

1. the broker's PUBACK, which only paces sending (at most `window` messages await one). A
   message that needs no confirmation (a transfer request) is deleted here.
2. the collector's confirmation, on the device's confirm topic, that it committed the message
   (or already had it, or rejected it for good). Only then are telemetry and results deleted.

A message the broker acknowledged but the collector never confirmed may have died with the
broker (it acknowledges before it saves) or never reached a collector. So it is sent again:
after every reconnect, all of them; while connected, each one whose confirmation is overdue,
with its own back-off (`confirm_timeout_s` doubling up to `confirm_timeout_max_s`). While no
confirmation arrives at all (no collector running), only one overdue message is re-sent per
back-off step, as a probe, rather than the whole backlog each time. The collector stores a
message once by its id, so a copy costs nothing but bandwidth.

paho keeps its own copy of every QoS 1 message still waiting for its PUBACK and sends it again
after a reconnect (same packet id), so the in-flight map stays valid across reconnects of one
paho client; only a new client (protocol fallback) or a new process starts over from the
oldest row in the outbox.
"""
from __future__ import annotations

import heapq
import logging
import time
from collections import deque
from typing import Callable, Deque, Dict, Iterable, List, Tuple

from ..wire import Delivery
from ..wire.backoff import Backoff
from .outbox import Confirmed, OutgoingMessage, Outbox

log = logging.getLogger(__name__)

Publish = Callable[[str, bytes, bool], int]  # (topic, payload, retain) -> packet id
RETRY_AFTER_S = 5.0
CONFIRM_TIMEOUT_S = 30.0
CONFIRM_TIMEOUT_MAX_S = 1800.0


class OutboxSender:
    def __init__(self, outbox: Outbox, window: int = 20, clock: Callable[[], float] = time.monotonic,
                 confirm: bool = True, confirm_timeout_s: float = CONFIRM_TIMEOUT_S,
                 confirm_timeout_max_s: float = CONFIRM_TIMEOUT_MAX_S):
        """With `confirm` False every message is forgotten on its PUBACK (a set-up without a collector)."""
        self._outbox = outbox
        self._window = window
        self._clock = clock
        self._confirm = confirm
        self._timeout_s = confirm_timeout_s
        self._timeout_max_s = max(confirm_timeout_s, confirm_timeout_max_s)
        self._in_flight: Dict[int, OutgoingMessage] = {}  # packet id -> message
        self._cursor = 0  # highest outbox row id handed to the session
        self._acked: List[int] = []  # rows to delete: acknowledged, no confirmation needed
        self._refused: List[int] = []
        self._retry_at = 0.0
        self._sends: Dict[int, int] = {}  # row id -> times sent, for rows awaiting confirmation
        self._awaiting: Dict[int, float] = {}  # row id -> when its confirmation is overdue
        self._overdue: List[Tuple[float, int]] = []  # heap of (due, row id); stale entries skipped
        self._resend: Deque[int] = deque()  # rows to send again at once (after a reconnect)
        self._last_confirmed = clock()
        self._probe = Backoff(confirm_timeout_s, self._timeout_max_s, jitter=0.0)
        self._probe_at = 0.0
        self.resent = 0  # copies sent because a confirmation was missing

    # --- events -----------------------------------------------------------------------------------

    def restart(self) -> None:
        """The MQTT client was replaced: nothing is in flight any more, everything is sent again."""
        self._in_flight.clear()
        self._refused.clear()
        self._awaiting.clear()
        self._overdue.clear()
        self._resend.clear()
        self._cursor = 0

    def reconnected(self) -> None:
        """A new connection: what the broker acknowledged earlier may have died with it."""
        if self._awaiting:
            log.info("sending %d unconfirmed message(s) again after the reconnect", len(self._awaiting))
        self._resend.extend(sorted(self._awaiting))
        self._awaiting.clear()
        self._overdue.clear()

    def acknowledged(self, packet_id: int, accepted: bool) -> None:
        message = self._in_flight.pop(packet_id, None)
        if message is None:
            return  # not an outbox message (status)
        if not accepted:
            log.warning("broker refused outbox message %d; it stays queued and is retried in %.0f s",
                        message.id, RETRY_AFTER_S)
            self._refused.append(message.id)
            self._retry_at = self._clock() + RETRY_AFTER_S
        elif self._confirm and message.needs_confirmation:
            sends = self._sends.get(message.id, 1)
            due = self._clock() + min(self._timeout_max_s, self._timeout_s * 2 ** (sends - 1))
            self._awaiting[message.id] = due
            heapq.heappush(self._overdue, (due, message.id))
        else:
            self._acked.append(message.id)

    def confirmed(self, deliveries: Iterable[Delivery]) -> Confirmed:
        """The collector committed (or rejected for good) these messages, named by (id, digest of the bytes
        it had): forget those whose bytes are this board's own. Returns what was forgotten and kept."""
        done = self._outbox.confirm(deliveries)
        rows = done.rows
        for row in rows:
            self._awaiting.pop(row, None)
            self._sends.pop(row, None)
        self._last_confirmed = self._clock()
        self._probe.reset()
        self._probe_at = 0.0
        return done

    def idle(self) -> bool:
        """Nothing handed to the session is still waiting for its PUBACK."""
        return not self._in_flight

    @property
    def unconfirmed(self) -> int:
        """Messages the broker has but the collector has not confirmed yet."""
        return len(self._awaiting) + len(self._resend)

    def flush(self) -> None:
        """Delete acknowledged rows that need no confirmation (one transaction for the batch)."""
        if self._acked:
            self._outbox.remove(self._acked)
            self._acked = []

    # --- sending ------------------------------------------------------------------------------------

    def tick(self, publish: Publish) -> None:
        self.flush()
        now = self._clock()
        if self._refused and now >= self._retry_at:
            retry, self._refused = self._refused[:self._room()], self._refused[self._room():]
            self._send(publish, retry)
        if self._resend and self._room() > 0:
            batch = [self._resend.popleft() for _ in range(min(self._room(), len(self._resend)))]
            self._send(publish, batch, again=True)
        if self._room() > 0:
            self._send(publish, self._take_overdue(now), again=True)
        if self._room() > 0 and self._outbox.last_id > self._cursor:
            for message in self._outbox.pending(after_id=self._cursor, limit=self._room()):
                self._publish(publish, message)
                self._cursor = message.id

    def _room(self) -> int:
        return max(0, self._window - len(self._in_flight))

    def _take_overdue(self, now: float) -> List[int]:
        """Rows whose confirmation is overdue; while the collector is silent, one probe at a time."""
        silent = now - self._last_confirmed > self._timeout_s
        if silent and now < self._probe_at:
            return []
        taken: List[int] = []
        limit = 1 if silent else self._room()
        while self._overdue and len(taken) < limit and self._overdue[0][0] <= now:
            due, row = heapq.heappop(self._overdue)
            if self._awaiting.get(row) == due:
                del self._awaiting[row]
                taken.append(row)
        if silent and taken:
            self._probe_at = now + self._probe.next()
            log.warning("no confirmation from a collector for %.0f s (%d message(s) unconfirmed); sending the "
                        "oldest again. Is a collector running? Without one, run the agent with delivery = broker",
                        now - self._last_confirmed, len(self._awaiting) + len(taken))
        return taken

    def _send(self, publish: Publish, rows: List[int], again: bool = False) -> None:
        if not rows:
            return
        found = {message.id: message for message in self._outbox.get(rows)}
        for row in rows:
            message = found.get(row)
            if message is None:  # confirmed or dropped meanwhile
                self._sends.pop(row, None)
                continue
            if again:
                self.resent += 1
            self._publish(publish, message)

    def _publish(self, publish: Publish, message: OutgoingMessage) -> None:
        self._in_flight[publish(message.topic, message.payload, message.retain)] = message
        if self._confirm and message.needs_confirmation:
            self._sends[message.id] = self._sends.get(message.id, 0) + 1
