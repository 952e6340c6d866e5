"""The disk-backed inbox: jobs received but not yet answered.

A job is written here before the broker gets its PUBACK, so a job survives an agent restart;
it leaves (is marked done) in the same transaction that queues its result in the outbox.
The same payload delivered twice (MQTT QoS 1 redelivery) is stored once.
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Optional

from .store import Store

# Answered jobs are remembered (for duplicate detection) up to this many.
KEEP_DONE = 1000


@dataclass(frozen=True)
class IncomingJob:
    id: int
    payload: bytes
    attempts: int  # how many times work on this job has started, this one included


class Inbox:
    def __init__(self, store: Store, keep_done: int = KEEP_DONE):
        self._store = store
        self._keep_done = keep_done

    def add(self, payload: bytes) -> bool:
        """Store a received job; False when the very same message was already received."""
        digest = hashlib.sha256(payload).hexdigest()
        with self._store.transaction() as db:
            cursor = db.execute(
                "INSERT OR IGNORE INTO inbox (digest, payload, received) VALUES (?, ?, ?)",
                (digest, payload, time.time()),
            )
            return cursor.rowcount == 1

    def take(self) -> Optional[IncomingJob]:
        """The oldest unanswered job, counting this as one more attempt at it."""
        with self._store.transaction() as db:
            row = db.execute("SELECT id, payload, attempts FROM inbox WHERE done = 0 ORDER BY id LIMIT 1").fetchone()
            if row is None:
                return None
            db.execute("UPDATE inbox SET attempts = attempts + 1 WHERE id = ?", (row[0],))
        return IncomingJob(id=row[0], payload=bytes(row[1]), attempts=row[2] + 1)

    def done(self, job_id: int) -> None:
        with self._store.transaction() as db:
            # The payload is no longer needed; the digest stays to recognise a redelivery.
            db.execute("UPDATE inbox SET done = 1, payload = x'' WHERE id = ?", (job_id,))
            db.execute(
                "DELETE FROM inbox WHERE done = 1 AND id NOT IN "
                "(SELECT id FROM inbox WHERE done = 1 ORDER BY id DESC LIMIT ?)",
                (self._keep_done,),
            )

    def open_count(self) -> int:
        with self._store.transaction() as db:
            return db.execute("SELECT COUNT(*) FROM inbox WHERE done = 0").fetchone()[0]
