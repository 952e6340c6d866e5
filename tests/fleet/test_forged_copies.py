"""The genuine collector as a confused deputy (issue 38, item 2), on an open broker.

Anyone may publish on `edgeopt/v1/<device>/results` of a broker without an ACL. An attacker who
reads a board's results publishes copies with the same message ids:

- with a broken body: the collector rejects them, and used to *sign* a confirm listing those ids,
  so the board forgot its real results (it forgets by id);
- with altered numbers: the collector used to store them as the board's, and the real ones that
  came later were "duplicates".

Measured on the code before device keys (same scenario, 200 results): broken copies lost 181 of
200 genuine results; altered copies replaced all 200 (200 lost, 200 stored with the attacker's
numbers). Now each copy is refused (its signature does not hold, it has none, or it is signed by
another key than the board's pinned one), a refusal of unknown origin is never confirmed, and a
confirm names the digest of the bytes it is about, so the board loses none.

The scenario is deterministic: the board's results reach only the attacker (no collector is
subscribed yet; the broker drops them for nobody), the board stops with its results queued, the
collector starts (it learns the board from its retained status), the attacker publishes its
copies, and the board comes back to the confirms the broker queued for it. Real Mosquitto, the
real Agent and Collector, the fleet key and a certified collector key (so the confirms are signed
and the agent acts on them).
"""
from __future__ import annotations

import json
import time
import uuid

import paho.mqtt.client as mqtt
import pytest
from harness import Threaded, running_agent, wait_until

pytest.importorskip("cryptography", reason="signed confirmations need the cryptography package (fleet extra)")

from edgeopt.deploy import init_keys  # noqa: E402
from edgeopt.deploy.collector_keys import CollectorKey  # noqa: E402
from edgeopt.deploy.keys import SigningKey  # noqa: E402
from edgeopt.fleet.collector import Collector  # noqa: E402
from edgeopt.fleet.store import open_store  # noqa: E402
from edgeopt_agent import wire  # noqa: E402
from edgeopt_agent.message_signing import DeviceKey  # noqa: E402
from edgeopt_agent.wire.backoff import Backoff  # noqa: E402
from edgeopt_agent.wire.broker import BrokerSettings  # noqa: E402

pytestmark = pytest.mark.slow

DEVICE = "forge-dev"
COUNT = 200
WAIT_S = 60.0


class Attacker:
    """Anyone on the open broker: reads the board's results, publishes copies of them."""

    def __init__(self, broker):
        self.genuine = {}  # message id -> payload, as the board sent it
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"attacker-{uuid.uuid4().hex[:6]}",
                                  protocol=mqtt.MQTTv5 if broker.mqtt_v5 else mqtt.MQTTv311)
        self.client.on_message = self._read
        self.client.connect(broker.host, broker.port, 30)
        self.client.loop_start()
        wait_until(lambda: self.client.is_connected(), "the attacker to connect")
        self.client.subscribe(wire.results_topic(DEVICE), qos=1)
        time.sleep(0.3)  # the SUBSCRIBE is through

    def _read(self, client, userdata, message):
        self.genuine.setdefault(json.loads(message.payload)["id"], bytes(message.payload))

    def publish(self, payloads):
        infos = [self.client.publish(wire.results_topic(DEVICE), payload, qos=1) for payload in payloads]
        for info in infos:
            info.wait_for_publish(10)

    def close(self):
        self.client.loop_stop()
        self.client.disconnect()


def forged_copy(payload: bytes, how: str, signature: str, attacker_key=None) -> bytes:
    """The board's message with the same id but another body; its signature (where it has one) left as
    it was, stripped, or replaced by the attacker's own."""
    data = json.loads(payload)
    if how == "broken":
        data["body"] = {"broken": True}
    else:
        data["body"]["result"]["latency_ms"]["p50"] = 999.0
    if signature == "stripped":
        data.pop("sig", None)
    if signature == "own key":
        return attacker_key.sign_payload(json.dumps(data).encode())
    return json.dumps(data, separators=(",", ":")).encode()


def start_agent(tmp_path, broker, trusted_key):
    # No copy is sent again while the scenario runs: what it measures is what the confirms make the board forget.
    return running_agent([], broker, tmp_path / "agent", DEVICE, timeout=WAIT_S, trusted_key=str(trusted_key),
                         confirm_timeout=3600.0)


