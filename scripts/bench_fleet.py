#!/usr/bin/env python3
"""Fleet ingest benchmark: simulated devices -> mosquitto -> `edgeopt fleet serve` -> database.

Many simulated devices publish telemetry envelopes (edgeopt_agent.wire, QoS 1) to a local
mosquitto started here on a free 127.0.0.1 port, with the broker settings of
scripts/mosquitto.conf. One collector, then two in an MQTT v5 share group, store them; the
script checks that every message arrived exactly once (ids, per-device sequence numbers, no
gaps, no duplicates) and reports the sustained ingest rate:

    live     publishers and collectors run together (publishing competes for the same CPUs)
    backlog  the collectors are down while the devices publish (the broker queues for their
             persistent sessions), then start: the rate at which they drain the queue

    python scripts/bench_fleet.py                    # 200 devices x 100 messages, SQLite
    python scripts/bench_fleet.py --postgres postgresql://root@127.0.0.1:5432/test
    python scripts/bench_fleet.py --update-docs      # rewrite the section in docs/BENCHMARKS.md
    python scripts/bench_fleet.py --broker-setting "autosave_interval 1000"   # override one setting
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from edgeopt.fleet.broker import MqttBroker, mosquitto_binary
from hostinfo import cpu_model

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "BENCHMARKS.md"
PROJECT_BROKER_CONF = ROOT / "scripts" / "mosquitto.conf"
BEGIN, END = "<!-- bench_fleet:begin -->", "<!-- bench_fleet:end -->"
# Settings the benchmark sets itself (its own port, directory and logging).
OWN_KEYS = ("listener", "port", "bind_address", "persistence_location", "persistence_file", "log_dest",
            "log_type", "pid_file", "user", "include_dir", "password_file", "acl_file", "cafile", "certfile",
            "keyfile", "allow_anonymous")
FALLBACK_BROKER_SETTINGS = ["persistence true", "max_queued_messages 1000000", "max_inflight_messages 100"]
STALL_S = 20.0  # no progress for this long ends a run as failed


@dataclass
class RunResult:
    name: str
    database: str
    collectors: int
    mode: str
    sent: int
    stored: int = 0
    distinct_ids: int = 0
    devices_complete: int = 0
    devices: int = 0
    duplicates: int = 0
    rejected: int = 0
    open_gap_messages: int = 0
    filled_gaps: int = 0  # ranges that were missing for a moment, then arrived (reordering)
    ingest_rate: float = 0.0  # messages/s between the first and the last commit
    publish_rate: float = 0.0
    wall_s: float = 0.0  # from the first publish (live) or collector start (backlog) to the last commit
    per_collector: List[int] = field(default_factory=list)
    note: str = ""

    @property
    def lossless(self) -> bool:
        return (self.stored == self.sent == self.distinct_ids and self.devices_complete == self.devices
                and self.open_gap_messages == 0 and self.rejected == 0)


# --- broker -----------------------------------------------------------------------------------


def broker_settings() -> Tuple[List[str], str]:
    """The project's mosquitto settings minus what the benchmark sets itself, and where they came from."""
    if not PROJECT_BROKER_CONF.is_file():
        return FALLBACK_BROKER_SETTINGS, "built-in settings (scripts/mosquitto.conf not found)"
    kept = []
    for line in PROJECT_BROKER_CONF.read_text().splitlines():
        words = line.split()
        if words and not words[0].startswith("#") and words[0] not in OWN_KEYS:
            kept.append(line.strip())
    return kept, "scripts/mosquitto.conf"


def start_mosquitto(workdir: Path, settings: Sequence[str]) -> MqttBroker:
    """The project's Mosquitto launcher (edgeopt.fleet.broker) with the benchmark's settings."""
    if mosquitto_binary() is None:
        sys.exit("mosquitto is not installed; the fleet benchmark needs it (apt install mosquitto)")
    return MqttBroker(workdir, kind="mosquitto",
                      settings=[*settings, "log_dest stderr", "log_type error", "log_type warning"]).start()


