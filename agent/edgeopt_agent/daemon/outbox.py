"""The disk-backed outbox: every message the agent measures waits here until the broker has it.

A message is written (with its sequence number, in the same transaction) before any attempt to
send it, and deleted only once the broker acknowledged it (PUBACK). Across a broker outage or an
agent restart the outbox simply keeps its rows and the sender drains them when it can.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List

from .. import protocol
from .store import Store

log = logging.getLogger(__name__)

# Telemetry is dropped oldest-first beyond this many queued messages (about 17 days of
# telemetry at the default interval); results are never dropped.
DEFAULT_MAX_MESSAGES = 50_000


@dataclass(frozen=True)
class OutgoingMessage:
    id: int
    topic: str
    payload: bytes
    retain: bool


class Outbox:
    def __init__(self, store: Store, device_id: str, max_messages: int = DEFAULT_MAX_MESSAGES):
        self._store = store
        self._device_id = protocol.validate_device_id(device_id)
        self._max_messages = max_messages
        self._last_id_lock = threading.Lock()
        with store.transaction() as db:
            self._last_id = db.execute("SELECT COALESCE(MAX(id), 0) FROM outbox").fetchone()[0]

    @property
    def last_id(self) -> int:
        """Id of the newest message, so a sender can tell cheaply whether there is anything new."""
        with self._last_id_lock:
            return self._last_id

    def add(self, kind: str, message_type: str, body: Dict[str, Any], retain: bool = False) -> protocol.Envelope:
        """Queue one message on this device's `kind` topic; returns the envelope as stored."""
        topic = protocol.topic(self._device_id, kind)
        with self._store.transaction() as db:
            envelope = protocol.Envelope(
                device_id=self._device_id, seq=self._store.next_seq(kind), type=message_type, body=body
            )
            cursor = db.execute(
                "INSERT INTO outbox (kind, topic, payload, retain, created) VALUES (?, ?, ?, ?, ?)",
                (kind, topic, envelope.encode(), int(retain), time.time()),
            )
            self._trim(db)
        with self._last_id_lock:
            self._last_id = max(self._last_id, cursor.lastrowid)
        return envelope

    def pending(self, after_id: int = 0, limit: int = 100) -> List[OutgoingMessage]:
        """Queued messages with an id above `after_id`, oldest first."""
        with self._store.transaction() as db:
            rows = db.execute(
                "SELECT id, topic, payload, retain FROM outbox WHERE id > ? ORDER BY id LIMIT ?", (after_id, limit)
            ).fetchall()
        return [OutgoingMessage(row[0], row[1], bytes(row[2]), bool(row[3])) for row in rows]

    def get(self, ids: Iterable[int]) -> List[OutgoingMessage]:
        wanted = list(ids)
        with self._store.transaction() as db:
            rows = [
                db.execute("SELECT id, topic, payload, retain FROM outbox WHERE id = ?", (i,)).fetchone()
                for i in wanted
            ]
        return [OutgoingMessage(row[0], row[1], bytes(row[2]), bool(row[3])) for row in rows if row]

    def remove(self, ids: Iterable[int]) -> None:
        """Forget messages the broker acknowledged."""
        with self._store.transaction() as db:
            db.executemany("DELETE FROM outbox WHERE id = ?", [(i,) for i in ids])

    def __len__(self) -> int:
        with self._store.transaction() as db:
            return db.execute("SELECT COUNT(*) FROM outbox").fetchone()[0]

    def _trim(self, db) -> None:
        excess = db.execute("SELECT COUNT(*) FROM outbox").fetchone()[0] - self._max_messages
        if excess <= 0:
            return
        dropped = db.execute(
            "DELETE FROM outbox WHERE id IN (SELECT id FROM outbox WHERE kind = ? ORDER BY id LIMIT ?)",
            (protocol.TELEMETRY, excess),
        ).rowcount
        log.warning("outbox is full (%d messages): dropped the %d oldest telemetry messages",
                    self._max_messages, dropped)
