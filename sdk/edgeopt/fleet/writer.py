"""The fleet database's write path: device messages stored once, with gaps and rejections in plain sight.

`ingest_many` stores a batch in one transaction (the collector acknowledges the batch to the
broker only after that commit). Only a message signed by its board's key is stored: the key is
pinned at the board's first verified message (or beforehand by `pin_device_key`, from
`edgeopt fleet provision`), and a message signed by any other key is refused as `key_changed`
and flags the board. A message is stored once per (device, envelope id) with the sha256 of its
bytes; the very same bytes again are a duplicate, other bytes under a stored id a `conflict`
(recorded, never stored in place of the first). Anything malformed or unsigned is kept in the
`rejected` table with its reason and the start of its payload, and never reaches the data tables.
"""
from __future__ import annotations

import base64
import json
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any, Dict, List, Optional, Sequence, Tuple

from edgeopt_agent import message_signing, wire

from . import messages as msg
from .database import Database, DataError, Transaction
from .sequences import track
from .tables import DEVICE_COLUMNS

log = logging.getLogger(__name__)

STORED = "stored"
DUPLICATE = "duplicate"
REJECTED = "rejected"
KEY_CHANGED = "key_changed"  # signed, but by another key than the board's pinned one
CONFLICT = "conflict"  # a stored message's id with other bytes, signed by the board's key
# Rejections a confirm never names: who sent the message is unknown, so the board keeps its own
# bytes and sends them again (a board whose key changed is heard once an operator pins the new key).
NOT_CONFIRMED = (message_signing.UNSIGNED, message_signing.SIGNATURE_INVALID, KEY_CHANGED)
# Where a board's pinned key came from.
FIRST_SEEN = "first_seen"
PROVISIONED = "provisioned"
ACCEPTED = "accepted"  # a changed key an operator accepted (`edgeopt fleet pin-key --accept-changed`)