# --- devices ----------------------------------------------------------------------------------


def build_messages(devices: int, per_device: int) -> List[Tuple[str, bytes]]:
    """Telemetry of every device, interleaved as a fleet would send it (round by round)."""
    from fleet_simulator import SimulatedDevice

    fleet = [SimulatedDevice(f"sim-{i:04d}", profile="rpi4", seed=i) for i in range(devices)]
    return [(m.topic, m.payload) for _ in range(per_device) for d in fleet for m in [d.telemetry()]]


def publish_share(address: str, messages: List[Tuple[str, bytes]], start_at: float, out) -> None:
    """One publisher process: QoS 1, a wide in-flight window, wait for every PUBACK."""
    import paho.mqtt.client as mqtt

    host, port = address.rsplit(":", 1)
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"bench-pub-{uuid.uuid4().hex[:8]}",
                         protocol=mqtt.MQTTv5)
    client.max_inflight_messages_set(1000)
    client.max_queued_messages_set(0)
    client.connect(host, int(port), 60)
    client.loop_start()
    time.sleep(max(0.0, start_at - time.time()))
    began = time.time()
    infos = [client.publish(topic, payload, qos=1) for topic, payload in messages]
    for info in infos:
        info.wait_for_publish(120)
    ended = time.time()
    client.disconnect()
    client.loop_stop()
    out.put((began, ended, sum(1 for i in infos if i.is_published())))


def publish_all(address: str, messages: List[Tuple[str, bytes]], publishers: int) -> Tuple[float, float, int]:
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    start_at = time.time() + 0.5
    shares = [messages[i::publishers] for i in range(publishers)]
    procs = [context.Process(target=publish_share, args=(address, share, start_at, queue)) for share in shares]
    for proc in procs:
        proc.start()
    reports = [queue.get(timeout=300) for _ in procs]
    for proc in procs:
        proc.join(30)
    return min(r[0] for r in reports), max(r[1] for r in reports), sum(r[2] for r in reports)


# --- collectors -------------------------------------------------------------------------------


class Collectors:
    """`edgeopt fleet serve` processes, waited for until their presence says online."""

    def __init__(self, address: str, db_url: str, count: int, workdir: Path, run_id: str):
        self.address = address
        self.db_url = db_url
        self.names = [f"bench-{run_id}-{i}" for i in range(count)]
        self.shared = f"bench{run_id}" if count > 1 else None
        self.workdir = workdir
        self.processes: List[subprocess.Popen] = []

    def start(self) -> None:
        import paho.mqtt.client as mqtt

        online = set()
        watcher = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"bench-watch-{uuid.uuid4().hex[:8]}",
                              protocol=mqtt.MQTTv5)

        def on_message(client, userdata, message):
            if json.loads(message.payload).get("state") == "online":
                online.add(message.topic.split("/")[2])

        watcher.on_message = on_message
        host, port = self.address.rsplit(":", 1)
        watcher.connect(host, int(port), 30)
        watcher.subscribe("edgeopt/collectors/+/status", qos=1)
        watcher.loop_start()
        for name in self.names:
            args = [sys.executable, "-m", "edgeopt.cli.main", "fleet", "serve", "--broker", self.address,
                    "--db", self.db_url, "--client-id", name]
            if self.shared:
                args += ["--shared", self.shared]
            log = open(self.workdir / f"{name}.log", "ab")
            self.processes.append(subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir))
            log.close()
        deadline = time.monotonic() + 30
        while not set(self.names) <= online:
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.processes):
                sys.exit(f"collectors did not come online; see the logs in {self.workdir}")
            time.sleep(0.05)
        watcher.disconnect()
        watcher.loop_stop()

    def stop(self) -> List[str]:
        """SIGTERM each (a clean stop) and return their final status lines."""
        for proc in self.processes:
            proc.send_signal(signal.SIGTERM)
        for proc in self.processes:
            proc.wait(60)
        self.processes = []
        return [(self.workdir / f"{name}.log").read_text().strip().splitlines()[-1] for name in self.names]


