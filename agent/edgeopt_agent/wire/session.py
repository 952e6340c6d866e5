"""One MQTT connection that stays up: connect, fall back from v5 to 3.1.1, reconnect with back-off.

The one paho client wrapper of the code base: the agent, the collector and deploy each drive one.
This session's own thread does all of paho's socket work and runs every paho callback; the
hooks (`on_connect`, `on_tick`) publish there. Other threads may `send`, `subscribe` and wait
for the broker's answer (deploy does): paho queues their packets and the session's thread
writes them.

A persistent session (MQTT v5 clean start off with a session expiry, 3.1.1 clean session off)
keeps jobs sent while the board is away at the broker, and acknowledges an incoming message
only after `on_message` returned, i.e. after the agent stored it. A clean session (deploy) is
short-lived: MQTT 3.1.1, which every broker serves, messages acknowledged as they arrive.
"""
from __future__ import annotations

import logging
import select
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence

from ..errors import UserError, require
from .backoff import Backoff
from .broker import CONNECT_TIMEOUT_S, BrokerSettings, configure_client

log = logging.getLogger(__name__)

V5 = "5"
V311 = "3.1.1"
QOS = 1
SESSION_EXPIRY_S = 7 * 24 * 3600
TICK_S = 0.25
CONNACK_TIMEOUT_S = 30.0
ACK_TIMEOUT_S = 30.0  # for a SUBACK or PUBACK someone waits for
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


class BrokerUnreachable(UserError):
    """No connection to the broker could be opened (refused, unreachable, DNS, TLS handshake)."""


def _nothing(*args: Any) -> None:
    pass


