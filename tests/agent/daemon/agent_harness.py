"""The daemon tests' host side: a listening MQTT client for one device, and raw job envelopes (the agent
process, waits and the tiny model are harness.py's)."""
from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any, Callable, Dict, List

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from edgeopt_agent import wire

WAIT_S = 20.0


class Listener:
    """Records every message of one device, with a persistent session so a broker restart loses nothing."""

    def __init__(self, broker, device_id: str):
        self.device_id = device_id
        self.messages: List[Dict[str, Any]] = []
        self._cond = threading.Condition()
        self._v5 = broker.mqtt_v5
        client_id = f"test-listener-{uuid.uuid4().hex[:8]}"
        if self._v5:
            self._client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5)
            properties = Properties(PacketTypes.CONNECT)
            properties.SessionExpiryInterval = 3600
            self._client.connect(broker.host, broker.port, 30, clean_start=False, properties=properties)
        else:
            self._client = mqtt.Client(
                mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv311, clean_session=False
            )
            self._client.connect(broker.host, broker.port, 30)
        self._client.reconnect_delay_set(0.1, 0.5)
        self._client.on_connect = self._on_connect
        self._client.on_message = self._on_message
        self.subscribed = 0  # SUBACKs so far: one per (re)connection
        self._client.on_subscribe = self._on_subscribe
        self._client.loop_start()
        self.wait_subscribed(1)

    def _on_connect(self, client, userdata, flags, reason_code, properties):
        client.subscribe(wire.subscription(None, self.device_id), qos=1)

    def _on_subscribe(self, client, userdata, mid, reason_codes, properties):
        with self._cond:
            self.subscribed += 1
            self._cond.notify_all()

    def wait_subscribed(self, count: int, timeout: float = WAIT_S) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: self.subscribed >= count, timeout):
                raise AssertionError(f"listener did not subscribe (again) within {timeout:.0f} s")

    def _on_message(self, client, userdata, message):
        record = {"topic": message.topic, "retain": bool(message.retain), "raw": message.payload}
        try:
            record["kind"] = wire.parse_topic(message.topic)[1]
            record["envelope"] = json.loads(message.payload)
        except (ValueError, RecursionError):  # a hostile payload on a topic it listens to
            record["kind"] = None
        with self._cond:
            self.messages.append(record)
            self._cond.notify_all()

    def of(self, kind: str) -> List[Dict[str, Any]]:
        with self._cond:
            return [m["envelope"] for m in self.messages if m["kind"] == kind]

    def wait_for(self, kind: str, predicate: Callable[[Dict[str, Any]], bool] = lambda e: True,
                 timeout: float = WAIT_S) -> Dict[str, Any]:
        """The first message of `kind` matching `predicate`, waiting for it if needed."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for message in self.messages:
                    if message["kind"] == kind and predicate(message["envelope"]):
                        return message["envelope"]
                left = deadline - time.monotonic()
                if left <= 0:
                    seen = [(m["kind"], m["envelope"].get("seq"), m["envelope"].get("body", {}).get("state"))
                            for m in self.messages]
                    raise AssertionError(f"no matching {kind} message within {timeout:.0f} s; seen {seen}")
                self._cond.wait(left)

    def send_job(self, payload: bytes) -> None:
        info = self._client.publish(wire.jobs_topic(self.device_id), payload, qos=1)
        info.wait_for_publish(WAIT_S)

    def close(self) -> None:
        self._client.loop_stop()
        self._client.disconnect()


def job(device_id: str, body: Dict[str, Any], job_type: str = wire.BENCHMARK_JOB, seq: int = 1) -> wire.Envelope:
    """A job envelope exactly as given (no client-side validation, to send broken ones too)."""
    return wire.Envelope(device_id=device_id, seq=seq, type=job_type, body=body)
