"""`edgeopt quickstart`: the whole product on one machine, in one command.

An MQTT broker (the one given, or a local Mosquitto / embedded amqtt), an agent with the x86-64
profile as its own process, a collector writing SQLite: the bundled example is converted,
deployed as a signed job over MQTT, benchmarked by the agent, stored by the collector, shown
as fleet tables and written as an HTML report. Everything started here is stopped again, also
when a step fails.
"""
from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, List, Optional

from edgeopt_agent.wire.broker import BrokerSettings, broker_settings

from .errors import UserError

EXAMPLE = "example:digits-cnn"


@dataclass
class QuickstartOptions:
    output_dir: Path = Path("quickstart-out")
    broker: Optional[str] = None  # HOST:PORT of a running broker; None starts a local one
    device_id: str = "quickstart-x86"
    profile: str = "x86-64"
    timeout_s: float = 300.0


@dataclass
class QuickstartResult:
    output_dir: Path
    manifest: dict
    deployments: List[dict]
    devices: List[dict]
    results: List[dict]
    report: Path
    db_url: str
    broker: str


@contextlib.contextmanager
def _broker(opts: QuickstartOptions, say: Callable[[str], None]) -> Iterator[BrokerSettings]:
    if opts.broker:
        yield broker_settings(opts.broker)
        return
    from .fleet.broker import MqttBroker

    broker = MqttBroker(opts.output_dir / "broker")
    broker.start()
    say(f"started a local {broker.kind} broker on {broker.address}")
    try:
        yield BrokerSettings(host=broker.host, port=broker.port)
    finally:
        broker.stop()


@contextlib.contextmanager
def _agent(opts: QuickstartOptions, broker: BrokerSettings, trusted_key: Path,
           say: Callable[[str], None]) -> Iterator[subprocess.Popen]:
    data_dir = opts.output_dir / "agent"
    log_path = opts.output_dir / "agent.log"
    command = [sys.executable, "-m", "edgeopt_agent.daemon", "--broker", broker.address,
               "--device-id", opts.device_id, "--profile", opts.profile, "--data-dir", str(data_dir),
               "--telemetry-interval", "2", "--trusted-key", str(trusted_key)]
    with open(log_path, "ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    say(f"started edgeopt-agent '{opts.device_id}' (profile {opts.profile}, log {log_path})")
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


@contextlib.contextmanager
def _collector(db_url: str, broker: BrokerSettings, signing_key: Path, say: Callable[[str], None]):
    from .deploy import SigningKey
    from .deploy.collector_keys import CollectorKey
    from .fleet.collector import Collector
    from .fleet.store import open_store

    # Its confirmations are signed by a key the fleet key certifies: the agent trusts no other.
    collector_key = CollectorKey.ephemeral(SigningKey.load(signing_key), "edgeopt-quickstart-collector")
    store = open_store(db_url)
    collector = Collector(store, broker, client_id="edgeopt-quickstart-collector", collector_key=collector_key)
    collector.start()
    say(f"started a collector writing {db_url}")
    try:
        yield store
    finally:
        collector.close()
        store.close()


def _wait_for(what: str, check: Callable[[], bool], timeout_s: float, agent: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        if agent.poll() is not None:
            raise UserError(f"the agent exited with code {agent.returncode} while waiting for {what}; see {log}")
        time.sleep(0.2)
    raise UserError(f"timed out after {timeout_s:.0f} s waiting for {what}; see {log}")


def run_quickstart(opts: QuickstartOptions, say: Callable[[str], None] = lambda text: None,
                   convert_progress=None) -> QuickstartResult:
    from . import api
    from .deploy import deploy, init_keys
    from .report import load_report_data, write_report

    out = Path(opts.output_dir).resolve()
    opts.output_dir = out
    out.mkdir(parents=True, exist_ok=True)
    db_path = out / "fleet.db"
    for stale in (db_path, Path(f"{db_path}-wal"), Path(f"{db_path}-shm")):
        stale.unlink(missing_ok=True)  # each quickstart shows its own run
    db_url = f"sqlite:///{db_path}"
    keys = init_keys(out / "keys", overwrite=True)
    say(f"made an Ed25519 signing key pair in {out / 'keys'}")

    with contextlib.ExitStack() as stack:
        broker = stack.enter_context(_broker(opts, say))
        store = stack.enter_context(_collector(db_url, broker, keys.private_key, say))
        agent = stack.enter_context(_agent(opts, broker, keys.public_key, say))
        manifest = api.convert(EXAMPLE, device=opts.profile, output_dir=out / "model", progress=convert_progress)
        say(f"converted {EXAMPLE}: {len(manifest['artifacts'])} artifacts, recommended {manifest['recommended']}")
        _wait_for(f"'{opts.device_id}' to come online", lambda: any(
            d["device_id"] == opts.device_id and d["state"] == "online" for d in store.devices()),
            opts.timeout_s, agent, out / "agent.log")
        deployments = deploy(out / "model", broker=broker.address, device=opts.device_id,
                             private_key=keys.private_key, wait=True, timeout_s=opts.timeout_s)
        failed = [d for d in deployments if not d.get("ok")]
        if failed:
            raise UserError(f"the benchmark job failed on {failed[0]['device_id']}: {failed[0].get('error')}")
        say(f"deployed {manifest['recommended']} over MQTT; the agent benchmarked it")
        job_ids = {d["job_id"] for d in deployments}
        _wait_for("the collector to store the result", lambda: any(
            r.get("job_id") in job_ids for r in store.results(device=opts.device_id)),
            opts.timeout_s, agent, out / "agent.log")
        devices, results = store.devices(), store.results()
        # Written while the agent still runs: the report shows the board online, as it was when it measured.
        report = write_report(load_report_data(db=db_url, outdir=out / "model"), out / "report.html",
                              title="edgeopt quickstart")
    return QuickstartResult(out, manifest, deployments, devices, results, report, db_url,
                            broker=opts.broker or "local")