@dataclass(frozen=True)
class IngestOutcome:
    status: str  # "stored", "duplicate" or "rejected"
    reason: Optional[str] = None  # why it was rejected (a short kind)
    detail: Optional[str] = None
    kind: Optional[str] = None  # topic kind: status, telemetry, results
    device_id: Optional[str] = None
    message_id: Optional[str] = None
    digest: Optional[str] = None  # sha256 of the bytes received: what a confirm names


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
        return self._store(batch, [self._parse(topic, payload) for topic, payload in batch], now)

    def _store(self, batch: Sequence[Tuple[str, bytes]], parsed: List[msg.Parsed], now: float) -> BatchReport:
        """`batch` as parsed (each message's signature checked once), in one transaction or one by one."""
        try:
            return self.db.run(lambda tx: self._write(tx, parsed, now))
        except DataError as exc:
            if len(parsed) == 1:
                refused = [_unstorable(batch[0], parsed[0], exc)]
                return self.db.run(lambda tx: self._write(tx, refused, now))
            log.warning("the database refused a value in a batch of %d messages (%s); storing them one by one",
                        len(parsed), exc)
        return _merged([self._store([item], [checked], now) for item, checked in zip(batch, parsed)])

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
                                                       item.device_id, item.message_id, item.digest)
            else:
                good.append((index, item))
        # One lock order for every writer (device, kind, seq), so collectors sharing a
        # PostgreSQL database never deadlock; ascending seqs also make in-batch reordering harmless.
        good.sort(key=lambda pair: (pair[1].device_id, pair[1].kind, pair[1].envelope.seq))
        for device_id, grouped in groupby(good, key=lambda pair: pair[1].device_id):
            of_device = list(grouped)
            pinned = self._device_key(tx, device_id, of_device[0][1].public_key, now)
            for index, message in of_device:
                if message.public_key != pinned:
                    report.outcomes[index] = self._key_changed(tx, message, pinned, now)
            of_device = [(i, m) for i, m in of_device if m.public_key == pinned]
            self._handle(tx, device_id, "before", [m for _, m in of_device], now)
            stored: List[msg.DeviceMessage] = []
            for kind, of_kind in groupby(of_device, key=lambda pair: pair[1].kind):
                seqs = []
                for index, message in of_kind:
                    outcome = self._insert(tx, message, now)
                    if outcome.status == STORED:
                        stored.append(message)
                        seqs.append(message.envelope.seq)
                    elif outcome.status == DUPLICATE:
                        duplicates[kind] += 1
                    report.outcomes[index] = outcome
                if msg.KINDS[kind].gap_checked and seqs:
                    found = track(tx, self.db.dialect, device_id, kind, seqs, now)
                    report.new_gaps += found.new_gaps
                    report.missing += found.missing
                    report.filled += found.filled
                    report.suspect += found.suspect
            if stored:
                self._update_device(tx, device_id, stored)
                self._handle(tx, device_id, "after", stored, now)
        self._count(tx, {f"duplicate:{kind}": n for kind, n in duplicates.items()})
        report.counts = Counter(o.status for o in report.outcomes)
        return report

    def _device_key(self, tx: Transaction, device_id: str, presented: bytes, now: float) -> bytes:
        """The board's pinned key; `presented` (its first message's in this batch) is pinned now, on
        first sight, when it has none."""
        row = tx.one(f"SELECT public_key FROM device_keys WHERE device_id = ?{self.db.dialect.for_update}",
                     (device_id,))
        if row is None:
            tx.execute("INSERT INTO device_keys (device_id, public_key, fingerprint, source, pinned_at) "
                       "VALUES (?, ?, ?, ?, ?) ON CONFLICT (device_id) DO NOTHING",
                       (device_id, _b64(presented), message_signing.fingerprint(presented), FIRST_SEEN, now))
            # Another collector sharing the database may have pinned one meanwhile: its pin stands.
            row = tx.one("SELECT public_key FROM device_keys WHERE device_id = ?", (device_id,))
            if row["public_key"] == _b64(presented):
                log.info("pinned the signing key of %s on first sight: %s", device_id,
                         message_signing.fingerprint(presented))
        return base64.b64decode(row["public_key"])

    def _key_changed(self, tx: Transaction, message: msg.DeviceMessage, pinned: bytes, now: float) -> IngestOutcome:
        e, presented = message.envelope, message.public_key
        tx.execute("UPDATE device_keys SET changed_public_key = ?, changed_fingerprint = ?, "
                   "changed_first_at = COALESCE(changed_first_at, ?), changed_last_at = ?, "
                   "changed_count = changed_count + 1 WHERE device_id = ?",
                   (_b64(presented), message_signing.fingerprint(presented), now, now, e.device_id))
        detail = (f"signed by key {message_signing.fingerprint(presented)}, not by {e.device_id}'s pinned key "
                  f"{message_signing.fingerprint(pinned)}: someone else's message, or the board has a new key "
                  f"(reinstalled?); if it is the board, accept its new key with `edgeopt fleet pin-key "
                  f"{e.device_id} --accept-changed`")
        self._reject(tx, msg.Rejection(wire.topic(e.device_id, message.kind), KEY_CHANGED,
                                       detail, message.payload_bytes, message.excerpt, e.device_id, e.id,
                                       message.digest), now)
        return IngestOutcome(REJECTED, KEY_CHANGED, detail, message.kind, e.device_id, e.id, message.digest)

    @staticmethod
    def _handle(tx: Transaction, device_id: str, when: str, messages: List[msg.DeviceMessage], now: float) -> None:
        """Each kind's `before` or `after` handler (messages.KINDS) with the device's messages of that kind."""
        for topic, kind in msg.KINDS.items():
            handler = getattr(kind, when)
            of_kind = [m for m in messages if m.kind == topic]
            if handler is not None and of_kind:
                handler(tx, device_id, of_kind, now)

    def _insert(self, tx: Transaction, message: msg.DeviceMessage, now: float) -> IngestOutcome:
        e = message.envelope
        stored = IngestOutcome(STORED, kind=message.kind, device_id=e.device_id, message_id=e.id,
                               digest=message.digest)
        fresh = tx.execute(
            "INSERT INTO messages (id, device_id, kind, seq, ts, received_at, digest) VALUES (?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (device_id, id) DO NOTHING",
            (e.id, e.device_id, message.kind, e.seq, e.ts, now, message.digest),
        )
        if not fresh:
            first = tx.one("SELECT digest FROM messages WHERE device_id = ? AND id = ?", (e.device_id, e.id))
            if first is None or first["digest"] is None or first["digest"] == message.digest:
                return IngestOutcome(DUPLICATE, kind=message.kind, device_id=e.device_id, message_id=e.id,
                                     digest=message.digest)
            detail = (f"message {e.id} of {e.device_id} is stored with other bytes (sha256 {first['digest'][:16]}...; "
                      f"these: {message.digest[:16]}...), both signed by its key: the first stays")
            self._reject(tx, msg.Rejection(wire.topic(e.device_id, message.kind), CONFLICT, detail,
                                           message.payload_bytes, message.excerpt, e.device_id, e.id,
                                           message.digest), now)
            return IngestOutcome(REJECTED, CONFLICT, detail, message.kind, e.device_id, e.id, message.digest)
        columns = list(message.row)
        tx.execute(
            f"INSERT INTO {msg.KINDS[message.kind].table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
            [message.row[c] for c in columns],
        )
        return stored

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
            fold = msg.KINDS[message.kind].device
            if fold is not None:
                fold(device, message)
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

    # --- device keys --------------------------------------------------------------------------------

    def pin_device_key(self, device_id: str, public_key: bytes, source: str = PROVISIONED) -> Optional[Dict[str, Any]]:
        """Pin `device_id`'s signing key (raw 32 bytes), whatever was pinned before, and clear its
        changed-key flag; returns the row it replaced (None when there was none)."""
        wire.validate_device_id(device_id)
        message_signing.parse_public_key(_b64(public_key))

        def work(tx: Transaction) -> Optional[Dict[str, Any]]:
            before = tx.one(f"SELECT * FROM device_keys WHERE device_id = ?{self.db.dialect.for_update}", (device_id,))
            tx.execute("DELETE FROM device_keys WHERE device_id = ?", (device_id,))
            tx.execute("INSERT INTO device_keys (device_id, public_key, fingerprint, source, pinned_at) "
                       "VALUES (?, ?, ?, ?, ?)",
                       (device_id, _b64(public_key), message_signing.fingerprint(public_key), source, time.time()))
            return before

        return self.db.run(work)

    def accept_changed_key(self, device_id: str) -> bytes:
        """Pin the other key `device_id`'s messages were last signed by (a reinstalled board's new key);
        UserError when none was seen."""
        from ..errors import UserError

        with self.db.transaction(write=False) as tx:
            row = tx.one("SELECT changed_public_key FROM device_keys WHERE device_id = ?", (device_id,))
        if row is None or row["changed_public_key"] is None:
            raise UserError(f"no message from {device_id} was signed by another key than its pinned one; nothing to "
                            "accept (`edgeopt fleet devices` flags a board whose key changed)")
        key = base64.b64decode(row["changed_public_key"])
        self.pin_device_key(device_id, key, ACCEPTED)
        return key

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
                         msg.excerpt(bytes(payload)), device_id, message_id, wire.message_digest(bytes(payload)))


def _merged(reports: List[BatchReport]) -> BatchReport:
    merged = BatchReport(outcomes=[o for r in reports for o in r.outcomes])
    merged.new_gaps = sum(r.new_gaps for r in reports)
    merged.missing = sum(r.missing for r in reports)
    merged.filled = sum(r.filled for r in reports)
    merged.suspect = sum(r.suspect for r in reports)
    merged.counts = Counter(o.status for o in merged.outcomes)
    return merged


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")
