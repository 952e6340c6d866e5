"""The collector against a real broker: simulated devices publish real protocol envelopes."""
import json
import sqlite3
import threading
import time
import uuid

import paho.mqtt.client as mqtt
import pytest
from harness import wait_until
from mqtt_broker import MqttBroker

from edgeopt.errors import UserError
from edgeopt.fleet.collector import Collector
from fleet_simulator import SimulatedDevice
from edgeopt.fleet.store import open_store
from edgeopt_agent import wire
from edgeopt_agent.wire.backoff import Backoff
from edgeopt_agent.wire.broker import BrokerSettings

pytestmark = pytest.mark.slow

WAIT_S = 20.0


def needs_offline_queueing(broker):
    if broker.kind == "amqtt":
        pytest.skip("amqtt (the embedded test broker) does not queue QoS 1 messages for an offline "
                    "persistent session; mosquitto does")


class Publisher:
    """A device-side MQTT client publishing prepared messages at QoS 1."""

    def __init__(self, broker):
        client_id = f"test-pub-{uuid.uuid4().hex[:8]}"
        if broker.mqtt_v5:
            self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5)
        else:
            self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv311)
        self.client.connect(broker.host, broker.port, 30)
        self.client.loop_start()

    def send(self, messages):
        infos = [self.client.publish(m.topic, m.payload, qos=1, retain=getattr(m, "retain", False)) for m in messages]
        for info in infos:
            info.wait_for_publish(WAIT_S)

    def raw(self, topic, payload):
        self.client.publish(topic, payload, qos=1).wait_for_publish(WAIT_S)

    def close(self):
        self.client.disconnect()
        self.client.loop_stop()


class Running:
    """A collector on its own thread, as `edgeopt fleet serve` runs it."""

    def __init__(self, store, broker, client_id, **kwargs):
        settings = BrokerSettings(broker.host, broker.port)
        self.collector = Collector(store, settings, client_id=client_id, backoff=Backoff(0.1, 0.5), **kwargs)
        self.stop = threading.Event()
        self.error = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        wait_until(lambda: self.collector.connected or self.error, what="the collector to connect")
        time.sleep(0.2)  # its SUBSCRIBE is on the wire right after CONNACK

    def _run(self):
        try:
            self.collector.run(self.stop, progress_interval_s=0.05)
        except UserError as exc:
            self.error = exc

    def close(self):
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive()


def start(closing, store, broker, client_id="test-collector", **kwargs):
    running = Running(store, broker, client_id, **kwargs)
    closing.append(running)
    return running


def publisher(closing, broker):
    pub = Publisher(broker)
    closing.append(pub)
    return pub


def test_status_telemetry_and_results_are_stored_duplicates_dropped_and_gaps_filled(mqtt_broker, tmp_path, closing):
    store = open_store(f"sqlite:///{tmp_path}/fleet.db")
    closing.append(store)
    running = start(closing, store, mqtt_broker)
    pub = publisher(closing, mqtt_broker)
    rpi, jetson = SimulatedDevice("rpi-01", profile="rpi4"), SimulatedDevice("jetson-01", profile="jetson-orin-nano")
    telemetry = [rpi.telemetry() for _ in range(5)]
    pub.send([rpi.status(), jetson.status()])
    pub.send([telemetry[i] for i in (0, 1, 3)])  # 3 is seq 4: seq 3 is missing for now
    pub.send([telemetry[1]])  # a redelivery: same message id
    pub.send([jetson.result("job-1", p50_ms=4.0, meta={"model": "digits", "artifact_key": "onnx-int8",
                                                      "format": "onnx", "precision": "int8",
                                                      "accuracy_drop_points": 0.3})])
    wait_until(lambda: running.collector.counters.stored == 6 and running.collector.counters.duplicate == 1,
               what="6 stored and 1 duplicate")
    assert [(g["first_missing_seq"], g["filled"]) for g in store.gaps()] == [(3, False)]

    pub.send([telemetry[2], telemetry[4]])  # the late one, then the next
    wait_until(lambda: running.collector.counters.stored == 8, what="8 stored")
    assert [(g["first_missing_seq"], g["filled"]) for g in store.gaps()] == [(3, True)]
    assert [r["seq"] for r in store.telemetry(device="rpi-01")] == [1, 2, 3, 4, 5]
    devices = {d["device_id"]: d for d in store.devices()}
    assert devices["rpi-01"]["state"] == devices["jetson-01"]["state"] == "online"
    assert devices["rpi-01"]["profile"] == "rpi4" and devices["rpi-01"]["temperature_c"] is not None
    [result] = store.results()
    assert (result["device_id"], result["model"], result["p50_ms"], result["accuracy_drop_points"]) == (
        "jetson-01", "digits", 4.0, 0.3)
    counters = running.collector.counters
    assert (counters.new_gaps, counters.missing, counters.filled, counters.rejected) == (1, 1, 1, 0)


