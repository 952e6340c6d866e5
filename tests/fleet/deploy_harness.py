"""Helpers for the deploy tests: boards as real subprocesses (harness.AgentProcess), and a bare MQTT client
(to play the attacker)."""
from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import paho.mqtt.client as mqtt
from harness import WAIT_S, AgentProcess

from edgeopt_agent import wire



def deploy_agent(broker, workdir: Path, device_id: str, profile: str,
                 trusted_key: Optional[Path] = None) -> AgentProcess:
    """A board for the deploy tests: its data under `workdir`/`device_id`, transfers given 30 s."""
    return AgentProcess(broker, workdir / device_id, device_id, profile=profile, trusted_key=trusted_key,
                        extra_args=["--transfer-timeout", "30"])


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
