"""One MQTT connection that stays up: connect, fall back from v5 to 3.1.1, reconnect with back-off.

paho-mqtt is driven single-threaded: this session's own thread runs the network loop, and every
paho callback and every publish happens on that thread (hooks `on_connect` and `on_tick` are
where the owner publishes). Other threads hand work over through the disk-backed outbox.

The session is persistent (MQTT v5 clean start off with a session expiry, 3.1.1 clean session
off), so jobs sent while the board is away wait at the broker. Incoming messages are
acknowledged only after `on_message` returned, i.e. after the agent stored them.
"""
from __future__ import annotations

import logging
import select
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from ..errors import require
from .backoff import Backoff
from .broker import BrokerSettings, configure_client

log = logging.getLogger(__name__)

V5 = "5"
V311 = "3.1.1"
QOS = 1
SESSION_EXPIRY_S = 7 * 24 * 3600
TICK_S = 0.25
CONNACK_TIMEOUT_S = 30.0
# Some 3.1.1-only brokers misread a v5 CONNECT (its properties) and never answer at all, rather
# than refusing the protocol version: until v5 has worked once, silence also means "use 3.1.1".
V5_PROBE_TIMEOUT_S = 5.0
_UNSUPPORTED_PROTOCOL_VERSION = 132  # CONNACK reason code (v5), also what paho maps v3 code 1 to


@dataclass(frozen=True)
class Message:
    topic: str
    payload: bytes
    retain: bool = False


@dataclass(frozen=True)
class Received:
    """A message as it arrived (this session's and deploy's clients both hand these out). An
    `on_receive` owner acknowledges it with `session.ack(mid, qos)`."""

    topic: str
    payload: bytes
    retain: bool = False
    mid: int = 0
    qos: int = 0

    @classmethod
    def of(cls, message: Any) -> "Received":
        """From a paho message."""
        return cls(message.topic, bytes(message.payload), bool(message.retain), message.mid, message.qos)