def stored_per_collector(final_lines: Sequence[str]) -> List[int]:
    return [int(re.search(r"([\d,]+) stored", line).group(1).replace(",", "")) for line in final_lines]


# --- database checks --------------------------------------------------------------------------


class Reader:
    def __init__(self, db_url: str):
        if db_url.startswith("sqlite:///"):
            self._db = sqlite3.connect(db_url[len("sqlite:///"):], timeout=30)
            self._pg = False
        else:
            import psycopg

            self._db = psycopg.connect(db_url, autocommit=True)
            self._pg = True

    def all(self, sql: str) -> List[tuple]:
        return list(self._db.execute(sql).fetchall())

    def one(self, sql: str) -> tuple:
        return self.all(sql)[0]

    def close(self) -> None:
        self._db.close()


def wait_for_count(db_url: str, expected: int) -> None:
    reader = Reader(db_url)
    try:
        last, last_change = -1, time.monotonic()
        while True:
            count = reader.one("SELECT COUNT(*) FROM telemetry")[0]
            if count >= expected:
                return
            if count != last:
                last, last_change = count, time.monotonic()
            elif time.monotonic() - last_change > STALL_S:
                print(f"  stalled at {count} of {expected} messages", file=sys.stderr)
                return
            time.sleep(0.05)
    finally:
        reader.close()


def check(result: RunResult, db_url: str, per_device: int, started: float) -> None:
    reader = Reader(db_url)
    try:
        result.stored, result.distinct_ids = reader.one("SELECT COUNT(*), COUNT(DISTINCT id) FROM telemetry")
        rows = reader.all("SELECT device_id, COUNT(*), MIN(seq), MAX(seq) FROM telemetry GROUP BY device_id")
        result.devices_complete = sum(1 for _, n, lo, hi in rows if (n, lo, hi) == (per_device, 1, per_device))
        result.duplicates = int(reader.one("SELECT COALESCE(SUM(value), 0) FROM counters "
                                           "WHERE name LIKE 'duplicate:%'")[0])
        result.rejected = reader.one("SELECT COUNT(*) FROM rejected")[0]
        result.open_gap_messages = int(reader.one(
            "SELECT COALESCE(SUM(last_missing_seq - first_missing_seq + 1), 0) FROM gaps WHERE filled_at IS NULL")[0])
        result.filled_gaps = reader.one("SELECT COUNT(*) FROM gaps WHERE filled_at IS NOT NULL")[0]
        first, last = reader.one("SELECT MIN(received_at), MAX(received_at) FROM messages")
        # Rows of one batch share its received_at: the last batch committed at or after `last`.
        in_last = reader.one(f"SELECT COUNT(*) FROM messages WHERE received_at >= {last!r}")[0]
        if last > first:
            result.ingest_rate = (result.stored - in_last) / (last - first)
        result.wall_s = last - started
    finally:
        reader.close()


# --- runs -------------------------------------------------------------------------------------


class Databases:
    def __init__(self, workdir: Path, postgres: Optional[str]):
        self.workdir = workdir
        self.postgres = postgres
        self._schemas: List[str] = []

    def new(self, kind: str, name: str) -> str:
        if kind == "sqlite":
            return f"sqlite:///{self.workdir / (name + '.db')}"
        import psycopg

        schema = f"bench_fleet_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(self.postgres, autocommit=True) as admin:
            admin.execute(f"CREATE SCHEMA {schema}")
        self._schemas.append(schema)
        separator = "&" if "?" in self.postgres else "?"
        return f"{self.postgres}{separator}options=-csearch_path%3D{schema}"

    def drop_all(self) -> None:
        if not self._schemas:
            return
        import psycopg

        with psycopg.connect(self.postgres, autocommit=True) as admin:
            for schema in self._schemas:
                admin.execute(f"DROP SCHEMA {schema} CASCADE")


