"""The fleet database's write path: device messages stored once, with gaps and rejections in plain sight.

`ingest_many` stores a batch in one transaction (the collector acknowledges the batch to the
broker only after that commit). A message is stored once per (device, envelope id); a second
copy is counted as a duplicate (the same id from another device is another message). Anything
malformed is kept in the `rejected` table with its reason and the start of its payload, and
never reaches the data tables.
"""
from __future__ import annotations

import json
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from edgeopt_agent import wire

from . import messages as msg
from .database import Database, DataError, Transaction
from .sequences import track
from .tables import DEVICE_COLUMNS, TABLES

log = logging.getLogger(__name__)

STORED = "stored"
DUPLICATE = "duplicate"
REJECTED = "rejected"


@dataclass(frozen=True)
class IngestOutcome:
    status: str  # "stored", "duplicate" or "rejected"
    reason: Optional[str] = None  # why it was rejected (a short kind)
    detail: Optional[str] = None
    kind: Optional[str] = None  # topic kind: status, telemetry, results
    device_id: Optional[str] = None
    message_id: Optional[str] = None


@dataclass
class BatchReport:
    """What one `ingest_many` call did, for a collector's counters."""

    outcomes: List[IngestOutcome]
    new_gaps: int = 0
    missing: int = 0
    filled: int = 0
    suspect: int = 0
    counts: Counter = field(default_factory=Counter)  # status -> number of messages


