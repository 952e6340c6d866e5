"""The fleet database: what devices sent, stored once, with gaps and rejections in plain sight.

    from edgeopt.fleet.store import open_store
    store = open_store("sqlite:///fleet.db")          # or postgresql://user@host:5432/db
    outcome = store.ingest(topic, payload)            # committed before it returns
    store.devices(); store.results(model="resnet18"); store.telemetry(device="rpi-01", limit=100)

`ingest_many` stores a batch in one transaction (the collector acknowledges the batch to the
broker only after that commit). A message is stored once by its envelope id; a second copy is
counted as a duplicate. Anything malformed is kept in the `rejected` table with its reason and
the start of its payload, and never reaches the data tables.
"""
from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from edgeopt_agent import wire

from . import messages as msg
from .database import Database, DataError, Transaction, connect
from .migrations import MIGRATIONS, Migration, migrate
from .sequences import track

log = logging.getLogger(__name__)

DB_ENV = "EDGEOPT_FLEET_DB"
DEFAULT_DB_URL = "sqlite:///fleet.db"

STORED = "stored"
DUPLICATE = "duplicate"
REJECTED = "rejected"

_TABLES = {wire.STATUS: "status", wire.TELEMETRY: "telemetry", wire.RESULTS: "results"}
_DEVICE_COLUMNS = (
    "profile", "state", "state_reason", "state_started_at", "state_seq", "state_ts", "mqtt_protocol",
    "agent_version", "versions", "runtimes", "temperature_c", "telemetry_ts", "telemetry_seq", "first_seen", "last_seen",
)
_RESULT_COLUMNS = (
    "id", "device_id", "seq", "ts", "job_id", "request_id", "job_type", "ok", "error_kind", "error_message",
    "model", "model_sha256", "artifact_key", "format", "precision", "manifest_sha256", "accuracy_drop_points",
    "runtime", "threads", "p50_ms", "p90_ms", "p95_ms", "p99_ms", "min_ms", "max_ms", "mean_ms", "load_ms",
    "first_inference_ms", "throughput_ips", "peak_rss_mb", "energy_per_inference_mj", "avg_power_w",
    "power_source", "valid", "invalid_reasons",
)
_TELEMETRY_COLUMNS = (
    "id", "device_id", "seq", "ts", "cpu_percent", "memory_used_mb", "temperature_c", "power_w", "power_source",
)


def default_db_url() -> str:
    """$EDGEOPT_FLEET_DB, else fleet.db in the current directory."""
    return os.environ.get(DB_ENV) or DEFAULT_DB_URL


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


