"""The agent as a real subprocess against a real broker: status, Will, telemetry, jobs, outages, restarts."""
import sqlite3
import time

import pytest
from agent_harness import Listener, job
from harness import QUICK_BENCH, AgentProcess, FleetKey, write_tiny_onnx
from mqtt_broker import MqttBroker

from edgeopt_agent import wire

pytestmark = pytest.mark.slow

DEVICE = "e2e-dev"


@pytest.fixture
def data_dir(tmp_path):
    return tmp_path / "agent-data"


def start_agent(closing, broker, data_dir, **kwargs):
    agent = AgentProcess(broker, data_dir, DEVICE, **kwargs).start()
    closing.append(agent)
    return agent


def listen(closing, broker):
    listener = Listener(broker, DEVICE)
    closing.append(listener)
    return listener


def is_state(state, reason=None):
    return lambda e: e["body"]["state"] == state and (reason is None or e["body"]["reason"] == reason)


def assert_contiguous(seqs):
    """Every number from the first to the last, each exactly once: nothing lost, nothing twice."""
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs


def unique_by_id(envelopes):
    seen = {}
    for envelope in envelopes:
        seen.setdefault(envelope["id"], envelope)
    return list(seen.values())


def test_online_status_then_offline_on_sigterm_without_a_will(mqtt_broker, data_dir, closing):
    listener = listen(closing, mqtt_broker)
    agent = start_agent(closing, mqtt_broker, data_dir)
    online = listener.wait_for("status", is_state("online"))
    assert online["device_id"] == DEVICE and online["schema"] == wire.SCHEMA_VERSION
    assert online["body"]["mqtt_protocol"] == ("5" if mqtt_broker.mqtt_v5 else "3.1.1")

    assert agent.terminate() == 0
    offline = listener.wait_for("status", is_state("offline"))
    assert offline["body"]["reason"] == "shutdown"
    assert offline["seq"] > online["seq"]
    time.sleep(1.0)  # a Will would be published at once when the connection closes
    assert [e["body"]["reason"] for e in listener.of("status")] == ["connected", "shutdown"]

    late = listen(closing, mqtt_broker)  # the offline status is retained for whoever asks later
    assert late.wait_for("status")["id"] == offline["id"]


def test_last_will_marks_a_killed_agent_offline(mqtt_broker, data_dir, closing):
    listener = listen(closing, mqtt_broker)
    agent = start_agent(closing, mqtt_broker, data_dir)
    online = listener.wait_for("status", is_state("online"))
    agent.kill()
    will = listener.wait_for("status", is_state("offline"))
    assert will["body"]["reason"] == "connection_lost"
    assert will["seq"] > online["seq"]  # so a collector ordering by seq believes the Will


def test_telemetry_reports_the_board(mqtt_broker, data_dir, closing):
    listener = listen(closing, mqtt_broker)
    start_agent(closing, mqtt_broker, data_dir, telemetry_interval=0.3, extra_args=["--profile", "x86-64"])
    connected = listener.wait_for("telemetry", lambda e: e["body"]["agent"]["mqtt"]["connected"])
    listener.wait_for("telemetry", lambda e: e["seq"] >= 2)  # the connected one may be the first
    first, second = listener.of("telemetry")[:2]
    assert (first["seq"], second["seq"]) == (1, 2) and first["id"] != second["id"]
    body = connected["body"]
    for section in ("cpu", "memory", "disk", "thermal", "power", "throttle", "sensors", "versions", "agent"):
        assert section in body, section
    assert body["profile"] == "x86-64"
    assert body["versions"]["edgeopt"] and body["versions"]["python"]
    assert body["versions"]["onnxruntime"]  # from package metadata, without importing it
    assert "watts" in body["power"] and "source" in body["power"]