class FleetWriter:
    """Stores what devices sent, and deletes or replaces rows on request."""

    def __init__(self, db: Database, max_message_bytes: int = wire.MAX_MESSAGE_BYTES):
        self.db = db
        self.max_message_bytes = max_message_bytes

    def ingest(self, topic: str, payload: bytes) -> IngestOutcome:
        """Store one message (committed when this returns)."""
        return self.ingest_many([(topic, payload)]).outcomes[0]

    def ingest_many(self, batch: Sequence[Tuple[str, bytes]], received_at: Optional[float] = None) -> BatchReport:
        """Store messages in one transaction; outcomes come back in the order given.

        Raises only when the database fails; bad messages are outcomes, never exceptions. A
        message the database refuses a value of costs only itself: the batch is then stored one
        message at a time and that one is rejected (a failure midway then leaves the first ones
        stored, and a retry counts them as duplicates).
        """
        now = time.time() if received_at is None else received_at
        parsed = [self._parse(topic, payload) for topic, payload in batch]
        try:
            return self.db.run(lambda tx: self._write(tx, parsed, now))
        except DataError as exc:
            if len(parsed) == 1:
                refused = [_unstorable(batch[0], parsed[0], exc)]
                return self.db.run(lambda tx: self._write(tx, refused, now))
            log.warning("the database refused a value in a batch of %d messages (%s); storing them one by one",
                        len(parsed), exc)
        return _merged([self.ingest_many([item], now) for item in batch])

    def _parse(self, topic: str, payload: bytes) -> msg.Parsed:
        try:
            return msg.parse(topic, bytes(payload), self.max_message_bytes)
        except Exception as exc:  # a bug in the checks must cost one message, not the collector
            log.exception("could not check a message on %s; rejecting it", topic)
            return msg.Rejection(topic, "internal_error", f"{type(exc).__name__}: {exc}", len(payload),
                                 msg.excerpt(bytes(payload)))

    def _write(self, tx: Transaction, parsed: List[msg.Parsed], now: float) -> BatchReport:
        report = BatchReport(outcomes=[IngestOutcome(REJECTED)] * len(parsed))
        duplicates: Counter = Counter()
        good = []
        for index, item in enumerate(parsed):
            if isinstance(item, msg.Rejection):
                self._reject(tx, item, now)
                report.outcomes[index] = IngestOutcome(REJECTED, item.reason, item.detail, None,
                                                       item.device_id, item.message_id)
            else:
                good.append((index, item))
        # One lock order for every writer (device, kind, seq), so collectors sharing a
        # PostgreSQL database never deadlock; ascending seqs also make in-batch reordering harmless.
        good.sort(key=lambda pair: (pair[1].device_id, pair[1].kind, pair[1].envelope.seq))
        for device_id, grouped in groupby(good, key=lambda pair: pair[1].device_id):
            of_device = list(grouped)
            self._forget_baselines_if_reset(tx, device_id, [m for _, m in of_device if m.kind == wire.STATUS])
            stored: List[msg.DeviceMessage] = []
            for kind, of_kind in groupby(of_device, key=lambda pair: pair[1].kind):
                seqs = []
                for index, message in of_kind:
                    outcome = IngestOutcome(STORED, kind=kind, device_id=device_id, message_id=message.envelope.id)
                    if self._insert(tx, message, now):
                        stored.append(message)
                        seqs.append(message.envelope.seq)
                    else:
                        duplicates[kind] += 1
                        outcome = IngestOutcome(DUPLICATE, kind=kind, device_id=device_id,
                                                message_id=message.envelope.id)
                    report.outcomes[index] = outcome
                if kind in msg.GAP_CHECKED_KINDS and seqs:
                    found = track(tx, self.db.dialect, device_id, kind, seqs, now)
                    report.new_gaps += found.new_gaps
                    report.missing += found.missing
                    report.filled += found.filled
                    report.suspect += found.suspect
            if stored:
                self._update_device(tx, device_id, stored)
        self._count(tx, {f"duplicate:{kind}": n for kind, n in duplicates.items()})
        report.counts = Counter(o.status for o in report.outcomes)
        return report

    def _forget_baselines_if_reset(self, tx: Transaction, device_id: str, statuses: List[msg.DeviceMessage]) -> None:
        """An agent whose state was wiped numbers from 1 again, so its streams take a new baseline.

        Status numbers survive restarts: a newer start with a lower number than the newest status
        stored is the sign.
        """
        if not statuses:
            return
        row = tx.one("SELECT state_started_at, state_seq FROM devices WHERE device_id = ?", (device_id,))
        if row is None or row["state_seq"] is None:
            return
        if any(msg.device_facts(m)["started_at"] > (row["state_started_at"] or 0.0) and m.envelope.seq < row["state_seq"]
               for m in statuses):
            log.warning("%s restarted with its sequence numbers reset; checking its messages for gaps from the "
                        "new numbers on", device_id)
            tx.execute("DELETE FROM streams WHERE device_id = ?", (device_id,))

    def _insert(self, tx: Transaction, message: msg.DeviceMessage, now: float) -> bool:
        e = message.envelope
        fresh = tx.execute(
            "INSERT INTO messages (id, device_id, kind, seq, ts, received_at) VALUES (?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (device_id, id) DO NOTHING",
            (e.id, e.device_id, message.kind, e.seq, e.ts, now),
        )
        if not fresh:
            return False
        columns = list(message.row)
        tx.execute(
            f"INSERT INTO {TABLES[message.kind]} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
            [message.row[c] for c in columns],
        )
        return True

    def _reject(self, tx: Transaction, item: msg.Rejection, now: float) -> None:
        log.warning("rejected a message on %s (%s): %s", item.topic, item.reason, item.detail)
        tx.execute(
            "INSERT INTO rejected (received_at, topic, reason, detail, device_id, message_id, payload_bytes, excerpt) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (now, msg.clean(item.topic), item.reason, msg.clean(item.detail[:1000]), msg.clean(item.device_id),
             msg.clean(item.message_id), item.payload_bytes, item.excerpt),
        )

    def _count(self, tx: Transaction, increments: Dict[str, int]) -> None:
        for name, value in sorted(increments.items()):
            tx.execute(
                "INSERT INTO counters (name, value) VALUES (?, ?) "
                "ON CONFLICT (name) DO UPDATE SET value = counters.value + excluded.value",
                (name, value),
            )

    def _update_device(self, tx: Transaction, device_id: str, stored: List[msg.DeviceMessage]) -> None:
        row = tx.one(
            f"SELECT {', '.join(DEVICE_COLUMNS)} FROM devices WHERE device_id = ?{self.db.dialect.for_update}",
            (device_id,),
        )
        new = row is None
        device: Dict[str, Any] = dict(row) if row else {c: None for c in DEVICE_COLUMNS}
        stamps = [m.envelope.ts for m in stored]
        device["first_seen"] = min(stamps + ([device["first_seen"]] if not new else []))
        device["last_seen"] = max(stamps + ([device["last_seen"]] if not new else []))
        for message in stored:
            facts = msg.device_facts(message)
            if message.kind == wire.STATUS:
                # (agent start time, seq) orders statuses even across a reset of the agent's counters.
                key = (facts["started_at"], message.envelope.seq)
                if device["state"] is None or key > (device["state_started_at"] or 0.0, device["state_seq"] or 0):
                    device.update(
                        state=message.row["state"],
                        state_reason=message.row["reason"],
                        state_started_at=facts["started_at"],
                        state_seq=message.envelope.seq,
                        state_ts=message.envelope.ts,
                        mqtt_protocol=facts["mqtt_protocol"] or device["mqtt_protocol"],
                    )
                    _update_known(device, facts, ("profile", "agent_version"))
            elif message.kind == wire.TELEMETRY:
                key = (message.envelope.ts, message.envelope.seq)
                if device["telemetry_ts"] is None or key > (device["telemetry_ts"], device["telemetry_seq"]):
                    device.update(
                        telemetry_ts=message.envelope.ts,
                        telemetry_seq=message.envelope.seq,
                        temperature_c=facts["temperature_c"],
                        versions=json.dumps(facts["versions"]),
                        runtimes=json.dumps(facts["runtimes"]),
                    )
                    _update_known(device, facts, ("profile", "agent_version"))
        values = [device[c] for c in DEVICE_COLUMNS]
        if new:
            tx.execute(
                f"INSERT INTO devices (device_id, {', '.join(DEVICE_COLUMNS)}) "
                f"VALUES ({', '.join('?' * (len(DEVICE_COLUMNS) + 1))})",
                [device_id, *values],
            )
        else:
            tx.execute(
                f"UPDATE devices SET {', '.join(c + ' = ?' for c in DEVICE_COLUMNS)} WHERE device_id = ?",
                [*values, device_id],
            )

    def prune(self, before: float) -> Dict[str, int]:
        """Delete telemetry sent before `before` and rejected messages received before it.

        Status, results, gaps and devices stay. The duplicate check forgets the pruned telemetry
        by arrival time, so a copy of it arriving much later would be stored again.
        """
        def work(tx: Transaction) -> Dict[str, int]:
            telemetry = tx.execute("DELETE FROM telemetry WHERE ts < ?", (before,))
            tx.execute("DELETE FROM messages WHERE kind = ? AND received_at < ?", (wire.TELEMETRY, before))
            rejected = tx.execute("DELETE FROM rejected WHERE received_at < ?", (before,))
            return {"telemetry": max(telemetry, 0), "rejected": max(rejected, 0)}

        return self.db.run(work)

    def forget_roofline_fit(self, profile: str, model_sha256: str, artifact_key: str) -> bool:
        """Delete one artifact's stored pair on a board profile (made from results that no longer count);
        True when there was one."""
        def work(tx: Transaction) -> bool:
            return tx.execute("DELETE FROM roofline_fits WHERE profile = ? AND model_sha256 = ? AND artifact_key = ?",
                              (profile, model_sha256, artifact_key)) > 0

        return self.db.run(work)

    def save_roofline_fit(self, profile: str, precision: str, model_sha256: str, artifact_key: str,
                          predicted_ms: float, measured_ms: float,
                          kind_ms: Optional[Dict[str, float]] = None) -> None:
        """Store (or replace) one artifact's measured and predicted latency on a board profile, with its
        predicted time per kernel kind where known."""
        def work(tx: Transaction) -> None:
            key = (profile, model_sha256, artifact_key)
            tx.execute("DELETE FROM roofline_fits WHERE profile = ? AND model_sha256 = ? AND artifact_key = ?", key)
            tx.execute("INSERT INTO roofline_fits (profile, precision, model_sha256, artifact_key, predicted_ms, "
                       "measured_ms, fitted_at, kind_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                       (profile, precision, model_sha256, artifact_key, predicted_ms, measured_ms, time.time(),
                        json.dumps(kind_ms, sort_keys=True) if kind_ms else None))

        self.db.run(work)


def _unstorable(message: Tuple[str, bytes], parsed: msg.Parsed, error: DataError) -> msg.Rejection:
    topic, payload = message
    device_id = parsed.device_id
    message_id = parsed.message_id if isinstance(parsed, msg.Rejection) else parsed.envelope.id
    return msg.Rejection(topic, "unstorable", f"the database refused it: {error}", len(payload),
                         msg.excerpt(bytes(payload)), device_id, message_id)


def _merged(reports: List[BatchReport]) -> BatchReport:
    merged = BatchReport(outcomes=[o for r in reports for o in r.outcomes])
    merged.new_gaps = sum(r.new_gaps for r in reports)
    merged.missing = sum(r.missing for r in reports)
    merged.filled = sum(r.filled for r in reports)
    merged.suspect = sum(r.suspect for r in reports)
    merged.counts = Counter(o.status for o in merged.outcomes)
    return merged


def _update_known(device: Dict[str, Any], facts: Dict[str, Any], keys: Iterable[str]) -> None:
    for key in keys:
        if facts.get(key) is not None:
            device[key] = facts[key]
