"""The MQTT client of one deploy: connect, subscribe, publish at QoS 1 and wait for the broker's ack.

A thin host-side face of the MQTT session (edgeopt_agent.wire.session): a clean MQTT 3.1.1
session, which every broker serves (the embedded one of `edgeopt quickstart` included), that
puts every received message on a queue read by the deploy's own thread.
"""
from __future__ import annotations

import queue
import uuid
from typing import Any, Optional, Sequence

from edgeopt_agent.wire.broker import CONNECT_TIMEOUT_S, BrokerSettings
from edgeopt_agent.wire.session import ACK_TIMEOUT_S, BrokerUnreachable, MqttSession, Received

from ..errors import UserError, require


class HostClient:
    def __init__(self, settings: BrokerSettings, client_id: Optional[str] = None):
        require("paho.mqtt.client", "fleet", "deploying over MQTT")
        self.settings = settings
        self.client_id = client_id or f"edgeopt-deploy-{uuid.uuid4().hex[:12]}"
        self.messages: "queue.Queue[Received]" = queue.Queue()
        self._session = MqttSession(settings, self.client_id, on_receive=self.messages.put,
                                    clean=True, quiet=True)

    @property
    def connected(self) -> bool:
        return self._session.connected

    def connect(self, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
        try:
            self._session.connect(timeout_s)
        except BrokerUnreachable as exc:
            raise UserError(f"{exc}; start one (or `edgeopt quickstart`) or pass --broker HOST:PORT") from None

    def subscribe(self, filters: Sequence[str], timeout_s: float = ACK_TIMEOUT_S) -> None:
        """Subscribe (again after any reconnect) and wait until the broker confirmed it."""
        self._session.subscribe(filters, timeout_s)

    def publish(self, topic: str, payload: bytes) -> Any:
        """Queue a QoS 1 message; returns paho's message info for `wait_acked`."""
        return self._session.send(topic, payload)

    def wait_acked(self, info: Any, timeout_s: float = ACK_TIMEOUT_S) -> None:
        self._session.wait_published(info, timeout_s)

    def receive(self, timeout_s: float) -> Optional[Received]:
        try:
            return self.messages.get(timeout=max(0.0, timeout_s))
        except queue.Empty:
            return None

    def close(self) -> None:
        self._session.stop()