def run(name: str, kind: str, collectors: int, mode: str, messages, per_device: int, devices: int,
        publishers: int, settings: Sequence[str], workdir: Path, databases: Databases) -> RunResult:
    run_dir = workdir / name
    run_dir.mkdir()
    broker = start_mosquitto(run_dir / "broker", settings)
    db_url = databases.new(kind, name)
    result = RunResult(name, kind, collectors, mode, len(messages), devices=devices)
    group = Collectors(broker.address, db_url, collectors, run_dir, uuid.uuid4().hex[:6])
    try:
        group.start()
        if mode == "backlog":
            group.stop()  # sessions and subscriptions stay at the broker
            began, ended, acked = publish_all(broker.address, messages, publishers)
            started = time.time()
            group.start()
        else:
            began, ended, acked = publish_all(broker.address, messages, publishers)
            started = began
        result.publish_rate = acked / (ended - began)
        wait_for_count(db_url, len(messages))
        result.per_collector = stored_per_collector(group.stop())
        check(result, db_url, per_device, started)
    finally:
        if group.processes:
            group.stop()
        broker.stop()
    return result


def render(runs: Dict[Tuple[str, str, int], List[RunResult]], args, source: str, settings: Sequence[str]) -> str:
    lines = [
        f"Measured by `scripts/bench_fleet.py` on {date.today().isoformat()}: {cpu_model()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, mosquitto on 127.0.0.1 with {source} "
        f"({'; '.join(s for s in settings if s.startswith(('max_', 'autosave')))}). "
        f"{args.devices} simulated devices x {args.messages} telemetry messages = "
        f"{args.devices * args.messages:,} messages (about {_payload_size()} bytes each) at QoS 1 from "
        f"{args.publishers} publisher processes; collectors are `edgeopt fleet serve` processes "
        f"(`--max-batch 500`; SQLite in WAL mode with synchronous=FULL). Each row: median of "
        f"{args.repeats} run(s), range in brackets.",
        "",
        "| database | collectors | mode | ingest msg/s | wall s | publish msg/s | stored | lost | duplicates "
        "| reorder gaps filled | split per collector |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    medians: Dict[Tuple[str, str, int], RunResult] = {}
    for key, repeats in runs.items():
        ordered = sorted(repeats, key=lambda r: r.ingest_rate)
        r = medians[key] = ordered[len(ordered) // 2]
        spread = f" [{ordered[0].ingest_rate:,.0f}-{ordered[-1].ingest_rate:,.0f}]" if len(ordered) > 1 else ""
        lost = sum(x.sent - x.distinct_ids for x in repeats)
        failed = "" if all(x.lossless for x in repeats) else " (CHECK FAILED)"
        lines.append(
            f"| {r.database} | {r.collectors} | {r.mode} | {r.ingest_rate:,.0f}{spread} | {r.wall_s:.2f} | "
            f"{r.publish_rate:,.0f} | {r.stored:,} | {lost:,}{failed} | {sum(x.duplicates for x in repeats):,} | "
            f"{r.filled_gaps:,} | {' / '.join(f'{n:,}' for n in r.per_collector)} |"
        )
    gains = []
    for (database, mode, count), r in medians.items():
        one = medians.get((database, mode, 1))
        if count == 2 and one and one.ingest_rate:
            gains.append(f"{database} {mode} x{r.ingest_rate / one.ingest_rate:.2f}")
    lines += [
        "",
        "Ingest msg/s: messages committed per second between the first and the last commit. Wall s: from "
        "the first publish (live) or the collectors' start (backlog) to the last commit. Lost: messages "
        "the broker acknowledged to a publisher but missing from the database, over all runs (each device's "
        "sequence numbers 1..N present, every id once, no open gap). Reorder gaps filled: sequence numbers "
        "one collector stored before another collector stored the earlier ones; recorded as gaps, then "
        "filled. Two collectors share one database through `--shared`.",
        "",
        "Gain from a second collector (median ingest rate): " + (", ".join(gains) if gains else "not measured") + ".",
    ]
    return "\n".join(lines)




def _payload_size() -> int:
    from fleet_simulator import SimulatedDevice

    return len(SimulatedDevice("sim-0000", seed=0).telemetry().payload)


def update_docs(section: str) -> None:
    block = f"{BEGIN}\n{section}\n{END}"
    text = DOCS.read_text() if DOCS.exists() else "# Benchmarks\n"
    if BEGIN in text and END in text:
        text = text[: text.index(BEGIN)] + block + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n## Fleet ingest (scripts/bench_fleet.py)\n\n" + FLEET_INTRO + "\n\n" + block + "\n"
    DOCS.write_text(text)


FLEET_INTRO = """\
The collector commits messages in batches (up to `--max-batch`, or as soon as nothing more is
waiting on its socket) and acknowledges each message to the broker only after the commit, so
the broker's in-flight window bounds a batch. The script checks zero loss by counting ids and
per-device sequence numbers in the database. "live": the publishers run during the
measurement and share the CPUs with mosquitto and the collectors. "backlog": the collectors
are down while the devices publish and then drain what the broker queued for their
persistent sessions. On PostgreSQL each statement is a round trip to the server, so one
collector spends most of its time waiting and a second one helps more."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--broker-setting", action="append", default=[], metavar='"KEY VALUE"',
                        help="a mosquitto setting to use instead of scripts/mosquitto.conf's (repeatable)")
    parser.add_argument("--devices", type=int, default=200)
    parser.add_argument("--messages", type=int, default=100, help="telemetry messages per device")
    parser.add_argument("--publishers", type=int, default=2, help="publisher processes")
    parser.add_argument("--modes", default="live,backlog")
    parser.add_argument("--repeats", type=int, default=3, help="runs per configuration (the median is shown)")
    parser.add_argument("--postgres", metavar="URL", help="also run against this PostgreSQL database")
    parser.add_argument("--update-docs", action="store_true", help=f"rewrite the section in {DOCS}")
    args = parser.parse_args()
    if not (1 <= args.devices <= 5000 and 1 <= args.messages <= 1000 and 1 <= args.publishers <= 16
            and 1 <= args.repeats <= 9):
        parser.error("bounded benchmark: 1-5000 devices, 1-1000 messages each, 1-16 publishers, 1-9 repeats")

    settings, source = broker_settings()
    for override in args.broker_setting:
        key = override.split()[0]
        settings = [line for line in settings if line.split()[0] != key] + [override.strip()]
        source += f" with {override.strip()}"
    messages = build_messages(args.devices, args.messages)
    kinds = ["sqlite"] + (["postgresql"] if args.postgres else [])
    runs: Dict[Tuple[str, str, int], List[RunResult]] = {}
    workdir = Path(tempfile.mkdtemp(prefix="edgeopt-bench-fleet-"))
    databases = Databases(workdir, args.postgres)
    try:
        for kind in kinds:
            for mode in args.modes.split(","):
                for count in (1, 2):
                    for repeat in range(args.repeats):
                        name = f"{kind}-{mode}-{count}-{repeat}"
                        print(f"{name}: {len(messages):,} messages ...", file=sys.stderr, flush=True)
                        r = run(name, kind, count, mode, messages, args.messages, args.devices, args.publishers,
                                settings, workdir, databases)
                        print(f"  {r.ingest_rate:,.0f} msg/s, lossless={r.lossless}, split {r.per_collector}",
                              file=sys.stderr, flush=True)
                        runs.setdefault((kind, mode, count), []).append(r)
    finally:
        databases.drop_all()
    section = render(runs, args, source, settings)
    print(section)
    if args.update_docs:
        update_docs(section)
        print(f"updated {DOCS}", file=sys.stderr)
    shutil.rmtree(workdir, ignore_errors=True)
    return 0 if all(r.lossless for repeats in runs.values() for r in repeats) else 1


if __name__ == "__main__":
    sys.exit(main())
