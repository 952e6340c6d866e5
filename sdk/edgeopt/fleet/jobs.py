"""The jobs deploy sent, kept in the fleet database until their board answers or they expire.

A broker keeps a job for an offline board only as long as it keeps its own state: a broker killed
before it saved loses every job it queued (measured: all 1,000 queued for an offline board, with
the broker saving once a minute). So `edgeopt deploy --db URL` keeps each job message it sends
here, and the collector sends each again (the very same bytes, which a board recognises as one
job and runs once) until a result from that board names the job message (its `request_id`; the
writer marks it answered in the transaction that stores the result) or the job expires.

Re-sending backs off per job: `resend_s` after it was sent, then twice as long each time, up to
`max_resend_s`. Taking due jobs claims them in one transaction (the next time is set before they
are published), so collectors sharing a database do not all send the same job at once.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional

from edgeopt_agent import wire

from .database import Database, Transaction

DEFAULT_RESEND_S = 30.0
MAX_RESEND_S = 900.0
TAKE_LIMIT = 200  # jobs published per check, so one check never holds the network thread for long


@dataclass(frozen=True)
class KeptJob:
    device_id: str
    request_id: str  # the job message's envelope id: what the board's result names
    job_id: str
    payload: bytes
    sends: int


def job_row(device_id: str, envelope: wire.Envelope) -> Dict[str, Any]:
    """What is kept of one job message (as `wire.job_message` made it for `device_id`)."""
    body = envelope.body
    expires_at = body.get("expires_at")
    if not isinstance(expires_at, (int, float)) or isinstance(expires_at, bool):
        expires_at = time.time() + wire.DEFAULT_JOB_LIFETIME_S  # an unsigned job without a validity
    return {"device_id": wire.validate_device_id(device_id), "request_id": envelope.id,
            "job_id": str(body.get("job_id")), "payload": envelope.encode().decode("ascii"),
            "expires_at": float(expires_at)}


class JobQueue:
    """Jobs waiting for their board's answer, in the fleet database."""

    def __init__(self, db: Database, resend_s: float = DEFAULT_RESEND_S, max_resend_s: float = MAX_RESEND_S):
        self.db = db
        self.resend_s = resend_s
        self.max_resend_s = max(resend_s, max_resend_s)

    def keep(self, jobs: Iterable[Dict[str, Any]], sent_at: Optional[float] = None) -> int:
        """Keep job messages (`job_row`s) that were just sent; returns how many were new."""
        now = time.time() if sent_at is None else sent_at
        rows = list(jobs)

        def work(tx: Transaction) -> int:
            added = 0
            for row in rows:
                added += max(0, tx.execute(
                    "INSERT INTO jobs (device_id, request_id, job_id, payload, expires_at, created_at, last_sent_at, "
                    "next_send_at, sends) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1) ON CONFLICT (device_id, request_id) "
                    "DO NOTHING",
                    (row["device_id"], row["request_id"], row["job_id"], row["payload"], row["expires_at"], now, now,
                     now + self.resend_s)))
            return added

        return self.db.run(work)

    def take_due(self, now: Optional[float] = None, limit: int = TAKE_LIMIT) -> List[KeptJob]:
        """Unanswered, unexpired jobs whose time to be sent again has come, claimed for sending now."""
        now = time.time() if now is None else now

        def work(tx: Transaction) -> List[KeptJob]:
            rows = tx.rows(
                "SELECT device_id, request_id, job_id, payload, sends FROM jobs WHERE answered_at IS NULL "
                f"AND next_send_at <= ? AND expires_at > ? ORDER BY next_send_at LIMIT ?{self.db.dialect.for_update}",
                (now, now, limit))
            for row in rows:
                wait = min(self.max_resend_s, self.resend_s * 2 ** max(0, row["sends"] - 1))
                tx.execute("UPDATE jobs SET sends = sends + 1, last_sent_at = ?, next_send_at = ? "
                           "WHERE device_id = ? AND request_id = ?", (now, now + wait, row["device_id"],
                                                                      row["request_id"]))
            return [KeptJob(r["device_id"], r["request_id"], r["job_id"], r["payload"].encode("ascii"),
                            r["sends"] + 1) for r in rows]

        return self.db.run(work)

    def counts(self, now: Optional[float] = None) -> Dict[str, int]:
        """Jobs by state: waiting (for an answer, still valid), answered, expired (never answered)."""
        now = time.time() if now is None else now
        with self.db.transaction(write=False) as tx:
            row = tx.one(
                "SELECT SUM(CASE WHEN answered_at IS NOT NULL THEN 1 ELSE 0 END) AS answered, "
                "SUM(CASE WHEN answered_at IS NULL AND expires_at > ? THEN 1 ELSE 0 END) AS waiting, "
                "SUM(CASE WHEN answered_at IS NULL AND expires_at <= ? THEN 1 ELSE 0 END) AS expired FROM jobs",
                (now, now))
        return {key: int(row[key] or 0) for key in ("waiting", "answered", "expired")}
