"""The disk-backed outbox: every message the agent measures waits here until it is safe to forget.

A message is written (with its sequence number, in the same transaction) before any attempt to
send it. Telemetry and results (wire.CONFIRMED_KINDS) are deleted only once the collector
confirms it committed them; other messages once the broker acknowledged them (PUBACK). Across a
broker outage, a broker crash or an agent restart the outbox keeps its rows and the sender
sends them (again) when it can.

The outbox is capped in bytes. When a new message would take it over the cap, the oldest
telemetry goes first, then old transfer requests, and results only when nothing else is left;
what was dropped is counted (`dropped()`) and leaves a gap in the sequence numbers the collector
reports.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Set, Tuple

from .. import wire
from .store import Store

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 64 * 1024 * 1024  # weeks of telemetry at the default interval
# What goes first when the outbox is full: telemetry, then transfer requests, results last.
DROP_ORDER = (wire.TELEMETRY, wire.TRANSFER, wire.RESULTS)
_DROPPED = "outbox_dropped:"
_SQL_BATCH = 500  # SQLite before 3.32 takes at most 999 parameters


@dataclass(frozen=True)
class OutgoingMessage:
    id: int
    topic: str
    payload: bytes
    retain: bool
    kind: str = wire.TELEMETRY
    message_id: str = ""

    @property
    def needs_confirmation(self) -> bool:
        return self.kind in wire.CONFIRMED_KINDS


class Outbox:
    def __init__(self, store: Store, device_id: str, max_bytes: int = DEFAULT_MAX_BYTES,
                 signer: Optional[Callable[[wire.Envelope], bytes]] = None):
        """`signer` turns an envelope into its signed bytes (the board's device key); without one the
        messages go unsigned (tests of the queue alone: a collector stores no unsigned message)."""
        self._store = store
        self._device_id = wire.validate_device_id(device_id)
        self.max_bytes = max_bytes
        self._encode = signer or (lambda envelope: envelope.encode())
        self._last_id_lock = threading.Lock()
        with store.transaction() as db:
            self._last_id = db.execute("SELECT COALESCE(MAX(id), 0) FROM outbox").fetchone()[0]

    @property
    def last_id(self) -> int:
        """Id of the newest message, so a sender can tell cheaply whether there is anything new."""
        with self._last_id_lock:
            return self._last_id

    def add(self, kind: str, message_type: str, body: Dict[str, Any], retain: bool = False) -> wire.Envelope:
        """Queue one message on this device's `kind` topic; returns the envelope as stored."""
        topic = wire.topic(self._device_id, kind)
        with self._store.transaction() as db:
            envelope = wire.Envelope(
                device_id=self._device_id, seq=self._store.next_seq(kind), type=message_type, body=body
            )
            payload = self._encode(envelope)
            cursor = db.execute(
                "INSERT INTO outbox (kind, topic, payload, retain, created, message_id, size) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (kind, topic, payload, int(retain), time.time(), envelope.id, len(payload)),
            )
            self._trim(db, keep=cursor.lastrowid)
        with self._last_id_lock:
            self._last_id = max(self._last_id, cursor.lastrowid)
        return envelope

    def pending(self, after_id: int = 0, limit: int = 100) -> List[OutgoingMessage]:
        """Queued messages with an id above `after_id`, oldest first."""
        with self._store.transaction() as db:
            rows = db.execute(
                "SELECT id, topic, payload, retain, kind, message_id FROM outbox WHERE id > ? ORDER BY id LIMIT ?",
                (after_id, limit),
            ).fetchall()
        return [_message(row) for row in rows]

    def get(self, ids: Iterable[int]) -> List[OutgoingMessage]:
        """The messages with these row ids that are still queued, in the order asked."""
        wanted = list(ids)
        with self._store.transaction() as db:
            rows = [
                db.execute("SELECT id, topic, payload, retain, kind, message_id FROM outbox WHERE id = ?",
                           (i,)).fetchone()
                for i in wanted
            ]
        return [_message(row) for row in rows if row]

    def remove(self, ids: Iterable[int]) -> None:
        """Forget messages by row id (those the broker's PUBACK is enough for)."""
        with self._store.transaction() as db:
            db.executemany("DELETE FROM outbox WHERE id = ?", [(i,) for i in ids])

    def confirm(self, deliveries: Iterable[wire.Delivery]) -> Confirmed:
        """Forget the queued messages named by (envelope id, sha256 of their bytes): only a row whose own
        bytes have that digest goes; a digest of other bytes (someone's copy under this board's id) is
        counted in `other_bytes`, and the row stays."""
        wanted: Dict[str, Set[str]] = {}
        for message_id, digest in deliveries:
            wanted.setdefault(message_id, set()).add(digest)
        ids = list(wanted)
        removed: List[int] = []
        forgotten: Set[Tuple[str, str]] = set()
        other_bytes = 0
        with self._store.transaction() as db:
            for start in range(0, len(ids), _SQL_BATCH):
                batch = ids[start:start + _SQL_BATCH]
                marks = ",".join("?" * len(batch))
                rows = db.execute(f"SELECT id, message_id, payload FROM outbox WHERE message_id IN ({marks})",
                                  batch).fetchall()
                for row_id, message_id, payload in rows:
                    digests, own = wanted[message_id], wire.message_digest(bytes(payload))
                    if own in digests:
                        removed.append(row_id)
                        forgotten.add((message_id, own))
                        other_bytes += len(digests) - 1
                    else:
                        other_bytes += len(digests)
            db.executemany("DELETE FROM outbox WHERE id = ?", [(i,) for i in removed])
        return Confirmed(removed, forgotten, other_bytes)

    def sign_unsigned(self) -> int:
        """Sign the queued messages an agent from before device keys left unsigned (a collector stores
        no unsigned message); returns how many. Their ids stay, so a copy already stored counts as one."""
        signed = 0
        with self._store.transaction() as db:
            for row_id, payload in db.execute("SELECT id, payload FROM outbox").fetchall():
                try:
                    document = json.loads(bytes(payload).decode("utf-8"))
                    if not isinstance(document, dict) or "sig" in document:
                        continue
                    fresh = self._encode(wire.Envelope.from_dict(document))
                except (ValueError, UnicodeDecodeError, RecursionError):
                    continue  # not a message this agent could have queued: left as it is
                db.execute("UPDATE outbox SET payload = ?, size = ? WHERE id = ?", (fresh, len(fresh), row_id))
                signed += 1
        if signed:
            log.info("signed %d message(s) queued by an agent from before device keys", signed)
        return signed

    def __len__(self) -> int:
        with self._store.transaction() as db:
            return db.execute("SELECT COUNT(*) FROM outbox").fetchone()[0]

    def size_bytes(self) -> int:
        with self._store.transaction() as db:
            return db.execute("SELECT COALESCE(SUM(size), 0) FROM outbox").fetchone()[0]

    def dropped(self) -> Dict[str, int]:
        """Messages dropped from a full outbox since the state file was made, by kind."""
        return self._store.counters(_DROPPED)

    def _trim(self, db, keep: int) -> None:
        excess = db.execute("SELECT COALESCE(SUM(size), 0) FROM outbox").fetchone()[0] - self.max_bytes
        for kind in DROP_ORDER:
            if excess <= 0:
                return
            victims, freed = [], 0
            for row_id, size in db.execute("SELECT id, size FROM outbox WHERE kind = ? AND id != ? ORDER BY id",
                                           (kind, keep)):
                victims.append(row_id)
                freed += size
                if freed >= excess:
                    break
            if not victims:
                continue
            db.executemany("DELETE FROM outbox WHERE id = ?", [(i,) for i in victims])
            self._store.count(_DROPPED + kind, len(victims))
            excess -= freed
            log.warning("outbox is over its %d-byte cap: dropped the %d oldest %s message(s) (%d bytes)",
                        self.max_bytes, len(victims), kind, freed)


@dataclass(frozen=True)
class Confirmed:
    rows: List[int]  # outbox rows forgotten
    forgotten: Set[Tuple[str, str]]  # their (id, digest)
    other_bytes: int  # entries that named a queued id with the digest of other bytes: kept


def _message(row) -> OutgoingMessage:
    return OutgoingMessage(row[0], row[1], bytes(row[2]), bool(row[3]), row[4], row[5] or "")
