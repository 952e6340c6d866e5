"""What the collector tells a device after a commit: the messages it committed (stored now or
already stored) and those it rejected for good, each named by id and the sha256 of the bytes it
had, so the agent forgets exactly those and only when the bytes were its own."""
import json
import threading
import time
import uuid

import paho.mqtt.client as mqtt
import pytest

from edgeopt.fleet.collector import Collector, confirmations
from fleet_simulator import SimulatedDevice
from edgeopt.fleet.store import open_store
from edgeopt.fleet.writer import DUPLICATE, REJECTED, STORED, IngestOutcome
from edgeopt_agent import wire
from edgeopt_agent.wire.backoff import Backoff
from edgeopt_agent.wire.broker import BrokerSettings
from edgeopt_agent.wire import ProtocolError

A, B = "a" * 32, "b" * 32
DA, DB = "1" * 64, "2" * 64  # digests of the bytes received


def outcome(status, device="dev-1", message_id=A, kind=wire.RESULTS, reason=None, digest=DA):
    return IngestOutcome(status, reason=reason, kind=None if status == REJECTED else kind, device_id=device,
                         message_id=message_id, digest=digest)


def test_stored_and_duplicate_are_committed_rejected_say_why_and_status_is_left_out():
    found = confirmations([
        outcome(STORED), outcome(DUPLICATE, message_id=B, digest=DB), outcome(DUPLICATE),  # A twice in one batch
        outcome(REJECTED, message_id="c" * 32, reason="invalid_body"),
        outcome(REJECTED, message_id=A, reason="conflict", digest=DB),  # someone's other bytes under A
        outcome(STORED, device="dev-2", message_id="d" * 32, kind=wire.TELEMETRY),
        outcome(STORED, device="dev-2", message_id="e" * 32, kind=wire.STATUS),  # sent directly, not queued
        outcome(REJECTED, device=None, message_id="f" * 32, reason="invalid_topic"),  # nobody to tell
        outcome(REJECTED, message_id="not-an-id", reason="malformed_message"),
        outcome(REJECTED, message_id="9" * 32, reason="malformed_message", digest=None),
        # Who sent these is unknown: never confirmed, so the board keeps its own bytes and sends them again.
        *(outcome(REJECTED, message_id=B, reason=reason)
          for reason in ("unsigned_message", "signature_invalid", "key_changed")),
    ])
    assert found == {"dev-1": ([(A, DA), (B, DB)], [("c" * 32, DA, "invalid_body"), (A, DB, "conflict")]),
                     "dev-2": ([("d" * 32, DA)], [])}


def test_a_confirm_message_round_trips_and_is_checked():
    envelope = wire.confirm_message("rpi-01", 7, committed=[(A, DA)], rejected=[(B, DB, "unsupported_schema")])
    assert envelope.body == {"committed": [{"id": A, "digest": DA}],
                             "rejected": [{"id": B, "digest": DB, "reason": "unsupported_schema"}]}
    decoded = wire.parse_confirm(wire.Envelope.decode(envelope.encode(), expect_device="rpi-01"))
    assert decoded.committed == ((A, DA),) and decoded.rejected == ((B, DB, "unsupported_schema"),)
    assert decoded.deliveries == ((A, DA), (B, DB))
    assert wire.parse_topic(wire.confirm_topic("rpi-01")) == ("rpi-01", wire.CONFIRM)
    with pytest.raises(ValueError, match="at most"):
        wire.confirm_message("rpi-01", 1, committed=[(A, DA)] * (wire.MAX_CONFIRM_IDS + 1))