class MqttSession:
    def __init__(
        self,
        settings: BrokerSettings,
        client_id: str,
        *,
        on_message: Optional[Callable[[str, bytes], None]] = None,
        before_connect: Optional[Callable[[], Message]] = None,
        on_connect: Optional[Callable[["MqttSession"], None]] = None,
        on_ack: Optional[Callable[[int, bool], None]] = None,
        on_tick: Optional[Callable[["MqttSession"], None]] = None,
        on_new_client: Optional[Callable[[], None]] = None,
        subscriptions: Sequence[str] = (),
        on_receive: Optional[Callable[[Received], None]] = None,
        backoff: Optional[Backoff] = None,
        session_expiry_s: int = SESSION_EXPIRY_S,
        clean: bool = False,
        quiet: bool = False,
    ):
        """Hooks, all called on the session's own thread (give one of the first two; the rest may be left out):

        on_message(topic, payload) per received message, acknowledged once it returns;
        on_receive(received), given instead of on_message, takes each message unacknowledged:
        its owner calls `ack(mid, qos)` later (e.g. once a batch is committed); a clean
        session acknowledges it on arrival;
        before_connect() -> the Last Will for the next connection attempt (none without it);
        on_connect(session) after each accepted connection, subscriptions sent;
        on_ack(packet_id, accepted) per PUBACK;
        on_tick(session) every TICK_S while connected: the place to publish;
        on_new_client() after the paho client was replaced (protocol fallback), which drops
        the old client's unacknowledged messages.

        `clean`: a short-lived MQTT 3.1.1 clean session instead of a persistent one. `quiet`:
        paho's own log lines only with DEBUG on, for an owner that gets every failure as an error.
        """
        self._mqtt = require("paho.mqtt.client", "agent", "talking to the MQTT broker")
        self.settings = settings
        self.client_id = client_id
        self._before_connect = before_connect
        self._on_connect = on_connect or _nothing
        if (on_message is None) == (on_receive is None):
            raise ValueError("give exactly one of on_message and on_receive")
        self._on_message = on_message
        self._on_receive = on_receive
        self._on_ack = on_ack or _nothing
        self._on_tick = on_tick or _nothing
        self._on_new_client = on_new_client or _nothing
        self._subscriptions = tuple(subscriptions)
        self._backoff = backoff or Backoff()
        self._session_expiry_s = session_expiry_s
        self._clean = clean
        self._quiet = quiet
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._connected = False
        self._ever_connected = False
        self._give_up_unless_accepted = False  # connect(): the first attempt is the caller's to judge
        self._changed = threading.Condition()  # the connection's state, SUBACKs: for waiting threads
        self._refusal: Optional[str] = None  # why the broker did not accept this attempt
        self._last_error: Optional[str] = None  # paho's last error line: why a TLS connection died
        self._subscribe_waiters = 0
        self._subacks: Dict[int, List[str]] = {}  # packet id -> refusal reasons (empty: granted)
        self._refused_v5 = False
        self._v5_confirmed = False
        self._final: Optional[Message] = None
        self._final_mid: Optional[int] = None
        self._final_acked = False
        self._drained: Callable[[], bool] = lambda: True
        self._stop_timeout_s = 5.0
        self._tick_after = 0.0
        self.protocol = V311 if clean else V5
        # Built here, on the caller's thread, so bad TLS files fail as a UserError at start-up.
        self._client = self._new_client()

    @property
    def connected(self) -> bool:
        return self._connected

    def start(self) -> None:
        """Connect and serve on the session's own thread, reconnecting with back-off until `stop`."""
        self._start(dialed=False)

    def connect(self, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
        """Connect on the caller's thread and wait until the broker accepted, then serve like `start`.

        BrokerUnreachable if no connection opens, a UserError if the broker refuses, closes the
        connection or stays silent; the session is over then. Once accepted, a lost connection
        is made again with back-off.
        """
        address = self.settings.address
        self._give_up_unless_accepted = True
        try:
            self._dial()
        except OSError as exc:  # refused, unreachable, DNS, TLS handshake
            raise BrokerUnreachable(f"cannot reach the MQTT broker at {address}: {exc}") from None
        self._start(dialed=True)
        with self._changed:
            answered = self._changed.wait_for(lambda: self._connected or self._refusal is not None, timeout_s)
            refusal = self._refusal
        if self._connected:
            return
        self.stop(timeout_s=0.0)
        if not answered:
            raise UserError(f"the MQTT broker at {address} did not answer within {timeout_s:.0f} s")
        hint = ("; if the broker wants a client certificate, pass --tls-cert and --tls-key"
                if self.settings.tls and not self.settings.tls_cert else "")
        raise UserError(f"the MQTT broker at {address} refused the connection: {refusal}{hint}")

    def _start(self, dialed: bool) -> None:
        self._thread = threading.Thread(target=self._run, args=(dialed,), name="edgeopt-mqtt", daemon=True)
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
        """Publish at QoS 1 and return the packet id, which `on_ack` reports on."""
        return self.send(topic, payload, retain).mid

    def send(self, topic: str, payload: bytes, retain: bool = False) -> Any:
        """Publish at QoS 1 from any thread; returns paho's message info, for `wait_published`."""
        return self._client.publish(topic, payload, qos=QOS, retain=retain)

    def wait_published(self, info: Any, timeout_s: float = ACK_TIMEOUT_S) -> None:
        """Wait until the broker acknowledged a message `send` returned; UserError if it did not."""
        address = self.settings.address
        try:
            info.wait_for_publish(timeout_s)
        except (RuntimeError, ValueError) as exc:
            raise UserError(f"could not publish to the MQTT broker at {address}: {exc}") from None
        if not info.is_published():
            raise UserError(f"the MQTT broker at {address} did not acknowledge a message within {timeout_s:.0f} s")

    def subscribe(self, filters: Sequence[str], timeout_s: float = ACK_TIMEOUT_S) -> None:
        """Subscribe at QoS 1 from a thread of the caller's, now and after every reconnect, and
        wait until the broker confirmed it; UserError if it refuses or does not answer."""
        address = self.settings.address
        self._subscriptions = self._subscriptions + tuple(filters)
        with self._changed:
            self._subscribe_waiters += 1
        try:
            rc, mid = self._client.subscribe([(name, QOS) for name in filters])
            if rc != self._mqtt.MQTT_ERR_SUCCESS:
                raise UserError(f"lost the connection to the MQTT broker at {address}")
            with self._changed:
                if not self._changed.wait_for(lambda: mid in self._subacks, timeout_s):
                    raise UserError(f"the MQTT broker at {address} did not confirm the subscription "
                                    f"within {timeout_s:.0f} s")
                refused = self._subacks.pop(mid)
        finally:
            with self._changed:
                self._subscribe_waiters -= 1
        if refused:
            raise UserError(f"the MQTT broker at {address} refused to subscribe to {', '.join(filters)}: "
                            f"{', '.join(refused)}; check the broker's ACL for this user")

    def ack(self, mid: int, qos: int) -> None:
        """Acknowledge a received message (network thread only; done after `on_message` by default)."""
        self._client.ack(mid, qos)

    # --- network thread -----------------------------------------------------------------------

    def _run(self, dialed: bool) -> None:
        while not self._stop.is_set():
            try:
                if dialed or self._open():
                    self._serve()
            except Exception:  # a bug or an odd socket error must not end the agent's only connection
                log.exception("MQTT session failed; reconnecting")
                self._set_connected(False)
            dialed = False
            if self._stop.is_set():
                break
            if self._refused_v5 and self.protocol == V5 and self._fall_back_to_v311():
                continue
            if self._give_up_unless_accepted and not self._ever_connected:
                break
            delay = self._backoff.next()
            log.info("reconnecting to %s in %.1f s", self.settings.address, delay)
            self._stop.wait(delay)
        self._close()

    def _fall_back_to_v311(self) -> bool:
        """Replace the client by an MQTT 3.1.1 one; False (v5 is tried again later) if that fails."""
        log.info("broker %s refused or did not answer MQTT v5; using MQTT 3.1.1", self.settings.address)
        self.protocol = V311  # what _new_client builds
        try:
            self._disconnect()  # closes the socket if the broker left it open
            self._client = self._new_client()
        except Exception:  # e.g. a TLS file gone since the start: keep the v5 client, retry after a pause
            log.exception("cannot set up an MQTT 3.1.1 client")
            self.protocol = V5
            return False
        self._refused_v5 = False
        self._on_new_client()
        return True

    def _open(self) -> bool:
        try:
            self._dial()
        except OSError as exc:  # refused, unreachable, DNS, TLS handshake (ssl.SSLError is an OSError)
            log.info("cannot reach broker %s: %s", self.settings.address, exc)
            return False
        return True

    def _dial(self) -> None:
        """Open the connection and queue the CONNECT (the session's thread sends it)."""
        if self._before_connect is not None:
            will = self._before_connect()
            self._client.will_set(will.topic, will.payload, qos=QOS, retain=will.retain)
        with self._changed:
            self._refusal = None
        self._client.reconnect()

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
                    self._refused("it closed the connection before accepting it"
                                  + (f" ({self._last_error})" if self._last_error else ""))
                self._set_connected(False)
                return
            if self._connected:
                self._tick()
            elif self._refused_v5 or self._refusal is not None:
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
        self._disconnect()
        self._set_connected(False)

    def _disconnect(self) -> None:
        """A normal DISCONNECT, written now: nothing else writes the session's packets any more."""
        self._client.disconnect()
        self._client.loop_write()

    def _new_client(self) -> Any:
        mqtt = self._mqtt
        s = self.settings
        if self._clean:
            client = mqtt.Client(
                mqtt.CallbackAPIVersion.VERSION2, client_id=self.client_id, protocol=mqtt.MQTTv311, clean_session=True
            )
            configure_client(client, s)
            client.connect_async(s.host, s.port, s.keepalive_s)
        elif self.protocol == V5:
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
        client.manual_ack_set(not self._clean)
        paho_log = logging.getLogger("paho.mqtt")
        if not self._quiet or paho_log.isEnabledFor(logging.DEBUG):  # packet traces with -v
            client.enable_logger(paho_log)
        client.on_log = self._handle_log
        client.on_connect = self._handle_connect
        client.on_disconnect = self._handle_disconnect
        client.on_message = self._handle_message
        client.on_publish = self._handle_publish
        client.on_subscribe = self._handle_subscribe
        # Only the session's thread touches the socket: packets queued on another thread (send,
        # subscribe) wake its loop instead of being written there, concurrently with it.
        client.on_socket_register_write = _nothing
        return client

    def _set_connected(self, connected: bool) -> None:
        with self._changed:
            self._connected = connected
            self._ever_connected = self._ever_connected or connected
            self._changed.notify_all()

    def _refused(self, reason: str) -> None:
        with self._changed:
            if self._refusal is None and not self._refused_v5:
                self._refusal = reason
            self._changed.notify_all()

    def _handle_log(self, client, userdata, level, text) -> None:
        if level == self._mqtt.MQTT_LOG_ERR:
            self._last_error = text

    def _handle_connect(self, client, userdata, flags, reason_code, properties) -> None:
        if reason_code.is_failure:
            if reason_code.value == _UNSUPPORTED_PROTOCOL_VERSION and self.protocol == V5:
                self._refused_v5 = True
            elif not self._give_up_unless_accepted:  # else connect() raises it
                log.error("broker %s refused the connection: %s", self.settings.address, reason_code)
            self._refused(str(reason_code))
            return
        self._set_connected(True)
        if self.protocol == V5:
            self._v5_confirmed = True
        self._backoff.reset()
        log.info("connected to %s (MQTT %s, session %s)", self.settings.address, self.protocol,
                 "resumed" if flags.session_present else "new")
        for name in self._subscriptions:
            client.subscribe(name, qos=QOS)
        self._on_connect(self)

    def _handle_disconnect(self, client, userdata, flags, reason_code, properties) -> None:
        self._set_connected(False)

    def _handle_subscribe(self, client, userdata, mid, reason_codes, properties) -> None:
        with self._changed:
            if self._subscribe_waiters:  # else: a re-subscription after a reconnect
                self._subacks[mid] = [str(code) for code in reason_codes if code.is_failure]
                self._changed.notify_all()

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
