"""The disk-backed inbox: jobs received but not yet answered.

A job is written here before the broker gets its PUBACK, so a job survives an agent restart;
it leaves (is marked done) in the same transaction that queues its result in the outbox.
The same payload delivered twice (MQTT QoS 1 redelivery) is stored once.

Unanswered jobs are capped in bytes: a job that would take the inbox over `max_bytes` is not
stored (only its digest, so a redelivery is recognised) and the caller answers it with an
`inbox_full` error.
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Optional

from .store import Store

# Answered jobs are remembered (for duplicate detection) up to this many.
KEEP_DONE = 1000
DEFAULT_MAX_BYTES = 32 * 1024 * 1024  # a few jobs with inline artifacts (4 MiB each, base64)

# What `add` did with a job message.
ADDED = "added"
DUPLICATE = "duplicate"
FULL = "full"


@dataclass(frozen=True)
class IncomingJob:
    id: int
    payload: bytes
    attempts: int  # how many times work on this job has started, this one included


class Inbox:
    def __init__(self, store: Store, keep_done: int = KEEP_DONE, max_bytes: int = DEFAULT_MAX_BYTES):
        self._store = store
        self._keep_done = keep_done
        self.max_bytes = max_bytes

    def add(self, payload: bytes) -> str:
        """Store a received job: ADDED, DUPLICATE (the very same message was received before) or
        FULL (over the byte cap; remembered as answered, so the caller must answer it now)."""
        digest = hashlib.sha256(payload).hexdigest()
        with self._store.transaction() as db:
            if db.execute("SELECT 1 FROM inbox WHERE digest = ?", (digest,)).fetchone():
                return DUPLICATE
            full = self.size_bytes() + len(payload) > self.max_bytes
            db.execute(
                "INSERT INTO inbox (digest, payload, done, received) VALUES (?, ?, ?, ?)",
                (digest, b"" if full else payload, int(full), time.time()),
            )
            return FULL if full else ADDED

    def size_bytes(self) -> int:
        """Bytes of the jobs waiting for an answer."""
        with self._store.transaction() as db:
            return db.execute("SELECT COALESCE(SUM(LENGTH(payload)), 0) FROM inbox WHERE done = 0").fetchone()[0]

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