def test_every_kind_of_bad_message_is_rejected_and_the_collector_carries_on(mqtt_broker, tmp_path, closing):
    store = open_store(f"sqlite:///{tmp_path}/fleet.db", max_message_bytes=64 * 1024)
    closing.append(store)
    running = start(closing, store, mqtt_broker)
    pub = publisher(closing, mqtt_broker)
    device = SimulatedDevice("rpi-01")
    sent = device.telemetry()
    good = json.loads(sent.payload)
    topic = wire.telemetry_topic("rpi-01")
    pub.raw(topic, b"{not json")
    pub.raw(topic, json.dumps({**good, "device_id": "rpi-99"}).encode())
    pub.raw(topic, json.dumps({**good, "schema": 7}).encode())
    pub.raw(topic, json.dumps({**good, "body": {**good["body"], "pad": "x" * 70_000}}).encode())
    # The board's own message with a bad body (signed by it), and someone's altered copy of one (not).
    pub.raw(wire.results_topic("rpi-01"), sent.changed({**good, "type": "result", "body": {"ok": 1}}))
    pub.raw(topic, json.dumps({**good, "seq": 9}).encode())
    pub.raw(wire.jobs_topic("rpi-01"), b"jobs are not collected")  # not subscribed: never seen
    pub.send([device.telemetry()])
    wait_until(lambda: running.collector.counters.stored == 1, what="the good message")
    assert running.collector.counters.rejected == 6
    assert store.stats()["rejected"] == {"malformed_message": 1, "wrong_device": 1, "unsupported_schema": 1,
                                         "oversized": 1, "invalid_body": 1, "signature_invalid": 1}
    assert [r["seq"] for r in store.telemetry()] == [2]
    assert running.thread.is_alive()


def test_values_the_database_cannot_hold_cost_one_message_not_the_collector(mqtt_broker, tmp_path, closing):
    store = open_store(f"sqlite:///{tmp_path}/fleet.db")
    closing.append(store)
    running = start(closing, store, mqtt_broker)
    pub = publisher(closing, mqtt_broker)
    device = SimulatedDevice("rpi-01")
    first = device.telemetry()
    huge_seq = json.loads(first.payload)
    huge_seq["seq"] = 2 ** 64
    status = device.status()
    odd_text = json.loads(status.payload)
    odd_text["body"]["reason"] = "lost\ud800\x00"
    topic = wire.telemetry_topic("rpi-01")
    pub.raw(topic, first.changed(huge_seq))  # what the board itself sent: signed
    pub.raw(wire.status_topic("rpi-01"), status.changed(odd_text))
    pub.raw(topic, b"[" * 5000)
    pub.send([device.telemetry()])
    wait_until(lambda: running.collector.counters.stored == 2, what="the storable messages")
    assert running.collector.counters.rejected == 2 and running.collector.counters.failed_commits == 0
    assert store.devices()[0]["state_reason"] == "lost" and [r["seq"] for r in store.telemetry()] == [2]
    assert running.thread.is_alive()


def test_messages_sent_while_the_collector_is_down_arrive_when_it_returns(mqtt_broker, tmp_path, closing):
    needs_offline_queueing(mqtt_broker)
    url = f"sqlite:///{tmp_path}/fleet.db"
    store = open_store(url)
    closing.append(store)
    first = start(closing, store, mqtt_broker, client_id="collector-a")
    pub = publisher(closing, mqtt_broker)
    devices = [SimulatedDevice(f"dev-{i}") for i in range(5)]
    pub.send([d.telemetry() for d in devices])
    wait_until(lambda: first.collector.counters.stored == 5, what="the first messages")
    first.close()

    burst = [d.telemetry() for _ in range(100) for d in devices]
    pub.send(burst)  # the broker holds these for the collector's persistent session
    assert len(store.telemetry()) == 5

    second = start(closing, store, mqtt_broker, client_id="collector-a")
    wait_until(lambda: second.collector.counters.stored == len(burst), what="the burst")
    for device in devices:
        assert [r["seq"] for r in store.telemetry(device=device.device_id, limit=1000)] == list(range(1, 102))
    assert store.gaps() == [] and store.stats()["totals"]["duplicate"] == 0