def test_benchmark_jobs_round_trip_and_bad_input_leaves_the_agent_running(mqtt_broker, data_dir, closing):
    sha = write_tiny_onnx(data_dir / "models" / "tiny.onnx")
    listener = listen(closing, mqtt_broker)
    agent = start_agent(closing, mqtt_broker, data_dir)
    listener.wait_for("status", is_state("online"))

    good = wire.benchmark_job(DEVICE, 1, "good", sha, "onnx", path="models/tiny.onnx", **QUICK_BENCH)
    inline = wire.benchmark_job(DEVICE, 2, "inline", sha, "onnx",
                                    data=(data_dir / "models" / "tiny.onnx").read_bytes(), **QUICK_BENCH)
    listener.send_job(b"{broken json")
    listener.send_job(job(DEVICE, {"job_id": "odd"}, job_type="reboot").encode())
    listener.send_job(job(DEVICE, {"job_id": "gone", "artifact": {"sha256": sha, "format": "onnx",
                                                                  "path": "models/gone.onnx"}}).encode())
    listener.send_job(job(DEVICE, {"job_id": "corrupt", "artifact": {"sha256": "f" * 64, "format": "onnx",
                                                                     "path": "models/tiny.onnx"}}).encode())
    listener.send_job(job(DEVICE, {"job_id": "escape", "artifact": {"sha256": sha, "format": "onnx",
                                                                    "path": "../../etc/passwd"}}).encode())
    listener.send_job(good.encode())
    listener.send_job(inline.encode())

    def answer(job_id):
        return listener.wait_for("results", lambda e: e["body"]["job_id"] == job_id, timeout=60)["body"]

    malformed = listener.wait_for("results", lambda e: e["body"]["request_id"] is None)["body"]
    assert malformed["error"]["kind"] == "malformed_message"
    assert answer("odd")["error"]["kind"] == "unknown_job_type"
    assert answer("gone")["error"]["kind"] == "missing_artifact"
    assert answer("corrupt")["error"]["kind"] == "artifact_mismatch"
    assert answer("escape")["error"]["kind"] == "invalid_path"
    for job_id, envelope in (("good", good), ("inline", inline)):
        body = answer(job_id)
        assert body["ok"] is True, body["error"]
        assert body["request_id"] == envelope.id
        assert body["result"]["latency_ms"]["p50"] > 0
    results = listener.of("results")
    assert [e["seq"] for e in results] == list(range(1, 8))  # one result per job, in order
    assert agent.alive()
    assert agent.terminate() == 0
    assert "NO TRUSTED KEY" in agent.log() and "without checking who sent it" in agent.log()  # said loudly


def test_broker_outage_loses_no_telemetry(mqtt_broker, data_dir, closing):
    listener = listen(closing, mqtt_broker)
    agent = start_agent(closing, mqtt_broker, data_dir, telemetry_interval=0.1)
    before = listener.wait_for("telemetry", lambda e: e["seq"] >= 3)["seq"]
    if not mqtt_broker.mqtt_v5:
        # amqtt keeps nothing on stop: what it acknowledged but had not yet passed on would be
        # lost by the broker, not the agent. Let it pass everything on first.
        agent.pause()
        time.sleep(0.5)
        mqtt_broker.stop()
        agent.resume()
    else:
        mqtt_broker.stop()
    time.sleep(1.5)  # the agent measures on while the broker is away
    # Hold the agent until the listener is subscribed again: a broker without persistence
    # (amqtt) would otherwise drop what the agent sends before the listener is back.
    agent.pause()
    mqtt_broker.start()
    listener.wait_subscribed(2)
    agent.resume()
    # Telemetry numbered well past what was measured during the outage must arrive, and all before it.
    listener.wait_for("telemetry", lambda e: e["seq"] >= before + 25, timeout=30)
    seqs = sorted(e["seq"] for e in unique_by_id(listener.of("telemetry")))
    assert seqs[0] == 1
    assert_contiguous(seqs)


def test_restart_with_a_full_outbox_sends_everything(mqtt_broker, data_dir, closing):
    mqtt_broker.stop()
    first = start_agent(closing, mqtt_broker, data_dir, telemetry_interval=0.1)
    # Until five telemetry messages wait in the outbox, however slowly this machine (or an emulated
    # aarch64) runs the agent: a fixed sleep failed 3 of 3 under qemu.
    deadline = time.monotonic() + 120
    while _queued_telemetry(data_dir) < 5:
        assert time.monotonic() < deadline, "the agent queued fewer than 5 telemetry messages in 120 s"
        assert first.process.poll() is None, first.log_path.read_text(errors="replace")[-2000:]
        time.sleep(0.1)
    assert first.terminate() == 0  # a clean stop even though the broker was never reachable
    queued = _queued_telemetry(data_dir)
    assert queued >= 5

    mqtt_broker.start()
    listener = listen(closing, mqtt_broker)
    start_agent(closing, mqtt_broker, data_dir, telemetry_interval=0.5)
    listener.wait_for("telemetry", lambda e: e["seq"] > queued + 1, timeout=30)
    seqs = sorted(e["seq"] for e in unique_by_id(listener.of("telemetry")))
    assert seqs[0] == 1  # the oldest message measured before the restart
    assert_contiguous(seqs)  # and the numbering went on across the restart


