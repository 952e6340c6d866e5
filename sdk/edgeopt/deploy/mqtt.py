"""The MQTT client of one deploy: connect, subscribe, publish at QoS 1 and wait for the broker's ack.

Short-lived and without a persistent session, so it speaks MQTT 3.1.1, which every broker
serves (the embedded one of `edgeopt quickstart` included); it needs nothing of v5. paho's network
thread puts every received message on a queue, read by the deploy's own thread.
"""
from __future__ import annotations

import logging
import queue
import threading
import uuid
from typing import Any, Dict, List, Optional, Sequence

from edgeopt_agent.wire.broker import CONNECT_TIMEOUT_S, BrokerSettings, configure_client
from edgeopt_agent.wire.session import Received

from ..errors import UserError, require

log = logging.getLogger(__name__)

QOS = 1
ACK_TIMEOUT_S = 30.0


class HostClient:
    def __init__(self, settings: BrokerSettings, client_id: Optional[str] = None):
        self._mqtt = require("paho.mqtt.client", "fleet", "deploying over MQTT")
        mqtt = self._mqtt
        self.settings = settings
        self.client_id = client_id or f"edgeopt-deploy-{uuid.uuid4().hex[:12]}"
        self._client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=self.client_id,
                                   protocol=mqtt.MQTTv311, clean_session=True)
        configure_client(self._client, settings)
        self._client.on_connect = self._on_connect
        self._client.on_disconnect = self._on_disconnect
        self._client.on_subscribe = self._on_subscribe
        self._client.on_message = self._on_message
        self._client.on_log = self._on_log
        paho_log = logging.getLogger("paho.mqtt")
        if paho_log.isEnabledFor(logging.DEBUG):  # packet traces with -v; paho's noise stays out otherwise
            self._client.enable_logger(paho_log)
        self.messages: "queue.Queue[Received]" = queue.Queue()
        self._cond = threading.Condition()
        self._connected = False
        self._ever_connected = False
        self._last_error: Optional[str] = None  # paho's last error line: why a TLS connection died
        self._refusal: Optional[str] = None
        self._filters: List[str] = []
        self._subacks: Dict[int, List[str]] = {}  # packet id -> refusal reasons (empty: granted)
        self._started = False

    @property
    def connected(self) -> bool:
        return self._connected

    def connect(self, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
        s = self.settings
        try:
            self._client.connect(s.host, s.port, s.keepalive_s)
        except OSError as exc:  # refused, unreachable, DNS, TLS handshake
            raise UserError(f"cannot reach the MQTT broker at {s.address}: {exc}; start one "
                            "(or `edgeopt quickstart`) or pass --broker HOST:PORT") from None
        self._client.loop_start()
        self._started = True
        with self._cond:
            if not self._cond.wait_for(lambda: self._connected or self._refusal, timeout_s):
                raise UserError(f"the MQTT broker at {s.address} did not answer within {timeout_s:.0f} s")
        if self._refusal:
            hint = ("; if the broker wants a client certificate, pass --tls-cert and --tls-key"
                    if s.tls and not s.tls_cert else "")
            raise UserError(f"the MQTT broker at {s.address} refused the connection: {self._refusal}{hint}")

    def subscribe(self, filters: Sequence[str], timeout_s: float = ACK_TIMEOUT_S) -> None:
        """Subscribe (again after any reconnect) and wait until the broker confirmed it."""
        self._filters.extend(filters)
        rc, mid = self._client.subscribe([(name, QOS) for name in filters])
        if rc != self._mqtt.MQTT_ERR_SUCCESS:
            raise UserError(f"lost the connection to the MQTT broker at {self.settings.address}")
        with self._cond:
            if not self._cond.wait_for(lambda: mid in self._subacks, timeout_s):
                raise UserError(f"the MQTT broker at {self.settings.address} did not confirm the subscription "
                                f"within {timeout_s:.0f} s")
        refused = self._subacks[mid]
        if refused:
            raise UserError(f"the MQTT broker at {self.settings.address} refused to subscribe to "
                            f"{', '.join(filters)}: {', '.join(refused)}; check the broker's ACL for this user")

    def publish(self, topic: str, payload: bytes) -> Any:
        """Queue a QoS 1 message; returns paho's message info for `wait_acked`."""
        return self._client.publish(topic, payload, qos=QOS)

    def wait_acked(self, info: Any, timeout_s: float = ACK_TIMEOUT_S) -> None:
        try:
            info.wait_for_publish(timeout_s)
        except (RuntimeError, ValueError) as exc:
            raise UserError(f"could not publish to the MQTT broker at {self.settings.address}: {exc}") from None
        if not info.is_published():
            raise UserError(f"the MQTT broker at {self.settings.address} did not acknowledge a message "
                            f"within {timeout_s:.0f} s")

    def receive(self, timeout_s: float) -> Optional[Received]:
        try:
            return self.messages.get(timeout=max(0.0, timeout_s))
        except queue.Empty:
            return None

    def close(self) -> None:
        if self._started:
            self._started = False
            self._client.disconnect()
            self._client.loop_stop()

    # --- paho's network thread ------------------------------------------------------------------

    def _on_connect(self, client, userdata, flags, reason_code, properties) -> None:
        with self._cond:
            if reason_code.is_failure:
                self._refusal = str(reason_code)
            else:
                self._connected = self._ever_connected = True
                if self._filters:  # a clean session forgets subscriptions across a reconnect
                    client.subscribe([(name, QOS) for name in self._filters])
            self._cond.notify_all()

    def _on_disconnect(self, client, userdata, flags, reason_code, properties) -> None:
        with self._cond:
            self._connected = False
            if not self._ever_connected and not self._refusal:  # e.g. TLS: a client certificate it wanted
                self._refusal = "it closed the connection before accepting it" + (
                    f" ({self._last_error})" if self._last_error else "")
            self._cond.notify_all()
        if self._started and self._ever_connected:
            log.warning("lost the connection to %s (%s); reconnecting", self.settings.address, reason_code)

    def _on_subscribe(self, client, userdata, mid, reason_codes, properties) -> None:
        with self._cond:
            self._subacks[mid] = [str(code) for code in reason_codes if code.is_failure]
            self._cond.notify_all()

    def _on_log(self, client, userdata, level, text) -> None:
        if level == self._mqtt.MQTT_LOG_ERR:
            self._last_error = text

    def _on_message(self, client, userdata, message) -> None:
        self.messages.put(Received.of(message))