@pytest.mark.parametrize("body", [
    {"committed": [{"id": A, "digest": DA}]},
    {"committed": [A], "rejected": []},  # ids alone: the form before digests
    {"committed": [{"id": "A" * 32, "digest": DA}], "rejected": []},
    {"committed": [{"id": A, "digest": "x" * 64}], "rejected": []},
    {"committed": [{"id": A}], "rejected": []},
    {"committed": [{"id": A, "digest": DA, "more": 1}], "rejected": []},
    {"committed": [], "rejected": [{"id": A, "digest": DA}]},
    {"committed": [], "rejected": [{"id": A, "digest": DA, "reason": 3}]},
    {"committed": [], "rejected": [{"id": A, "reason": "x"}]},
    {"committed": "abc", "rejected": []},
    {"committed": [{"id": A, "digest": DA}] * (wire.MAX_CONFIRM_IDS + 1), "rejected": []},
])
def test_broken_confirm_bodies_are_refused(body):
    with pytest.raises(ProtocolError):
        wire.parse_confirm(wire.Envelope(device_id="rpi-01", seq=1, type="confirm", body=body))
    with pytest.raises(ProtocolError, match="on a confirm topic"):
        wire.parse_confirm(wire.Envelope(device_id="rpi-01", seq=1, type="result", body={}))


@pytest.mark.slow
def test_the_collector_confirms_after_the_commit_including_duplicates_and_rejections(mqtt_broker, tmp_path):
    device = SimulatedDevice("confirm-dev")
    good, status = device.result("job-1"), device.status()
    bad_envelope = wire.Envelope(device_id="confirm-dev", seq=9, type=wire.RESULT_TYPE, body={"job_id": "x"})
    bad = device.key.encode(bad_envelope)  # the board's own, signed, with a body the collector refuses
    store = open_store(f"sqlite:///{tmp_path}/fleet.db")
    collector = Collector(store, BrokerSettings(mqtt_broker.host, mqtt_broker.port), client_id="confirming",
                          backoff=Backoff(0.1, 0.5))
    stop = threading.Event()
    thread = threading.Thread(target=collector.run, args=(stop,), daemon=True)
    thread.start()
    confirms, arrived = [], threading.Event()

    def on_message(client, userdata, message):
        confirms.append(wire.parse_confirm(wire.Envelope.decode(message.payload, "confirm-dev")))
        arrived.set()

    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"device-{uuid.uuid4().hex[:6]}",
                         protocol=mqtt.MQTTv5 if mqtt_broker.mqtt_v5 else mqtt.MQTTv311)
    client.on_message = on_message
    client.connect(mqtt_broker.host, mqtt_broker.port, 30)
    client.subscribe(wire.confirm_topic("confirm-dev"), qos=1)
    client.loop_start()
    try:
        deadline = time.monotonic() + 20
        while not collector.connected:
            assert time.monotonic() < deadline, "the collector did not connect"
            time.sleep(0.02)
        time.sleep(0.3)  # both SUBSCRIBEs are through
        for message in (good, status, good):
            client.publish(message.topic, message.payload, qos=1).wait_for_publish(10)
        client.publish(wire.results_topic("confirm-dev"), bad, qos=1).wait_for_publish(10)
        deadline = time.monotonic() + 20
        while sum(len(c.deliveries) for c in confirms) < 3:
            assert arrived.wait(max(0.0, deadline - time.monotonic())), f"confirms so far: {confirms}"
            arrived.clear()
        good_id = json.loads(good.payload)["id"]
        digest = wire.message_digest(good.payload)
        assert sorted(c for each in confirms for c in each.committed) == [(good_id, digest)] * 2  # stored, duplicate
        assert [c.rejected for c in confirms if c.rejected] == [
            ((bad_envelope.id, wire.message_digest(bad), "invalid_body"),)]
        assert collector.counters.confirmed == 3 and collector.counters.stored == 2
        with store.db.transaction(write=False) as tx:  # committed before it was confirmed
            assert tx.one("SELECT COUNT(*) AS n FROM messages WHERE id = ?", (good_id,))["n"] == 1
    finally:
        client.loop_stop()
        client.disconnect()
        stop.set()
        thread.join(20)
        store.close()