class FailingStore:
    """The real store, except that writes fail while `broken` is set (a full or failing disk)."""

    def __init__(self, store):
        self._store = store
        self.broken = threading.Event()
        self.failures = 0

    def ingest_many(self, batch, received_at=None):
        if self.broken.is_set():
            self.failures += 1
            raise sqlite3.OperationalError("disk I/O error")
        return self._store.ingest_many(batch, received_at)

    def __getattr__(self, name):
        return getattr(self._store, name)


def test_a_failed_commit_is_retried_and_nothing_is_acknowledged_before_it(mqtt_broker, tmp_path, closing):
    store = open_store(f"sqlite:///{tmp_path}/fleet.db")
    closing.append(store)
    failing = FailingStore(store)
    failing.broken.set()
    running = start(closing, failing, mqtt_broker)
    pub = publisher(closing, mqtt_broker)
    device = SimulatedDevice("rpi-01")
    pub.send([device.telemetry() for _ in range(10)])
    wait_until(lambda: failing.failures >= 2, what="failed commits")
    assert store.telemetry() == [] and running.collector.counters.last_error.endswith("disk I/O error")

    failing.broken.clear()
    wait_until(lambda: running.collector.counters.stored == 10, what="the retried batch")
    assert [r["seq"] for r in store.telemetry()] == list(range(1, 11))


def test_messages_a_collector_could_not_store_before_it_stopped_come_back_to_the_next_one(
        mqtt_broker, tmp_path, closing):
    needs_offline_queueing(mqtt_broker)
    store = open_store(f"sqlite:///{tmp_path}/fleet.db")
    closing.append(store)
    failing = FailingStore(store)
    failing.broken.set()
    first = Running(failing, mqtt_broker, "collector-b", shutdown_timeout_s=0.5)
    pub = publisher(closing, mqtt_broker)
    device = SimulatedDevice("rpi-01")
    pub.send([device.telemetry() for _ in range(10)])
    wait_until(lambda: failing.failures >= 1, what="a failed commit")
    first.close()  # gives up: nothing stored, so nothing acknowledged
    assert store.telemetry() == []

    second = start(closing, store, mqtt_broker, client_id="collector-b")
    wait_until(lambda: second.collector.counters.stored == 10, what="the redelivered messages")
    assert [r["seq"] for r in store.telemetry()] == list(range(1, 11))


def test_two_collectors_in_a_share_group_split_the_messages_and_store_each_once(mqtt_broker, tmp_path, closing):
    if not mqtt_broker.mqtt_v5:
        pytest.skip("shared subscriptions need an MQTT v5 broker; the test broker is amqtt (3.1.1 only)")
    url = f"sqlite:///{tmp_path}/fleet.db"
    stores = [open_store(url), open_store(url)]
    closing.extend(stores)
    collectors = [start(closing, s, mqtt_broker, client_id=f"shared-{i}", shared_group="g1")
                  for i, s in enumerate(stores)]
    pub = publisher(closing, mqtt_broker)
    devices = [SimulatedDevice(f"dev-{i}") for i in range(10)]
    messages = [d.telemetry() for _ in range(40) for d in devices]
    pub.send(messages)
    total = lambda: sum(c.collector.counters.stored for c in collectors)  # noqa: E731
    wait_until(lambda: total() == len(messages), what="all messages")
    assert all(c.collector.counters.stored > 0 for c in collectors)
    stats = stores[0].stats()
    assert stats["stored"] == {"telemetry": len(messages)} and stats["totals"]["duplicate"] == 0
    assert stores[0].gaps(open_only=True) == []  # reordering between the two is filled in, not lost


def test_a_shared_subscription_on_a_broker_without_mqtt_v5_is_refused(tmp_path, closing):
    broker = MqttBroker(tmp_path / "broker", kind="amqtt").start()
    closing.append(type("Stopper", (), {"close": lambda self: broker.stop()})())
    store = open_store(f"sqlite:///{tmp_path}/fleet.db")
    closing.append(store)
    running = Running(store, broker, "shared-old", shared_group="g1")
    running.thread.join(30)
    assert isinstance(running.error, UserError) and "needs MQTT v5" in str(running.error)
