"""Every client proves who it is on the broker: a real Mosquitto with the password file that
`edgeopt fleet provision` writes and the shipped ACL template (scripts/mosquitto.acl), and a
mutual-TLS listener with certificates from the fleet CA.

Device A's own login must not speak for device B (publish B's results or status), read B's
jobs, or take over B's session by using B's client id; the collector and deploy users must
still do their jobs under the same ACL.
"""
from __future__ import annotations

import json
import logging
import queue
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import List, Optional

import paho.mqtt.client as mqtt
import pytest
from harness import wait_until
from mqtt_broker import MqttBroker, mosquitto_binary

from edgeopt.cli.main import main
from edgeopt.deploy.mqtt import HostClient
from edgeopt.deploy.targets import read_statuses
from edgeopt.errors import UserError
from edgeopt.fleet import provision as provisioning
from edgeopt.fleet.collector import Collector
from fleet_simulator import SimulatedDevice
from edgeopt.fleet.store import open_store
from edgeopt_agent import wire
from edgeopt_agent.daemon.config import build_config
from edgeopt_agent.wire.broker import broker_settings

ACL_TEMPLATE = Path(__file__).resolve().parents[2] / "scripts" / "mosquitto.acl"
NOT_AUTHORIZED = 0x87
WAIT_S = 15.0

needs_mosquitto = pytest.mark.skipif(
    mosquitto_binary() is None or shutil.which("mosquitto_passwd") is None
    and not Path(provisioning.MOSQUITTO_PASSWD_FALLBACK).exists(),
    reason="needs mosquitto and mosquitto_passwd (apt install mosquitto)")


