"""The fleet database's queries: devices, results, telemetry, gaps, rejections, counts and roofline fits.

Each query reads in a transaction of its own that takes no write lock.
"""
from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Tuple

from edgeopt_agent.wire.errors import REFUSED_BEFORE_RUNNING

from .database import Database
from .jobs import JobQueue
from .tables import DEVICE_COLUMNS, RESULT_COLUMNS, RESULT_HISTOGRAM, TELEMETRY_COLUMNS


class FleetQueries:
    """Answers from the fleet database as plain rows (dicts)."""

    def __init__(self, db: Database):
        self.db = db

    def devices(self) -> List[Dict[str, Any]]:
        """Every device seen or whose key is pinned: state is "online", "offline" or "unknown" (no status
        message yet); `key` is the fingerprint of its pinned signing key, `key_source` where that came
        from (first_seen, provisioned, accepted), and `key_changed` is None, or what signed messages
        under its name with another key ({fingerprint, first_at, last_at, messages}): refused, until
        an operator pins one (`edgeopt fleet pin-key`)."""
        with self.db.transaction(write=False) as tx:
            rows = tx.rows(f"SELECT device_id, {', '.join(DEVICE_COLUMNS)} FROM devices ORDER BY device_id")
            keys = {r["device_id"]: r for r in tx.rows("SELECT * FROM device_keys")}
            seen = {r["device_id"] for r in rows}
            rows += [dict({c: None for c in DEVICE_COLUMNS}, device_id=d) for d in sorted(keys) if d not in seen]
            rows.sort(key=lambda r: r["device_id"])
            missing = {
                r["device_id"]: int(r["missing"])
                for r in tx.rows(
                    "SELECT device_id, SUM(last_missing_seq - first_missing_seq + 1) AS missing FROM gaps "
                    "WHERE filled_at IS NULL AND suspect = 0 GROUP BY device_id"
                )
            }
            # The newest status's body (the one the devices row's state came from): its profile check.
            checks = {
                r["device_id"]: _profile_check(r["body"])
                for r in tx.rows(
                    "SELECT s.device_id, s.body FROM status s JOIN devices d ON d.device_id = s.device_id "
                    "AND d.state_seq = s.seq AND d.state_ts = s.ts"
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
                "profile_check": checks.get(r["device_id"]),
                **_key_fields(keys.get(r["device_id"])),
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
        with_histogram: bool = False,
    ) -> List[Dict[str, Any]]:
        """Benchmark results, the latest per (device, model, artifact) unless `latest=False`.

        The latest is the newest result that ran: a refusal before running (an unsigned or expired job,
        a replay, another target, a downgrade...: `REFUSED_BEFORE_RUNNING`) never hides the last measured
        result, and is the latest only while the key has nothing else; `latest=False` lists it too.
        Sorted for comparison: by model, then p50 latency (failures last), then device.
        `with_body` adds "body", the full result message body as sent; `with_histogram` adds
        "latency_histogram" (its JSON object as the result carried it, or None).
        """
        where, params = [], []
        for column, value in (("r.model", model), ("r.device_id", device), ("d.profile", profile)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        columns = ", ".join(f"r.{c}" for c in RESULT_COLUMNS) + (", r.body" if with_body else "") + (
            f", r.{RESULT_HISTOGRAM}" if with_histogram else "")
        sql = f"SELECT {columns}, d.profile AS profile FROM results r LEFT JOIN devices d ON d.device_id = r.device_id"
        if where:
            sql += " WHERE " + " AND ".join(where)
        with self.db.transaction(write=False) as tx:
            rows = tx.rows(sql, params)
        if latest:
            newest: Dict[Tuple[Any, ...], Dict[str, Any]] = {}
            for r in rows:
                key = (r["device_id"], r["model"], r["artifact_key"])
                if key not in newest or _latest_order(r) > _latest_order(newest[key]):
                    newest[key] = r
            rows = list(newest.values())
        for r in rows:
            r["ok"] = bool(r["ok"])
            r["valid"] = None if r["valid"] is None else bool(r["valid"])
            r["invalid_reasons"] = json.loads(r["invalid_reasons"]) if r["invalid_reasons"] else []
            r["throttled"] = None if r["throttled"] is None else bool(r["throttled"])
            if with_histogram:
                r[RESULT_HISTOGRAM] = json.loads(r[RESULT_HISTOGRAM]) if r[RESULT_HISTOGRAM] else None
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
        sql = f"SELECT {', '.join(TELEMETRY_COLUMNS)}, body FROM telemetry"
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
        """Counts: stored and duplicate by topic kind, rejected by reason, gaps open and filled, the
        confirmations devices refused (as their newest telemetry reports them), and the jobs `deploy --db`
        kept (waiting for their board's answer, answered, expired unanswered)."""
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
            latest = tx.rows(
                "SELECT t.device_id, t.body FROM telemetry t JOIN (SELECT device_id, MAX(seq) AS seq FROM telemetry "
                "GROUP BY device_id) m ON t.device_id = m.device_id AND t.seq = m.seq"
            )
        duplicate = {name.split(":", 1)[1]: value for name, value in counters.items() if name.startswith("duplicate:")}
        return {
            "stored": stored,
            "duplicate": duplicate,
            "rejected": rejected,
            "totals": {"stored": sum(stored.values()), "duplicate": sum(duplicate.values()),
                       "rejected": sum(rejected.values())},
            "gaps": {"missing": int(gaps.get("missing") or 0), "filled": int(gaps.get("filled") or 0),
                     "suspect_jumps": int(suspect.get("n") or 0)},
            "unauthenticated_confirms": _confirms_refused(latest),
            "jobs": JobQueue(self.db).counts(),
        }

    def roofline_fits(self, profile: Optional[str] = None) -> List[Dict[str, Any]]:
        """Measured against roofline-predicted latency, one row per board profile and artifact; kind_ms is the
        predicted time per kernel kind ({} where it was not stored)."""
        sql = ("SELECT profile, precision, model_sha256, artifact_key, predicted_ms, measured_ms, fitted_at, kind_ms "
               "FROM roofline_fits")
        with self.db.transaction(write=False) as tx:
            rows = tx.rows(sql) if profile is None else tx.rows(sql + " WHERE profile = ?", (profile,))
        for r in rows:
            r["kind_ms"] = json.loads(r["kind_ms"]) if r["kind_ms"] else {}
        return rows


def _confirms_refused(latest_telemetry: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Confirm messages the devices refused to act on (forged, unsigned, not certified by the fleet key),
    as each device's newest telemetry counts them (`agent.unauthenticated_confirms`, ever): a collector
    cannot see another's confirms, only what the boards report."""
    devices: Dict[str, int] = {}
    for row in latest_telemetry:
        try:
            count = json.loads(row["body"]).get("agent", {}).get("unauthenticated_confirms")
        except (ValueError, AttributeError):
            continue
        if isinstance(count, int) and not isinstance(count, bool) and count > 0:
            devices[row["device_id"]] = count
    return {"total": sum(devices.values()), "devices": dict(sorted(devices.items()))}


def _latest_order(row: Dict[str, Any]) -> Tuple[Any, ...]:
    """Which result of a (device, model, artifact) is its latest: any that ran before any refusal, then the newest."""
    refused = not row["ok"] and row["error_kind"] in REFUSED_BEFORE_RUNNING
    return (not refused, row["ts"], row["seq"])


def _key_fields(row: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    if row is None:
        return {"key": None, "key_source": None, "key_changed": None}
    changed = None
    if row["changed_fingerprint"] is not None:
        changed = {"fingerprint": row["changed_fingerprint"], "first_at": row["changed_first_at"],
                   "last_at": row["changed_last_at"], "messages": int(row["changed_count"] or 0)}
    return {"key": row["fingerprint"], "key_source": row["source"], "key_changed": changed}


def _profile_check(body: str) -> Optional[Dict[str, Any]]:
    """A status body's `profile_check` (docs/PROTOCOL.md), or None (no profile, an older agent, not an object)."""
    try:
        check = json.loads(body).get("profile_check")
    except (ValueError, AttributeError):
        return None
    return check if isinstance(check, dict) else None


def _comparison_order(row: Dict[str, Any]) -> Tuple[Any, ...]:
    p50 = row["p50_ms"]
    return (
        row["model"] is None, row["model"] or "",
        p50 is None, p50 if p50 is not None else 0.0,
        row["device_id"], row["artifact_key"] or "",
    )