class FleetStore:
    def __init__(self, db: Database, max_message_bytes: int = wire.MAX_MESSAGE_BYTES):
        self.db = db
        self.max_message_bytes = max_message_bytes

    @property
    def url(self) -> str:
        return self.db.display_url

    # --- writing --------------------------------------------------------------------------------

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
            "ON CONFLICT (id) DO NOTHING",
            (e.id, e.device_id, message.kind, e.seq, e.ts, now),
        )
        if not fresh:
            return False
        columns = list(message.row)
        tx.execute(
            f"INSERT INTO {_TABLES[message.kind]} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
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
            f"SELECT {', '.join(_DEVICE_COLUMNS)} FROM devices WHERE device_id = ?{self.db.dialect.for_update}",
            (device_id,),
        )
        new = row is None
        device: Dict[str, Any] = dict(row) if row else {c: None for c in _DEVICE_COLUMNS}
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
        values = [device[c] for c in _DEVICE_COLUMNS]
        if new:
            tx.execute(
                f"INSERT INTO devices (device_id, {', '.join(_DEVICE_COLUMNS)}) "
                f"VALUES ({', '.join('?' * (len(_DEVICE_COLUMNS) + 1))})",
                [device_id, *values],
            )
        else:
            tx.execute(
                f"UPDATE devices SET {', '.join(c + ' = ?' for c in _DEVICE_COLUMNS)} WHERE device_id = ?",
                [*values, device_id],
            )

    # --- reading --------------------------------------------------------------------------------

    def devices(self) -> List[Dict[str, Any]]:
        """Every device seen: state is "online", "offline" or "unknown" (no status message yet)."""
        with self.db.transaction(write=False) as tx:
            rows = tx.rows(f"SELECT device_id, {', '.join(_DEVICE_COLUMNS)} FROM devices ORDER BY device_id")
            missing = {
                r["device_id"]: int(r["missing"])
                for r in tx.rows(
                    "SELECT device_id, SUM(last_missing_seq - first_missing_seq + 1) AS missing FROM gaps "
                    "WHERE filled_at IS NULL AND suspect = 0 GROUP BY device_id"
                )
            }
        return [
            {
                "device_id": r["device_id"],
                "profile": r["profile"],
                "state": r["state"] or "unknown",
                "state_reason": r["state_reason"],
                "last_seen": r["last_seen"],
                "first_seen": r["first_seen"],
                "agent_version": r["agent_version"],
                "runtimes": json.loads(r["runtimes"]) if r["runtimes"] else {},
                "versions": json.loads(r["versions"]) if r["versions"] else {},
                "temperature_c": r["temperature_c"],
                "mqtt_protocol": r["mqtt_protocol"],
                "missing_messages": missing.get(r["device_id"], 0),
            }
            for r in rows
        ]

    def results(
        self,
        model: Optional[str] = None,
        device: Optional[str] = None,
        profile: Optional[str] = None,
        latest: bool = True,
        with_body: bool = False,
    ) -> List[Dict[str, Any]]:
        """Benchmark results, the latest per (device, model, artifact) unless `latest=False`.

        Sorted for comparison: by model, then p50 latency (failures last), then device.
        `with_body` adds "body", the full result message body as sent.
        """
        where, params = [], []
        for column, value in (("r.model", model), ("r.device_id", device), ("d.profile", profile)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        columns = ", ".join(f"r.{c}" for c in _RESULT_COLUMNS) + (", r.body" if with_body else "")
        sql = f"SELECT {columns}, d.profile AS profile FROM results r LEFT JOIN devices d ON d.device_id = r.device_id"
        if where:
            sql += " WHERE " + " AND ".join(where)
        with self.db.transaction(write=False) as tx:
            rows = tx.rows(sql, params)
        if latest:
            newest: Dict[Tuple[Any, ...], Dict[str, Any]] = {}
            for r in rows:
                key = (r["device_id"], r["model"], r["artifact_key"])
                if key not in newest or (r["ts"], r["seq"]) > (newest[key]["ts"], newest[key]["seq"]):
                    newest[key] = r
            rows = list(newest.values())
        for r in rows:
            r["ok"] = bool(r["ok"])
            r["valid"] = None if r["valid"] is None else bool(r["valid"])
            r["invalid_reasons"] = json.loads(r["invalid_reasons"]) if r["invalid_reasons"] else []
            if with_body:
                r["body"] = json.loads(r["body"])
        rows.sort(key=_comparison_order)
        return rows

    def telemetry(
        self,
        device: Optional[str] = None,
        since: Optional[float] = None,
        limit: Optional[int] = None,
    ) -> List[Dict[str, Any]]:
        """Telemetry rows oldest first; `limit` keeps the newest N; "body" is the full message body."""
        where, params = [], []
        if device is not None:
            where.append("device_id = ?")
            params.append(device)
        if since is not None:
            where.append("ts >= ?")
            params.append(float(since))
        sql = f"SELECT {', '.join(_TELEMETRY_COLUMNS)}, body FROM telemetry"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY ts DESC, device_id DESC, seq DESC"
        if limit is not None:
            if limit < 1:
                raise ValueError(f"limit must be positive, got {limit}")
            sql += f" LIMIT {int(limit)}"
        with self.db.transaction(write=False) as tx:
            rows = tx.rows(sql, params)
        rows.reverse()
        for r in rows:
            r["body"] = json.loads(r["body"])
        return rows

    def gaps(self, device: Optional[str] = None, open_only: bool = False, suspect: bool = False) -> List[Dict[str, Any]]:
        """Skipped sequence ranges per device and kind; `filled` once the late messages arrived.

        `suspect=True` lists the jumps too large to be loss instead (a forged or corrupt seq)."""
        sql = ("SELECT device_id, kind, first_missing_seq, last_missing_seq, detected_at, filled_at FROM gaps"
               " WHERE suspect = ?")
        params: List[Any] = [1 if suspect else 0]
        if device is not None:
            sql += " AND device_id = ?"
            params.append(device)
        if open_only:
            sql += " AND filled_at IS NULL"
        sql += " ORDER BY device_id, kind, first_missing_seq"
        with self.db.transaction(write=False) as tx:
            rows = tx.rows(sql, params)
        for r in rows:
            r["filled"] = r["filled_at"] is not None
        return rows

    def rejected(self, limit: int = 20) -> List[Dict[str, Any]]:
        """The most recent rejected messages, newest first."""
        with self.db.transaction(write=False) as tx:
            return tx.rows(
                "SELECT received_at, topic, reason, detail, device_id, message_id, payload_bytes, excerpt "
                f"FROM rejected ORDER BY id DESC LIMIT {int(limit)}"
            )

    def stats(self) -> Dict[str, Any]:
        """Counts: stored and duplicate by topic kind, rejected by reason, gaps open and filled."""
        with self.db.transaction(write=False) as tx:
            stored = {r["kind"]: int(r["n"]) for r in tx.rows("SELECT kind, COUNT(*) AS n FROM messages GROUP BY kind")}
            counters = {r["name"]: int(r["value"]) for r in tx.rows("SELECT name, value FROM counters")}
            rejected = {r["reason"]: int(r["n"]) for r in tx.rows("SELECT reason, COUNT(*) AS n FROM rejected GROUP BY reason")}
            gaps = tx.one(
                "SELECT COUNT(*) AS ranges, "
                "SUM(CASE WHEN filled_at IS NULL THEN last_missing_seq - first_missing_seq + 1 ELSE 0 END) AS missing, "
                "SUM(CASE WHEN filled_at IS NULL THEN 0 ELSE last_missing_seq - first_missing_seq + 1 END) AS filled "
                "FROM gaps WHERE suspect = 0"
            ) or {}
            suspect = tx.one("SELECT COUNT(*) AS n FROM gaps WHERE suspect = 1") or {}
        duplicate = {name.split(":", 1)[1]: value for name, value in counters.items() if name.startswith("duplicate:")}
        return {
            "stored": stored,
            "duplicate": duplicate,
            "rejected": rejected,
            "totals": {"stored": sum(stored.values()), "duplicate": sum(duplicate.values()),
                       "rejected": sum(rejected.values())},
            "gaps": {"missing": int(gaps.get("missing") or 0), "filled": int(gaps.get("filled") or 0),
                     "suspect_jumps": int(suspect.get("n") or 0)},
        }

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

    def roofline_fits(self, profile: Optional[str] = None) -> List[Dict[str, Any]]:
        """Measured against roofline-predicted latency, one row per board profile and artifact."""
        sql = "SELECT profile, precision, model_sha256, artifact_key, predicted_ms, measured_ms, fitted_at FROM roofline_fits"
        with self.db.transaction(write=False) as tx:
            if profile is None:
                return tx.rows(sql)
            return tx.rows(sql + " WHERE profile = ?", (profile,))

    def save_roofline_fit(self, profile: str, precision: str, model_sha256: str, artifact_key: str,
                          predicted_ms: float, measured_ms: float) -> None:
        """Store (or replace) one artifact's measured and predicted latency on a board profile."""
        def work(tx: Transaction) -> None:
            key = (profile, model_sha256, artifact_key)
            tx.execute("DELETE FROM roofline_fits WHERE profile = ? AND model_sha256 = ? AND artifact_key = ?", key)
            tx.execute("INSERT INTO roofline_fits (profile, precision, model_sha256, artifact_key, predicted_ms, "
                       "measured_ms, fitted_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (profile, precision, model_sha256, artifact_key, predicted_ms, measured_ms, time.time()))

        self.db.run(work)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "FleetStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def open_store(
    url: Optional[str] = None,
    create: bool = True,
    migrations: Sequence[Migration] = MIGRATIONS,
    max_message_bytes: int = wire.MAX_MESSAGE_BYTES,
) -> FleetStore:
    """Open (and create or migrate) the fleet database at `url` (default: `default_db_url()`).

    `create=False` is for readers: a missing SQLite file is a UserError, not a new empty database.
    """
    db = connect(url or default_db_url(), create=create)
    try:
        migrate(db, migrations)
    except BaseException:
        db.close()
        raise
    return FleetStore(db, max_message_bytes)


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


def _comparison_order(row: Dict[str, Any]) -> Tuple[Any, ...]:
    p50 = row["p50_ms"]
    return (
        row["model"] is None, row["model"] or "",
        p50 is None, p50 if p50 is not None else 0.0,
        row["device_id"], row["artifact_key"] or "",
    )
