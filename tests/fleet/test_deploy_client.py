"""Deploy's MQTT client is the MQTT session in its clean, short-lived form: what it raises, and
that it publishes and subscribes from the caller's thread and subscribes again after a reconnect."""
from __future__ import annotations

import socket
import threading

import pytest

from edgeopt.deploy.mqtt import HostClient
from edgeopt.errors import UserError
from edgeopt_agent.wire.broker import broker_settings

from harness import wait_until

pytest.importorskip("paho.mqtt.client")


class FakeBroker:
    """A TCP listener that reads the CONNECT and answers with `reply` (or nothing at all)."""

    def __init__(self, reply: bytes = b""):
        self.reply = reply
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(1)
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.done = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            conn.recv(1024)
            if self.reply:
                conn.sendall(self.reply)
            self.done.wait(10)

    def close(self) -> None:
        self.done.set()
        self.listener.close()


@pytest.mark.parametrize("reply, timeout_s, error", [
    (b"", 1, r"did not answer within 1 s"),
    (bytes([0x20, 0x02, 0x00, 0x05]), 5, r"refused the connection: Not authorized"),  # CONNACK code 5
], ids=["silent", "refusing"])
def test_a_broker_that_is_silent_or_refuses_is_a_user_error(reply, timeout_s, error):
    broker = FakeBroker(reply)
    client = HostClient(broker_settings(broker.address))
    try:
        with pytest.raises(UserError, match=error):
            client.connect(timeout_s=timeout_s)
    finally:
        client.close()
        broker.close()
    assert not client.connected


def test_the_client_publishes_and_subscribes_from_its_callers_thread_across_a_reconnect(mqtt_broker):
    client = HostClient(broker_settings(f"{mqtt_broker.host}:{mqtt_broker.port}"))
    client.connect()
    try:
        client.subscribe(["edgeopt-test/+/echo"])
        client.wait_acked(client.publish("edgeopt-test/a/echo", b"one"))
        assert client.receive(10).payload == b"one"
        mqtt_broker.stop()
        wait_until(lambda: not client.connected, "the client to notice the broker left")
        with pytest.raises(UserError, match="could not publish to the MQTT broker"):
            client.wait_acked(client.publish("edgeopt-test/a/echo", b"lost"), timeout_s=1)
        mqtt_broker.start()
        wait_until(lambda: client.connected, "the client to reconnect")
        # A clean session forgets subscriptions: the client made them again.
        client.wait_acked(client.publish("edgeopt-test/b/echo", b"two"))
        received = client.receive(10)
        while received is not None and received.payload != b"two":  # "lost" may be delivered after all
            received = client.receive(10)
        assert received is not None and received.topic == "edgeopt-test/b/echo"
    finally:
        client.close()
