"""`edgeopt fleet serve` and a real agent, both as subprocesses: the agent's status, telemetry and a
benchmark result land in the database, and the views show them."""
import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid

import paho.mqtt.client as mqtt
import pytest
from harness import QUICK_BENCH, tiny_onnx

from edgeopt.fleet.store import open_store
from edgeopt_agent import wire

pytestmark = pytest.mark.slow

DEVICE = "fleet-e2e-dev"
WAIT_S = 60.0


class Process:
    def __init__(self, args, log_path, env=None):
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)

    def log(self):
        return self.log_path.read_text(errors="replace")

    def terminate(self, timeout=30):
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)

    def close(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


def wait_for(read, predicate, what, process=None, timeout=WAIT_S):
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if predicate(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last: {value}"
                                 + (f"\n{process.log()}" if process else ""))
        time.sleep(0.1)


def edgeopt(*args):
    result = subprocess.run([sys.executable, "-m", "edgeopt.cli.main", *args], capture_output=True, text=True,
                            timeout=60, env={**os.environ, "COLUMNS": "200"})
    assert result.returncode == 0, result.stderr
    return result.stdout


def queued_results(state_file):
    with sqlite3.connect(str(state_file)) as db:
        return db.execute("SELECT COUNT(*) FROM outbox WHERE kind = 'results'").fetchone()[0]


def send_job(broker, envelope):
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"test-deploy-{uuid.uuid4().hex[:6]}",
                         protocol=mqtt.MQTTv5 if broker.mqtt_v5 else mqtt.MQTTv311)
    client.connect(broker.host, broker.port, 30)
    client.loop_start()
    try:
        client.publish(wire.jobs_topic(DEVICE), envelope.encode(), qos=1).wait_for_publish(20)
    finally:
        client.disconnect()
        client.loop_stop()


def test_agent_status_telemetry_and_result_reach_the_fleet_views(mqtt_broker, tmp_path, closing):
    url = f"sqlite:///{tmp_path}/fleet.db"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    collector = Process([sys.executable, "-m", "edgeopt.cli.main", "fleet", "serve", "--broker", mqtt_broker.address,
                         "--db", url, "--client-id", "e2e-collector"], tmp_path / "collector.log", env)
    closing.append(collector)
    wait_for(lambda: collector.log(), lambda text: "collecting from" in text, "the collector to start", collector)
    agent = Process([sys.executable, "-m", "edgeopt_agent.daemon", "--broker", mqtt_broker.address,
                     "--device-id", DEVICE, "--profile", "x86-64", "--data-dir", str(tmp_path / "agent"),
                     "--telemetry-interval", "0.5", "--reconnect-min", "0.5", "--reconnect-max", "1"],
                    tmp_path / "agent.log", env)
    closing.append(agent)

    store = open_store(url, create=False)  # the collector created it before saying "collecting from"
    try:
        [device] = wait_for(lambda: store.devices(),
                            lambda rows: rows and rows[0]["state"] == "online" and rows[0]["runtimes"],
                            "the agent's status and telemetry", agent)
        assert device["device_id"] == DEVICE and device["profile"] == "x86-64"
        assert device["runtimes"]["onnxruntime"] and device["agent_version"]

        model = tiny_onnx()
        job = wire.benchmark_job(DEVICE, 1, "e2e-job-1", hashlib.sha256(model).hexdigest(), "onnx",
                                     data=model, **QUICK_BENCH)
        send_job(mqtt_broker, job)
        [result] = wait_for(lambda: store.results(), bool, "the benchmark result", agent)
        assert result["ok"], result
        assert result["job_id"] == "e2e-job-1" and result["runtime"] == "onnxruntime" and result["p50_ms"] > 0
        assert result["profile"] == "x86-64" and result["format"] == "onnx"

        # The collector confirmed the result after its commit, so the agent forgot it.
        wait_for(lambda: queued_results(tmp_path / "agent" / "agent.db"), lambda n: n == 0,
                 "the agent to forget the confirmed result", agent)

        shown = json.loads(edgeopt("fleet", "results", "--db", url, "--json"))
        assert [(r["device_id"], r["job_id"]) for r in shown] == [(DEVICE, "e2e-job-1")]
        table = edgeopt("fleet", "devices", "--db", url)
        assert DEVICE in table and "x86-64" in table and "online" in table

        assert agent.terminate() == 0
        wait_for(lambda: store.devices()[0]["state"], lambda state: state == "offline", "the offline status", agent)
        assert store.devices()[0]["state_reason"] == "shutdown"
        assert collector.terminate() == 0
        assert "stopped:" in collector.log() and "internal error" not in collector.log()
        assert store.gaps(open_only=True) == []
        assert store.stats()["totals"]["rejected"] == 0
    finally:
        store.close()