def _queued_telemetry(data_dir) -> int:
    try:
        with sqlite3.connect(str(data_dir / "agent.db")) as db:
            return db.execute("SELECT COUNT(*) FROM outbox WHERE kind = 'telemetry'").fetchone()[0]
    except sqlite3.OperationalError:  # not created yet, or mid-write
        return 0


def test_mqtt_3_1_1_fallback_when_the_broker_refuses_v5(tmp_path, data_dir, closing):
    pytest.importorskip("amqtt", reason="the MQTT 3.1.1-only broker amqtt is not installed")
    broker = MqttBroker(tmp_path / "amqtt", kind="amqtt").start()
    try:
        listener = listen(closing, broker)
        agent = start_agent(closing, broker, data_dir, telemetry_interval=0.3)
        online = listener.wait_for("status", is_state("online"))
        assert online["body"]["mqtt_protocol"] == "3.1.1"
        telemetry = listener.wait_for("telemetry", lambda e: e["body"]["agent"]["mqtt"]["connected"])
        assert telemetry["body"]["agent"]["mqtt"]["protocol"] == "3.1.1"
        # What was measured while the v5 attempt hung was kept and sent too.
        assert_contiguous(sorted(e["seq"] for e in unique_by_id(listener.of("telemetry")))[:telemetry["seq"]])
        assert agent.terminate() == 0
        listener.wait_for("status", is_state("offline", "shutdown"))
    finally:
        closing.close()  # the agent and the listener, before their broker
        broker.stop()


def test_a_signed_job_runs_once_even_across_a_restart_and_only_on_the_device_it_names(
        mqtt_broker, data_dir, closing, tmp_path):
    pytest.importorskip("cryptography.hazmat.primitives.asymmetric.ed25519",
                        reason="signed jobs need the cryptography package (agent extra)")
    fleet = FleetKey(tmp_path)
    public, sign = fleet.public_path, fleet.sign_job

    sha = write_tiny_onnx(data_dir / "models" / "tiny.onnx")
    body = wire.benchmark_body("signed-1", sha, "onnx", path="models/tiny.onnx",
                                   target=wire.JobTarget((DEVICE,)), signer=sign, **QUICK_BENCH)
    for_b = wire.benchmark_body("for-b", sha, "onnx", path="models/tiny.onnx",
                                    target=wire.JobTarget(("other-dev",)), signer=sign, **QUICK_BENCH)
    listener = listen(closing, mqtt_broker)
    agent = start_agent(closing, mqtt_broker, data_dir, extra_args=["--trusted-key", str(public)])
    listener.wait_for("status", is_state("online"))

    def send(body):
        envelope = wire.Envelope(DEVICE, 1, wire.BENCHMARK_JOB, body)  # a new message each time
        listener.send_job(envelope.encode())
        return listener.wait_for("results", lambda e: e["body"]["request_id"] == envelope.id, timeout=60)["body"]

    first = send(body)
    assert first["ok"] is True, first["error"]
    assert send(body)["error"]["kind"] == "replayed"
    assert send(for_b)["error"]["kind"] == "wrong_target"
    assert agent.terminate() == 0
    listener.wait_for("status", is_state("offline", "shutdown"))

    agent = start_agent(closing, mqtt_broker, data_dir, extra_args=["--trusted-key", str(public)])
    again = send(body)  # queued in the agent's persistent session until it is back
    assert again["ok"] is False and again["error"]["kind"] == "replayed"  # the restart forgot nothing
    assert agent.terminate() == 0
    assert "NO TRUSTED KEY" not in agent.log()
