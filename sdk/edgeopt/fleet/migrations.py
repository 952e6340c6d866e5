"""The fleet database schema as ordered migrations, recorded in the `schema_version` table.

A migration is applied once, in its own transaction, in version order. Never edit one that has
shipped: add the next. Column types in braces ({float}, {bigint}, {serial}, {text}) are filled
in per database (see database.Dialect). Flags are stored as 0/1 integers on both databases.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence, Tuple

from ..errors import UserError
from .database import Database, Transaction

# Held by the migrating transaction on PostgreSQL, so two collectors starting together on a new
# database do not both create the tables (SQLite's BEGIN IMMEDIATE already serializes them).
_ADVISORY_LOCK = 0x6564676F  # "edgo"


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    statements: Tuple[str, ...]


def _rekeyed(table: str, columns: str, indexes: Sequence[str]) -> Tuple[str, ...]:
    """Statements that rebuild `table` (its column definitions `columns`) with the primary key
    (device_id, id), keeping every row, on SQLite and PostgreSQL alike."""
    names = ", ".join(line.split()[0] for line in columns.strip().splitlines())
    new = f"{table}_rekeyed"
    return (
        f"CREATE TABLE {new} ({columns},\n                PRIMARY KEY (device_id, id)\n            )",
        f"INSERT INTO {new} ({names}) SELECT {names} FROM {table}",
        f"DROP TABLE {table}",
        f"ALTER TABLE {new} RENAME TO {table}",
        *indexes,
    )


MIGRATIONS: Tuple[Migration, ...] = (
    Migration(1, "messages, devices, status, telemetry, results, streams, gaps, rejected, counters", (
        # Every message stored, by envelope id: the duplicate check.
        """CREATE TABLE messages (
            id TEXT PRIMARY KEY,
            device_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            seq {bigint} NOT NULL,
            ts {float} NOT NULL,
            received_at {float} NOT NULL
        )""",
        "CREATE INDEX messages_received ON messages (received_at)",
        """CREATE TABLE devices (
            device_id TEXT PRIMARY KEY,
            profile TEXT,
            state TEXT,
            state_reason TEXT,
            state_started_at {float},
            state_seq {bigint},
            state_ts {float},
            mqtt_protocol TEXT,
            agent_version TEXT,
            versions TEXT,
            runtimes TEXT,
            temperature_c {float},
            telemetry_ts {float},
            telemetry_seq {bigint},
            first_seen {float} NOT NULL,
            last_seen {float} NOT NULL
        )""",
        """CREATE TABLE status (
            id TEXT PRIMARY KEY,
            device_id TEXT NOT NULL,
            seq {bigint} NOT NULL,
            ts {float} NOT NULL,
            state TEXT NOT NULL,
            reason TEXT,
            body TEXT NOT NULL
        )""",
        "CREATE INDEX status_device_ts ON status (device_id, ts)",
        """CREATE TABLE telemetry (
            id TEXT PRIMARY KEY,
            device_id TEXT NOT NULL,
            seq {bigint} NOT NULL,
            ts {float} NOT NULL,
            cpu_percent {float},
            memory_used_mb {float},
            temperature_c {float},
            power_w {float},
            power_source TEXT,
            body TEXT NOT NULL
        )""",
        "CREATE INDEX telemetry_device_ts ON telemetry (device_id, ts)",
        "CREATE INDEX telemetry_ts ON telemetry (ts)",
        """CREATE TABLE results (
            id TEXT PRIMARY KEY,
            device_id TEXT NOT NULL,
            seq {bigint} NOT NULL,
            ts {float} NOT NULL,
            job_id TEXT,
            request_id TEXT,
            job_type TEXT,
            ok INTEGER NOT NULL,
            error_kind TEXT,
            error_message TEXT,
            model TEXT,
            model_sha256 TEXT,
            artifact_key TEXT,
            format TEXT,
            precision TEXT,
            manifest_sha256 TEXT,
            accuracy_drop_points {float},
            runtime TEXT,
            threads INTEGER,
            p50_ms {float},
            p90_ms {float},
            p95_ms {float},
            p99_ms {float},
            min_ms {float},
            max_ms {float},
            mean_ms {float},
            load_ms {float},
            first_inference_ms {float},
            throughput_ips {float},
            peak_rss_mb {float},
            energy_per_inference_mj {float},
            avg_power_w {float},
            power_source TEXT,
            valid INTEGER,
            invalid_reasons TEXT,
            body TEXT NOT NULL
        )""",
        "CREATE INDEX results_device_ts ON results (device_id, ts)",
        "CREATE INDEX results_model ON results (model, artifact_key)",
        # Highest sequence number seen per device and topic kind.
        """CREATE TABLE streams (
            device_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            max_seq {bigint} NOT NULL,
            PRIMARY KEY (device_id, kind)
        )""",
        # Ranges of sequence numbers not (yet) received; filled_at is set when a late one arrives.
        """CREATE TABLE gaps (
            id {serial},
            device_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            first_missing_seq {bigint} NOT NULL,
            last_missing_seq {bigint} NOT NULL,
            detected_at {float} NOT NULL,
            filled_at {float}
        )""",
        "CREATE INDEX gaps_open ON gaps (device_id, kind, filled_at)",
        """CREATE TABLE rejected (
            id {serial},
            received_at {float} NOT NULL,
            topic TEXT NOT NULL,
            reason TEXT NOT NULL,
            detail TEXT NOT NULL,
            device_id TEXT,
            message_id TEXT,
            payload_bytes {bigint} NOT NULL,
            excerpt TEXT NOT NULL
        )""",
        "CREATE INDEX rejected_received ON rejected (received_at)",
        """CREATE TABLE counters (
            name TEXT PRIMARY KEY,
            value {bigint} NOT NULL
        )""",
    )),
    Migration(2, "gaps.suspect: jumps in sequence numbers too large to be loss", (
        # A skipped range larger than sequences.MAX_PLAUSIBLE_GAP is a forged or corrupt number,
        # not that many lost messages: it is kept with suspect = 1 and counted apart.
        "ALTER TABLE gaps ADD COLUMN suspect INTEGER NOT NULL DEFAULT 0",
    )),
    Migration(3, "roofline_fits: measured against roofline-predicted latency per board profile and artifact", (
        # Written by `edgeopt analyze` where the fleet measured an artifact; a board's efficiency
        # factor at a precision is the geometric mean of measured / predicted over its rows.
        """CREATE TABLE roofline_fits (
            profile TEXT NOT NULL,
            precision TEXT NOT NULL,
            model_sha256 TEXT NOT NULL,
            artifact_key TEXT NOT NULL,
            predicted_ms {float} NOT NULL,
            measured_ms {float} NOT NULL,
            fitted_at {float} NOT NULL,
            PRIMARY KEY (profile, model_sha256, artifact_key)
        )""",
    )),
    Migration(4, "roofline_fits.kind_ms: the predicted time per kernel kind, to fit per-kind efficiency from", (
        # JSON: roof key ("int8/depthwise") -> uncalibrated predicted ms; NULL for rows stored before,
        # which still count towards the whole-graph factor.
        "ALTER TABLE roofline_fits ADD COLUMN kind_ms TEXT",
    )),
    Migration(5, "messages, status, telemetry, results keyed by (device_id, id): duplicates are per device", (
        # A message id is unique per device only: the same id on another login's topic must not
        # make this device's message a "duplicate". Neither database can change a primary key in
        # place portably, so each table is copied into a new one keyed (device_id, id) and renamed
        # (its indexes go with the old table and are made again).
        *(statement for table, columns, indexes in (
            ("messages", """
                id TEXT NOT NULL,
                device_id TEXT NOT NULL,
                kind TEXT NOT NULL,
                seq {bigint} NOT NULL,
                ts {float} NOT NULL,
                received_at {float} NOT NULL""",
             ("CREATE INDEX messages_received ON messages (received_at)",)),
            ("status", """
                id TEXT NOT NULL,
                device_id TEXT NOT NULL,
                seq {bigint} NOT NULL,
                ts {float} NOT NULL,
                state TEXT NOT NULL,
                reason TEXT,
                body TEXT NOT NULL""",
             ("CREATE INDEX status_device_ts ON status (device_id, ts)",)),
            ("telemetry", """
                id TEXT NOT NULL,
                device_id TEXT NOT NULL,
                seq {bigint} NOT NULL,
                ts {float} NOT NULL,
                cpu_percent {float},
                memory_used_mb {float},
                temperature_c {float},
                power_w {float},
                power_source TEXT,
                body TEXT NOT NULL""",
             ("CREATE INDEX telemetry_device_ts ON telemetry (device_id, ts)",
              "CREATE INDEX telemetry_ts ON telemetry (ts)")),
            ("results", """
                id TEXT NOT NULL,
                device_id TEXT NOT NULL,
                seq {bigint} NOT NULL,
                ts {float} NOT NULL,
                job_id TEXT,
                request_id TEXT,
                job_type TEXT,
                ok INTEGER NOT NULL,
                error_kind TEXT,
                error_message TEXT,
                model TEXT,
                model_sha256 TEXT,
                artifact_key TEXT,
                format TEXT,
                precision TEXT,
                manifest_sha256 TEXT,
                accuracy_drop_points {float},
                runtime TEXT,
                threads INTEGER,
                p50_ms {float},
                p90_ms {float},
                p95_ms {float},
                p99_ms {float},
                min_ms {float},
                max_ms {float},
                mean_ms {float},
                load_ms {float},
                first_inference_ms {float},
                throughput_ips {float},
                peak_rss_mb {float},
                energy_per_inference_mj {float},
                avg_power_w {float},
                power_source TEXT,
                valid INTEGER,
                invalid_reasons TEXT,
                body TEXT NOT NULL""",
             ("CREATE INDEX results_device_ts ON results (device_id, ts)",
              "CREATE INDEX results_model ON results (model, artifact_key)")),
        ) for statement in _rekeyed(table, columns, indexes)),
    )),
    Migration(6, "device_keys: each board's pinned signing key; messages.digest: the sha256 of the bytes stored", (
        # A board signs every message with its own key (edgeopt_agent.message_signing); the collector
        # pins it on first sight (source 'first_seen') or from `edgeopt fleet provision` / `pin-key`
        # ('provisioned', which wins), and stores only messages that verify under it. A message
        # signed by another key is refused, and that key is kept here (changed_*) so that
        # `edgeopt fleet devices` flags the board until an operator pins one.
        """CREATE TABLE device_keys (
            device_id TEXT PRIMARY KEY,
            public_key TEXT NOT NULL,
            fingerprint TEXT NOT NULL,
            source TEXT NOT NULL,
            pinned_at {float} NOT NULL,
            changed_public_key TEXT,
            changed_fingerprint TEXT,
            changed_first_at {float},
            changed_last_at {float},
            changed_count {bigint} NOT NULL DEFAULT 0
        )""",
        # NULL for messages stored before: a copy of one of those counts as a duplicate.
        "ALTER TABLE messages ADD COLUMN digest TEXT",
    )),
    Migration(7, "jobs: the jobs deploy sent, re-sent by the collector until the board answers or they expire", (
        # The whole job message as first sent (JSON text, up to MAX_MESSAGE_BYTES): every copy is
        # the same bytes, which the board recognises as one job. answered_at is set when a result
        # naming the job message's id (request_id) from that board is stored.
        """CREATE TABLE jobs (
            device_id TEXT NOT NULL,
            request_id TEXT NOT NULL,
            job_id TEXT NOT NULL,
            payload TEXT NOT NULL,
            expires_at {float} NOT NULL,
            created_at {float} NOT NULL,
            last_sent_at {float},
            next_send_at {float} NOT NULL,
            sends INTEGER NOT NULL DEFAULT 0,
            answered_at {float},
            PRIMARY KEY (device_id, request_id)
        )""",
        "CREATE INDEX jobs_due ON jobs (answered_at, next_send_at)",
    )),
    Migration(8, "results: the build a result measured, the runtime and agent versions, the latency histogram", (
        # What `edgeopt fleet compare` and the report's release history read: the build (the convert
        # output's identity and the version the user gave it, from the job's meta), what ran it, how many
        # runs, the board's temperature and throttling, and the latency distribution (JSON, as the result
        # carries it: edgeopt_agent.wire.latency_histogram). NULL for results from before, or from older
        # agents, which are compared on what they have.
        "ALTER TABLE results ADD COLUMN build_id TEXT",
        "ALTER TABLE results ADD COLUMN build_version TEXT",
        "ALTER TABLE results ADD COLUMN runtime_version TEXT",
        "ALTER TABLE results ADD COLUMN agent_version TEXT",
        "ALTER TABLE results ADD COLUMN runs {bigint}",
        "ALTER TABLE results ADD COLUMN temperature_c {float}",
        "ALTER TABLE results ADD COLUMN throttled INTEGER",
        "ALTER TABLE results ADD COLUMN latency_histogram TEXT",
        "CREATE INDEX results_model_build ON results (model, build_id)",
    )),
)


def latest_version(migrations: Sequence[Migration] = MIGRATIONS) -> int:
    return max((m.version for m in migrations), default=0)


def migrate(db: Database, migrations: Sequence[Migration] = MIGRATIONS) -> int:
    """Bring the database to the newest schema; returns the version it is at."""
    ordered = sorted(migrations, key=lambda m: m.version)
    versions = [m.version for m in ordered]
    if len(set(versions)) != len(versions) or any(v < 1 for v in versions):
        raise ValueError(f"migration versions must be unique positive integers, got {versions}")
    newest = latest_version(ordered)
    with db.transaction() as tx:
        _lock(db, tx)
        tx.execute(
            "CREATE TABLE IF NOT EXISTS schema_version ("
            "version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at {float} NOT NULL)".format(
                **db.dialect.types
            )
        )
        at = _version(tx)
    if at > newest:
        raise UserError(
            f"the fleet database {db.display_url} has schema version {at}, newer than this edgeopt "
            f"knows ({newest}); upgrade edgeopt"
        )
    for migration in ordered:
        if migration.version <= at:
            continue
        with db.transaction() as tx:
            _lock(db, tx)
            if migration.version <= _version(tx):  # another process applied it meanwhile
                continue
            for statement in migration.statements:
                tx.execute(statement.format(**db.dialect.types))
            tx.execute(
                "INSERT INTO schema_version (version, description, applied_at) VALUES (?, ?, ?)",
                (migration.version, migration.description, time.time()),
            )
    return max(at, newest)


def _lock(db: Database, tx: Transaction) -> None:
    if db.dialect.name == "postgresql":
        tx.execute("SELECT pg_advisory_xact_lock(?)", (_ADVISORY_LOCK,))


def _version(tx: Transaction) -> int:
    row = tx.one("SELECT MAX(version) AS version FROM schema_version")
    return int(row["version"] or 0) if row else 0