class Client:
    """A bare MQTT v5 client logged in as someone: records messages, PUBACK and SUBACK reason codes."""

    def __init__(self, broker, username: Optional[str], password: Optional[str], client_id: Optional[str] = None,
                 clean_start: bool = True, tls: Optional[dict] = None):
        self.messages: "queue.Queue[mqtt.MQTTMessage]" = queue.Queue()
        self.pubacks: dict = {}
        self.subacks: dict = {}
        self.disconnected = threading.Event()
        self.connack: Optional[int] = None
        self._cond = threading.Condition()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id or f"t-{uuid.uuid4().hex[:8]}",
                                  protocol=mqtt.MQTTv5)
        if username:
            self.client.username_pw_set(username, password)
        if tls:
            self.client.tls_set(**tls)
        self.client.on_connect = self._on_connect
        self.client.on_publish = self._on_publish
        self.client.on_subscribe = self._on_subscribe
        self.client.on_message = lambda c, u, m: self.messages.put(m)
        self.client.on_disconnect = lambda *a: self.disconnected.set()
        properties = mqtt.Properties(mqtt.PacketTypes.CONNECT)
        properties.SessionExpiryInterval = 3600
        self.client.connect(broker.host, broker.port, 30, clean_start=clean_start, properties=properties)
        self.client.loop_start()
        with self._cond:
            assert self._cond.wait_for(lambda: self.connack is not None, WAIT_S), "no CONNACK"

    def _on_connect(self, client, userdata, flags, reason_code, properties):
        with self._cond:
            self.connack = reason_code.value
            self._cond.notify_all()

    def _on_publish(self, client, userdata, mid, reason_code, properties):
        with self._cond:
            self.pubacks[mid] = reason_code.value
            self._cond.notify_all()

    def _on_subscribe(self, client, userdata, mid, reason_codes, properties):
        with self._cond:
            self.subacks[mid] = [code.value for code in reason_codes]
            self._cond.notify_all()

    def publish(self, topic: str, payload: bytes, retain: bool = False) -> int:
        """Publish at QoS 1; the PUBACK's reason code (0 accepted, 0x87 not authorized)."""
        info = self.client.publish(topic, payload, qos=1, retain=retain)
        with self._cond:
            assert self._cond.wait_for(lambda: info.mid in self.pubacks, WAIT_S), f"no PUBACK for {topic}"
            return self.pubacks[info.mid]

    def subscribe(self, topic: str) -> List[int]:
        _, mid = self.client.subscribe(topic, qos=1)
        with self._cond:
            assert self._cond.wait_for(lambda: mid in self.subacks, WAIT_S), f"no SUBACK for {topic}"
            return self.subacks[mid]

    def received(self, wait_s: float) -> List[mqtt.MQTTMessage]:
        found, deadline = [], time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                found.append(self.messages.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                break
        return found

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


class Fleet:
    """Identities made by `edgeopt fleet provision` and a Mosquitto that checks them."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.passwd = workdir / "edgeopt.passwd"
        self.acl = workdir / "edgeopt.acl"
        shutil.copyfile(ACL_TEMPLATE, self.acl)
        self.keys = workdir / "keys"
        self.passwords = {}
        for name, role in (("dev-a", "device"), ("dev-b", "device"), ("collector-1", "collector"),
                           ("deploy-1", "deploy")):
            self.passwords[name] = self.provision(name, role)

    def provision(self, name: str, role: str) -> str:
        out = self.workdir / "credentials" / name
        args = ["fleet", "provision", name, "--role", role, "--password-file", str(self.passwd), "--out", str(out),
                "--keys-dir", str(self.keys), "--json"]
        if role in ("collector", "deploy"):
            args += ["--acl-file", str(self.acl)]
        assert main(args) == 0
        return (out / "password").read_text().strip()

    def broker(self) -> MqttBroker:
        return MqttBroker(self.workdir / "broker", kind="mosquitto", listener_settings=[
            "allow_anonymous false", f"password_file {self.passwd}", f"acl_file {self.acl}",
            "use_username_as_clientid true"]).start()

    def login(self, broker, name: str, **kwargs) -> Client:
        return Client(broker, name, self.passwords[name], **kwargs)

    def settings(self, broker, name: str):
        return broker_settings(broker.address, username=name, password=self.passwords[name])


@pytest.fixture
def fleet(tmp_path):
    return Fleet(tmp_path)


@pytest.fixture
def secured(fleet):
    broker = fleet.broker()
    try:
        yield fleet, broker
    finally:
        broker.stop()


def started_collector(store, settings, **kwargs) -> Collector:
    collector = Collector(store, settings, **kwargs)
    collector.start()
    wait_until(lambda: collector.connected, "the collector to connect", timeout=WAIT_S)
    time.sleep(0.3)  # its SUBSCRIBE follows the CONNACK
    return collector


@needs_mosquitto
@pytest.mark.slow
@pytest.mark.parametrize("shared", [None, "g1"])
def test_a_device_cannot_speak_for_another_and_the_collector_stores_only_its_own(secured, tmp_path, shared):
    fleet, broker = secured
    store = open_store(f"sqlite:///{tmp_path}/fleet.db")
    collector = started_collector(store, fleet.settings(broker, "collector-1"), client_id="collector-1",
                                  shared_group=shared)
    a, b = SimulatedDevice("dev-a"), SimulatedDevice("dev-b")
    device_a = fleet.login(broker, "dev-a", client_id="edgeopt-agent-dev-a")
    device_b = fleet.login(broker, "dev-b", client_id="edgeopt-agent-dev-b")
    try:
        online = b.status("online")
        assert device_b.publish(online.topic, online.payload, retain=True) == 0
        real = b.result("real-job", p50_ms=10.0)
        assert device_b.publish(real.topic, real.payload) == 0

        forged = [b.result("forged-job", p50_ms=0.001), b.status("offline", "shutdown"), b.telemetry(),
                  b.envelope(wire.TRANSFER, wire.TRANSFER_TYPE, {"job_id": "x"})]
        for message in forged:  # A's login, B's topics and B's device id in the envelope
            assert device_a.publish(message.topic, message.payload, retain=message.retain) == NOT_AUTHORIZED, message.topic
        # On its own topic the ACL lets A through, but an envelope naming B is the collector's to refuse.
        posing = b.result("posing-job")
        assert device_a.publish(wire.results_topic("dev-a"), posing.payload) == 0
        own = a.result("a-job")
        assert device_a.publish(own.topic, own.payload) == 0
        wait_until(lambda: {r["job_id"] for r in store.results()} >= {"real-job", "a-job"}, "both real results")
        wait_until(lambda: store.stats()["rejected"] == {"wrong_device": 1}, "the posing result to be rejected")
    finally:
        collector.close()
        device_a.close()
        device_b.close()
    assert sorted((r["device_id"], r["job_id"]) for r in store.results(latest=False)) == [
        ("dev-a", "a-job"), ("dev-b", "real-job")]
    states = {d["device_id"]: d["state"] for d in store.devices()}
    assert states["dev-b"] == "online"
    assert store.telemetry(device="dev-b") == []
    [rejected] = store.rejected()
    assert (rejected["topic"], rejected["device_id"]) == (wire.results_topic("dev-a"), "dev-a")
    store.close()
    # The retained status still says B is online: A's offline never replaced it.
    deployer = HostClient(fleet.settings(broker, "deploy-1"))
    deployer.connect()
    try:
        statuses = read_statuses(deployer, quiet_s=0.2, max_s=3.0)
    finally:
        deployer.close()
    assert statuses["dev-b"].state == "online" and statuses["dev-b"].seq == online_seq(online)


def online_seq(published) -> int:
    return json.loads(published.payload)["seq"]


@needs_mosquitto
@pytest.mark.slow
def test_a_device_reads_only_its_own_jobs_and_deploy_can_send_them(secured):
    fleet, broker = secured
    device_a = fleet.login(broker, "dev-a")
    device_b = fleet.login(broker, "dev-b")
    deployer = HostClient(fleet.settings(broker, "deploy-1"))
    try:
        assert device_b.subscribe(wire.jobs_topic("dev-b")) == [1]
        # Mosquitto 2.0's acl_file grants every SUBSCRIBE and checks read access on each message
        # it would deliver, so what counts is that nothing of B's reaches A.
        for spying in (wire.jobs_topic("dev-b"), wire.subscription(wire.JOBS), "#",
                       wire.results_topic("dev-b")):
            device_a.subscribe(spying)
        deployer.connect()
        # Deploy may subscribe to what it reads (HostClient raises on a refused subscription).
        deployer.subscribe([wire.subscription(wire.RESULTS), wire.subscription(wire.TRANSFER),
                            wire.subscription(wire.STATUS)])
        job = wire.Envelope("dev-b", 1, wire.BENCHMARK_JOB, {"job_id": "for-b"}).encode()
        deployer.wait_acked(deployer.publish(wire.jobs_topic("dev-b"), job))
        result = SimulatedDevice("dev-b").result("for-b")
        assert device_b.publish(result.topic, result.payload) == 0
        assert [m.topic for m in device_b.received(2.0)] == [wire.jobs_topic("dev-b")]
        assert wait_until(lambda: deployer.receive(0.1), "deploy to read B's result").topic == result.topic
        assert device_a.received(1.0) == []
        # A device cannot send jobs, not even to itself.
        assert device_a.publish(wire.jobs_topic("dev-a"), job) == NOT_AUTHORIZED
    finally:
        deployer.close()
        device_a.close()
        device_b.close()


@needs_mosquitto
@pytest.mark.slow
def test_a_device_cannot_take_over_another_devices_session_by_its_client_id(secured):
    fleet, broker = secured
    b_id = "edgeopt-agent-dev-b"
    device_b = fleet.login(broker, "dev-b", client_id=b_id, clean_start=False)
    assert device_b.subscribe(wire.jobs_topic("dev-b")) == [1]
    device_b.close()  # B is away: its session (and a job sent now) waits at the broker
    deployer = HostClient(fleet.settings(broker, "deploy-1"))
    deployer.connect()
    try:
        job = wire.Envelope("dev-b", 1, wire.BENCHMARK_JOB, {"job_id": "queued-for-b"}).encode()
        deployer.wait_acked(deployer.publish(wire.jobs_topic("dev-b"), job))
    finally:
        deployer.close()
    thief = fleet.login(broker, "dev-a", client_id=b_id, clean_start=False)
    try:
        assert thief.received(1.5) == []  # the broker gave it the session of "dev-a", not B's
    finally:
        thief.close()
    device_b = fleet.login(broker, "dev-b", client_id=b_id, clean_start=False)
    try:
        got = device_b.received(3.0)
        assert [json.loads(m.payload)["body"]["job_id"] for m in got] == ["queued-for-b"]
        # And with B connected, A using B's client id does not disconnect B.
        intruder = fleet.login(broker, "dev-a", client_id=b_id)
        intruder.close()
        assert not device_b.disconnected.wait(1.0)
    finally:
        device_b.close()


@needs_mosquitto
def test_provision_writes_a_password_entry_and_an_agent_config_the_agent_reads(fleet, capsys):
    lines = fleet.passwd.read_text().splitlines()
    assert [line.split(":")[0] for line in lines] == ["dev-a", "dev-b", "collector-1", "deploy-1"]
    assert all(line.split(":", 1)[1].startswith("$7$") for line in lines)  # mosquitto_passwd's own hash
    assert fleet.passwords["dev-a"] not in fleet.passwd.read_text()
    folder = fleet.workdir / "credentials" / "dev-a"
    assert (folder / "password").stat().st_mode & 0o077 == 0
    config = build_config({}, folder / "agent.toml")
    assert (config.device_id, config.broker.username, config.broker.password) == ("dev-a", "dev-a", fleet.passwords["dev-a"])
    acl = fleet.acl.read_text()
    assert "user collector-1\ntopic read edgeopt/v1/+/status" in acl and "user deploy-1\n" in acl
    assert "--client-id collector-1" in (fleet.workdir / "credentials" / "collector-1" / "options.txt").read_text()
    # Provisioning a name twice is refused, saying how to replace it.
    assert main(["fleet", "provision", "dev-a", "--password-file", str(fleet.passwd),
                 "--out", str(fleet.workdir / "again")]) == 2
    assert "dev-a is already in" in capsys.readouterr().err
    assert main(["fleet", "provision", "bad/id", "--password-file", str(fleet.passwd)]) == 2
    capsys.readouterr()
    assert main(["fleet", "provision", "dev-c", "--out", str(fleet.workdir / "c")]) == 2
    assert "--password-file FILE" in capsys.readouterr().err


def test_provision_without_mosquitto_passwd_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(provisioning, "MOSQUITTO_PASSWD_FALLBACK", str(tmp_path / "missing"))
    with pytest.raises(UserError, match="mosquitto_passwd is not installed; install Mosquitto"):
        provisioning.provision("dev-a", password_file=tmp_path / "passwd", out_dir=tmp_path / "out")


def test_provision_issues_client_certificates_from_one_fleet_ca(tmp_path):
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    first = provisioning.provision("dev-a", cert=True, out_dir=tmp_path / "a", keys_dir=tmp_path / "keys")
    second = provisioning.provision("dev-b", cert=True, out_dir=tmp_path / "b", keys_dir=tmp_path / "keys")
    assert first.ca_created and not second.ca_created
    ca = x509.load_pem_x509_certificate((tmp_path / "keys" / provisioning.CA_CERT_NAME).read_bytes())
    cert = x509.load_pem_x509_certificate(first.cert.read_bytes())
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "dev-a"
    cert.verify_directly_issued_by(ca)
    assert ExtendedKeyUsageOID.CLIENT_AUTH in cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert first.key.stat().st_mode & 0o077 == 0 and (tmp_path / "keys" / provisioning.CA_KEY_NAME).stat().st_mode & 0o077 == 0
    config = build_config({}, first.config_path)
    assert config.broker.tls and config.broker.tls_cert == first.cert and config.broker.username is None
    with pytest.raises(UserError, match="already has credentials"):
        provisioning.provision("dev-a", cert=True, out_dir=tmp_path / "a", keys_dir=tmp_path / "keys")


@needs_mosquitto
@pytest.mark.slow
def test_mutual_tls_the_collector_connects_with_its_certificate_and_is_refused_without(tmp_path, caplog):
    keys, creds = tmp_path / "keys", tmp_path / "credentials"
    server = provisioning.provision("localhost", role="broker", server_names=["127.0.0.1", "localhost"],
                                    out_dir=creds / "broker", keys_dir=keys)
    collector_id = provisioning.provision("collector-1", role="collector", cert=True, out_dir=creds / "collector-1",
                                          keys_dir=keys, acl_file=tmp_path / "edgeopt.acl")
    device = provisioning.provision("dev-a", cert=True, out_dir=creds / "dev-a", keys_dir=keys)
    acl = (tmp_path / "edgeopt.acl")
    acl.write_text(ACL_TEMPLATE.read_text() + "\n" + acl.read_text())
    broker = MqttBroker(tmp_path / "broker", kind="mosquitto", listener_settings=[
        f"cafile {server.ca_cert}", f"certfile {server.cert}", f"keyfile {server.key}",
        "require_certificate true", "use_identity_as_username true", "use_username_as_clientid true",
        "allow_anonymous false", f"acl_file {acl}"]).start()
    store = open_store(f"sqlite:///{tmp_path}/fleet.db")
    try:
        settings = broker_settings(broker.address, tls_ca=collector_id.ca_cert, tls_cert=collector_id.cert,
                                   tls_key=collector_id.key)
        collector = started_collector(store, settings, client_id="collector-1")
        try:
            board = Client(broker, None, None, tls={"ca_certs": str(device.ca_cert), "certfile": str(device.cert),
                                                    "keyfile": str(device.key)})
            sim = SimulatedDevice("dev-a")
            try:
                assert board.connack == 0
                result = sim.result("over-mtls")
                assert board.publish(result.topic, result.payload) == 0
                forged = SimulatedDevice("dev-b").result("forged")
                assert board.publish(forged.topic, forged.payload) == NOT_AUTHORIZED  # CN dev-a is user dev-a
            finally:
                board.close()
            wait_until(lambda: store.results(), "the result sent over mutual TLS")
        finally:
            collector.close()
        assert [(r["device_id"], r["job_id"]) for r in store.results()] == [("dev-a", "over-mtls")]
        # Without a client certificate the broker refuses the TLS connection, and says so: deploy
        # stops with the reason, the collector keeps retrying and logs it (paho's error line).
        no_cert = broker_settings(broker.address, tls_ca=collector_id.ca_cert)
        without = HostClient(no_cert)
        with pytest.raises(UserError, match=r"refused the connection: it closed the connection before accepting it .*pass --tls-cert and --tls-key"):
            without.connect(timeout_s=5)
        without.close()
        with caplog.at_level(logging.ERROR, logger="paho.mqtt"):
            refused = Collector(store, no_cert, client_id="collector-1")
            refused.start()
            try:
                wait_until(lambda: "certificate required" in caplog.text, "the refusal in the collector's log")
                assert not refused.connected
            finally:
                refused.close()
    finally:
        store.close()
        broker.stop()


def test_fleet_serve_and_deploy_take_the_agents_tls_options(tmp_path, capsys):
    cert, key = tmp_path / "c.crt", tmp_path / "c.key"
    cert.write_text("x")
    key.write_text("x")
    for command in (["fleet", "serve", "--db", f"sqlite:///{tmp_path}/f.db"], ["deploy", str(tmp_path), "--all"]):
        assert main([*command, "--tls-cert", str(cert)]) == 2
        assert "needs both --tls-cert and --tls-key" in capsys.readouterr().err
    settings = broker_settings("broker.lab", tls_cert=cert, tls_key=key, tls_insecure=True)
    assert (settings.tls, settings.port, settings.tls_cert, settings.tls_key, settings.tls_insecure) == (
        True, 8883, cert, key, True)
    with pytest.raises(UserError, match="tls_ca: no such file"):
        broker_settings("broker.lab", tls_ca=tmp_path / "missing.pem")


@needs_mosquitto
@pytest.mark.slow
def queued(state_file: Path, kind: str) -> int:
    with sqlite3.connect(str(state_file)) as db:
        return db.execute("SELECT COUNT(*) FROM outbox WHERE kind = ?", (kind,)).fetchone()[0]


def test_a_real_agent_with_its_provisioned_config_works_under_the_acl(tmp_path):
    """The agent as shipped, started with the agent.toml that provision wrote: its status (and
    Will), telemetry and results reach the collector, and it gets the jobs deploy sends it."""
    fleet = Fleet(tmp_path)
    broker = fleet.broker()
    folder = tmp_path / "credentials" / "dev-a"
    config = folder / "agent.toml"
    config.write_text(config.read_text().replace('broker = "localhost"', f'broker = "{broker.address}"'))
    store = open_store(f"sqlite:///{tmp_path}/fleet.db")
    collector = started_collector(store, fleet.settings(broker, "collector-1"), client_id="collector-1")
    log_path = tmp_path / "agent.log"
    with open(log_path, "wb") as log:
        agent = subprocess.Popen([sys.executable, "-m", "edgeopt_agent.daemon", "--config", str(config),
                                  "--data-dir", str(tmp_path / "agent-data"), "--telemetry-interval", "1",
                                  "--log-level", "debug"], stdout=log, stderr=subprocess.STDOUT)
    deployer = HostClient(fleet.settings(broker, "deploy-1"))
    try:
        wait_until(lambda: any(d["device_id"] == "dev-a" and d["state"] == "online" for d in store.devices()),
                   "the agent's online status", timeout=30)
        wait_until(lambda: store.telemetry(device="dev-a"), "the agent's telemetry")
        deployer.connect()
        job = wire.Envelope("dev-a", 1, wire.BENCHMARK_JOB, {"job_id": "no-artifact"}).encode()
        deployer.wait_acked(deployer.publish(wire.jobs_topic("dev-a"), job))
        [answer] = wait_until(lambda: store.results(device="dev-a"), "the agent's answer")
        assert (answer["job_id"], answer["ok"], answer["error_kind"]) == ("no-artifact", False, "invalid_job")
        # The collector may write the device's confirm topic and the device may read it: the
        # agent forgets the answer once the collector confirmed it.
        wait_until(lambda: queued(tmp_path / "agent-data" / "agent.db", wire.RESULTS) == 0,
                   "the collector's confirmation of the answer")
        agent.kill()  # the broker sends its Last Will, which the ACL lets through
        agent.wait(10)
        wait_until(lambda: [d["state"] for d in store.devices() if d["device_id"] == "dev-a"] == ["offline"],
                   "the Last Will", timeout=90)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait(10)
        deployer.close()
        collector.close()
        store.close()
        broker.stop()
    assert "not authorized" not in log_path.read_text(errors="replace").lower()
