"""Helpers for the deploy tests: agents as real subprocesses, and a bare MQTT client (to play the attacker)."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import paho.mqtt.client as mqtt

from edgeopt_agent import wire

WAIT_S = 30.0
# A benchmark that takes a moment: a few runs, no idle-power baseline.
QUICK_BENCH = {"runs": 5, "duration_s": 0, "warmup_runs": 1, "warmup_s": 0, "idle_s": 0, "timeout_s": 60}


def wait_until(predicate: Callable[[], Any], what: str, timeout: float = WAIT_S, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


class NoSensors:
    """An in-process agent's sensors: none, so its telemetry is the agent's own counters."""

    def snapshot(self):
        return {}


class Agent:
    """`python -m edgeopt_agent.daemon` for one device."""

    def __init__(self, broker, workdir: Path, device_id: str, profile: str, trusted_key: Optional[Path] = None):
        self.device_id = device_id
        self.data_dir = workdir / device_id
        self.log_path = workdir / f"{device_id}.log"
        self.args = [sys.executable, "-m", "edgeopt_agent.daemon", "--broker", broker.address,
                     "--device-id", device_id, "--profile", profile, "--data-dir", str(self.data_dir),
                     "--telemetry-interval", "60", "--reconnect-min", "0.5", "--reconnect-max", "1",
                     "--transfer-timeout", "30", "--log-level", "debug"]
        if trusted_key is not None:
            self.args += ["--trusted-key", str(trusted_key)]
        self.process: Optional[subprocess.Popen] = None

    def start(self) -> "Agent":
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT)
        return self

    def terminate(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(20)

    def cleanup(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def artifacts(self) -> List[str]:
        folder = self.data_dir / "artifacts"
        return sorted(p.name for p in folder.iterdir()) if folder.exists() else []

    def chunks_held(self, sha256: str) -> int:
        return len(list((self.data_dir / "transfers" / sha256).glob("*.chunk")))


class RawClient:
    """A plain MQTT 3.1.1 client that records what it receives: sends whatever a test hands it."""

    def __init__(self, broker, subscriptions: List[str]):
        self.messages: List[Dict[str, Any]] = []
        self._cond = threading.Condition()
        self._client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"raw-{uuid.uuid4().hex[:8]}",
                                   protocol=mqtt.MQTTv311)
        self._client.on_message = self._on_message
        self._subacks = set()
        self._client.on_subscribe = self._on_subscribe
        self._client.connect(broker.host, broker.port, 30)
        self._client.loop_start()
        for name in subscriptions:
            _, mid = self._client.subscribe(name, qos=1)
            with self._cond:
                assert self._cond.wait_for(lambda: mid in self._subacks, WAIT_S), f"no SUBACK for {name}"

    def _on_subscribe(self, client, userdata, mid, reason_codes, properties):
        with self._cond:
            self._subacks.add(mid)
            self._cond.notify_all()

    def _on_message(self, client, userdata, message):
        with self._cond:
            self.messages.append({"topic": message.topic, "envelope": json.loads(message.payload)})
            self._cond.notify_all()

    def publish(self, topic: str, envelope: wire.Envelope, retain: bool = False) -> None:
        self._client.publish(topic, envelope.encode(), qos=1, retain=retain).wait_for_publish(WAIT_S)

    def wait_for(self, topic: str, predicate: Callable[[Dict[str, Any]], bool], timeout: float = WAIT_S):
        with self._cond:
            found = self._cond.wait_for(lambda: next(
                (m["envelope"] for m in self.messages if m["topic"] == topic and predicate(m["envelope"])), None),
                timeout)
        if not found:
            raise AssertionError(f"nothing matching on {topic} within {timeout:.0f} s")
        return found

    def close(self) -> None:
        self._client.loop_stop()
        self._client.disconnect()