def produce(agent, count):
    for n in range(count):
        body = wire.result_body(f"job-{n}", wire.BENCHMARK_JOB, uuid.uuid4().hex,
                                result={"ok": True, "latency_ms": {"p50": 1.0 + n}})
        agent.outbox.add(wire.RESULTS, wire.RESULT_TYPE, body)


def outbox_ids(agent):
    return {message.message_id for message in agent.outbox.pending(limit=10 * COUNT)}


@pytest.fixture
def broker(mqtt_broker):
    if mqtt_broker.kind != "mosquitto":
        pytest.skip("needs mosquitto: the scenario queues confirms for the stopped board's persistent session")
    return mqtt_broker


@pytest.mark.parametrize("how, signature", [("broken", "kept"), ("altered", "kept"), ("broken", "stripped"),
                                            ("altered", "own key")])
def test_copies_of_a_boards_results_make_it_lose_nothing_and_are_never_stored(broker, tmp_path, how, signature):
    folder = tmp_path / "keys"
    fleet = init_keys(folder)
    collector_key = CollectorKey.ephemeral(SigningKey.load(fleet.private_key), "collector-1")
    attacker = Attacker(broker)
    store = open_store(f"sqlite:///{tmp_path}/fleet.db")
    started = []
    try:
        # The board measures while no collector listens: only the attacker reads its results.
        agent, running = start_agent(tmp_path, broker, fleet.public_key)
        started.append(running)
        produce(agent, COUNT)
        wait_until(lambda: len(attacker.genuine) >= COUNT and agent.sender.unconfirmed >= COUNT,
                   "the broker to have every result, and the attacker to have read them", WAIT_S)
        genuine = {i: json.loads(p)["body"]["result"]["latency_ms"]["p50"] for i, p in attacker.genuine.items()}
        assert set(genuine) <= outbox_ids(agent)  # the board still holds every one
        running.close()
        started.remove(running)

        # The collector starts (the board's retained status introduces it), then the copies arrive.
        collector = Collector(store, BrokerSettings(broker.host, broker.port), client_id="forge-collector",
                              backoff=Backoff(0.1, 0.5), collector_key=collector_key)
        started.append(Threaded(collector.run, progress_interval_s=0.05))
        wait_until(lambda: any(d["device_id"] == DEVICE for d in store.devices()), "the board's status", WAIT_S)
        seen = collector.counters.stored + collector.counters.rejected + collector.counters.duplicate
        attacker_key = DeviceKey.generate() if signature == "own key" else None
        attacker.publish([forged_copy(payload, how, signature, attacker_key) for payload in attacker.genuine.values()])
        wait_until(lambda: collector.counters.stored + collector.counters.rejected
                   + collector.counters.duplicate >= seen + COUNT, "the collector to take every copy", WAIT_S)

        # The board comes back to whatever the collector confirmed to it meanwhile, and re-sends the rest.
        agent, running = start_agent(tmp_path, broker, fleet.public_key)
        started.append(running)
        wait_until(lambda: not (outbox_ids(agent) & set(genuine)), "the board to have sent (or forgotten) all",
                   WAIT_S)

        stored = {r["id"]: r["p50_ms"] for r in store.results(device=DEVICE, latest=False)}
        held = outbox_ids(agent)
        kept = {i for i, p50 in genuine.items() if stored.get(i) == p50 or i in held}
        altered = sorted(i for i in stored if i in genuine and stored[i] != genuine[i])
        print(f"\n{how} copies (signature {signature}): {COUNT - len(kept)} of {COUNT} genuine results lost, "
              f"{len(altered)} stored with the attacker's numbers")
        assert len(kept) == COUNT, f"{COUNT - len(kept)} of {COUNT} genuine results lost"
        assert not altered, f"{len(altered)} of {COUNT} stored results are the attacker's copies"
        assert sorted(stored) == sorted(genuine)  # every one stored, once, as the board sent it
        reasons = store.stats()["rejected"]
        expected = {"kept": "signature_invalid", "stripped": "unsigned_message", "own key": "key_changed"}[signature]
        assert reasons == {expected: COUNT}, reasons
        [board] = [d for d in store.devices() if d["device_id"] == DEVICE]
        assert board["key"] == agent.device_key.fingerprint and board["key_source"] == "first_seen"
        if signature == "own key":  # the board is flagged: someone signs under its name with another key
            assert board["key_changed"]["fingerprint"] == attacker_key.fingerprint
            assert board["key_changed"]["messages"] == COUNT
        else:
            assert board["key_changed"] is None
    finally:
        for each in reversed(started):
            each.close()
        attacker.close()
        store.close()