class MqttSession:
    def __init__(
        self,
        settings: BrokerSettings,
        client_id: str,
        *,
        before_connect: Callable[[], Message],
        on_connect: Callable[["MqttSession"], None],
        on_message: Optional[Callable[[str, bytes], None]],
        on_ack: Callable[[int, bool], None],
        on_tick: Callable[["MqttSession"], None],
        on_new_client: Callable[[], None],
        subscriptions: Sequence[str] = (),
        on_receive: Optional[Callable[[Received], None]] = None,
        backoff: Optional[Backoff] = None,
        session_expiry_s: int = SESSION_EXPIRY_S,
    ):
        """Hooks, all called on the session's own thread:

        before_connect() -> the Last Will for the next connection attempt;
        on_connect(session) after each accepted connection, subscriptions sent;
        on_message(topic, payload) per received message, acknowledged once it returns;
        on_receive(received), given instead of on_message, takes each message unacknowledged:
        its owner calls `ack(mid, qos)` later (e.g. once a batch is committed);
        on_ack(packet_id, accepted) per PUBACK;
        on_tick(session) every TICK_S while connected: the place to publish;
        on_new_client() after the paho client was replaced (protocol fallback), which drops
        the old client's unacknowledged messages.
        """
        self._mqtt = require("paho.mqtt.client", "agent", "talking to the MQTT broker")
        self.settings = settings
        self.client_id = client_id
        self._before_connect = before_connect
        self._on_connect = on_connect
        if (on_message is None) == (on_receive is None):
            raise ValueError("give exactly one of on_message and on_receive")
        self._on_message = on_message
        self._on_receive = on_receive
        self._on_ack = on_ack
        self._on_tick = on_tick
        self._on_new_client = on_new_client
        self._subscriptions = tuple(subscriptions)
        self._backoff = backoff or Backoff()
        self._session_expiry_s = session_expiry_s
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._connected = False
        self._refused_v5 = False
        self._v5_confirmed = False
        self._final: Optional[Message] = None
        self._final_mid: Optional[int] = None
        self._final_acked = False
        self._drained: Callable[[], bool] = lambda: True
        self._stop_timeout_s = 5.0
        self._tick_after = 0.0
        self.protocol = V5
        # Built here, on the caller's thread, so bad TLS files fail as a UserError at start-up.
        self._client = self._new_client()

    @property
    def connected(self) -> bool:
        return self._connected

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="edgeopt-mqtt", daemon=True)
        self._thread.start()

    def stop(
        self,
        final: Optional[Message] = None,
        drained: Callable[[], bool] = lambda: True,
        timeout_s: float = 5.0,
    ) -> None:
        """Leave cleanly: wait (bounded) until `drained()`, publish `final`, then disconnect.

        A normal DISCONNECT tells the broker not to publish the Last Will.
        """
        self._final, self._drained, self._stop_timeout_s = final, drained, timeout_s
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s + 5.0)
            if self._thread.is_alive():
                log.warning("MQTT thread did not finish within %.0f s", timeout_s + 5.0)

    def publish(self, topic: str, payload: bytes, retain: bool = False) -> int:
        """Publish at QoS 1 and return the packet id (call from the session's hooks only)."""
        return self._client.publish(topic, payload, qos=QOS, retain=retain).mid

    def ack(self, mid: int, qos: int) -> None:
        """Acknowledge a received message (network thread only; done after `on_message` by default)."""
        self._client.ack(mid, qos)

    # --- network thread -----------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self._open():
                    self._serve()
            except Exception:  # a bug or an odd socket error must not end the agent's only connection
                log.exception("MQTT session failed; reconnecting")
                self._connected = False
            if self._stop.is_set():
                break
            if self._refused_v5 and self.protocol == V5 and self._fall_back_to_v311():
                continue
            delay = self._backoff.next()
            log.info("reconnecting to %s in %.1f s", self.settings.address, delay)
            self._stop.wait(delay)
        self._close()

    def _fall_back_to_v311(self) -> bool:
        """Replace the client by an MQTT 3.1.1 one; False (v5 is tried again later) if that fails."""
        log.info("broker %s refused or did not answer MQTT v5; using MQTT 3.1.1", self.settings.address)
        self.protocol = V311  # what _new_client builds
        try:
            self._client.disconnect()  # closes the socket if the broker left it open
            self._client = self._new_client()
        except Exception:  # e.g. a TLS file gone since the start: keep the v5 client, retry after a pause
            log.exception("cannot set up an MQTT 3.1.1 client")
            self.protocol = V5
            return False
        self._refused_v5 = False
        self._on_new_client()
        return True

    def _open(self) -> bool:
        will = self._before_connect()
        self._client.will_set(will.topic, will.payload, qos=QOS, retain=will.retain)
        try:
            self._client.reconnect()
        except OSError as exc:  # refused, unreachable, DNS, TLS handshake (ssl.SSLError is an OSError)
            log.info("cannot reach broker %s: %s", self.settings.address, exc)
            return False
        return True

    def _serve(self) -> None:
        probing = self.protocol == V5 and not self._v5_confirmed
        connack_deadline = time.monotonic() + (V5_PROBE_TIMEOUT_S if probing else CONNACK_TIMEOUT_S)
        while not self._stop.is_set():
            was_connected = self._connected  # the disconnect callback clears it inside loop()
            rc = self._client.loop(timeout=TICK_S)
            if rc != self._mqtt.MQTT_ERR_SUCCESS:
                if was_connected:
                    log.warning("lost the connection to %s (%s)", self.settings.address, self._mqtt.error_string(rc))
                else:
                    log.debug("connection attempt ended: %s", self._mqtt.error_string(rc))
                self._connected = False
                return
            if self._connected:
                self._tick()
            elif self._refused_v5:
                return
            elif time.monotonic() > connack_deadline:
                if probing:
                    self._refused_v5 = True
                else:
                    log.warning("broker %s did not answer the MQTT CONNECT", self.settings.address)
                return

    def _tick(self) -> None:
        if time.monotonic() < self._tick_after:
            return
        try:
            self._on_tick(self)
        except Exception:  # the outbox is on disk: a failing disk must not take the connection down
            log.exception("sending from the outbox failed; trying again in 5 s")
            self._tick_after = time.monotonic() + 5.0

    def _close(self) -> None:
        deadline = time.monotonic() + self._stop_timeout_s
        client = self._client
        if self._connected:
            # Let what is in flight be acknowledged, so it is not sent twice after a restart.
            while self._connected and not self._drained() and time.monotonic() < deadline:
                client.loop(timeout=0.05)
            if self._final is not None and self._connected:
                self._final_mid = self.publish(self._final.topic, self._final.payload, self._final.retain)
                while self._connected and not self._final_acked and time.monotonic() < deadline:
                    client.loop(timeout=0.05)
                if not self._final_acked:
                    log.warning("broker did not acknowledge the final status before the shutdown deadline")
        client.disconnect()
        self._connected = False

    def _new_client(self) -> Any:
        mqtt = self._mqtt
        s = self.settings
        if self.protocol == V5:
            client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=self.client_id, protocol=mqtt.MQTTv5)
            configure_client(client, s)
            properties = require("paho.mqtt.properties", "agent").Properties(
                require("paho.mqtt.packettypes", "agent").PacketTypes.CONNECT
            )
            properties.SessionExpiryInterval = self._session_expiry_s
            client.connect_async(s.host, s.port, s.keepalive_s, clean_start=False, properties=properties)
        else:
            client = mqtt.Client(
                mqtt.CallbackAPIVersion.VERSION2, client_id=self.client_id, protocol=mqtt.MQTTv311, clean_session=False
            )
            configure_client(client, s)
            client.connect_async(s.host, s.port, s.keepalive_s)
        client.manual_ack_set(True)
        client.enable_logger(logging.getLogger("paho.mqtt"))
        client.on_connect = self._handle_connect
        client.on_disconnect = self._handle_disconnect
        client.on_message = self._handle_message
        client.on_publish = self._handle_publish
        return client

    def _handle_connect(self, client, userdata, flags, reason_code, properties) -> None:
        if reason_code.is_failure:
            if reason_code.value == _UNSUPPORTED_PROTOCOL_VERSION and self.protocol == V5:
                self._refused_v5 = True
            else:
                log.error("broker %s refused the connection: %s", self.settings.address, reason_code)
            return
        self._connected = True
        if self.protocol == V5:
            self._v5_confirmed = True
        self._backoff.reset()
        log.info("connected to %s (MQTT %s, session %s)", self.settings.address, self.protocol,
                 "resumed" if flags.session_present else "new")
        for name in self._subscriptions:
            client.subscribe(name, qos=QOS)
        self._on_connect(self)

    def _handle_disconnect(self, client, userdata, flags, reason_code, properties) -> None:
        self._connected = False

    def more_waiting(self) -> bool:
        """Whether another packet can be read right away (network thread only)."""
        sock = self._client.socket()
        if sock is None:
            return False
        pending = getattr(sock, "pending", None)  # bytes TLS has already decrypted
        if pending is not None and pending() > 0:
            return True
        try:
            readable, _, _ = select.select([sock], [], [], 0)
        except (OSError, ValueError):
            return False
        return bool(readable)

    def _handle_message(self, client, userdata, message) -> None:
        if self._on_receive is not None:
            self._on_receive(Received.of(message))
            return
        try:
            self._on_message(message.topic, message.payload)
        except Exception:
            # Not acknowledged: the broker delivers it again after the next reconnect.
            log.exception("could not store the message on %s; leaving it unacknowledged", message.topic)
            return
        self.ack(message.mid, message.qos)

    def _handle_publish(self, client, userdata, mid, reason_code, properties) -> None:
        accepted = not reason_code.is_failure
        if mid == self._final_mid:
            self._final_acked = accepted
            return
        self._on_ack(mid, accepted)
