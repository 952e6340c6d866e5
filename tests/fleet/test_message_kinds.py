"""The fleet messages a board sends are one registry (edgeopt.fleet.messages.KINDS): a new message is
one entry (topic, type, row, table, handlers) plus its handler, and the collector subscribes to it,
the writer checks, stores, gap-checks and hands it to its handler, and the confirm names it."""
from __future__ import annotations

import json

from edgeopt.fleet import messages as msg
from edgeopt.fleet.collector import confirmations, subscriptions
from edgeopt.fleet.store import open_store
from edgeopt_agent import wire
from edgeopt_agent.wire import topics
from fleet_simulator import SimulatedDevice


def test_the_registry_is_every_kind_a_board_sends():
    assert list(msg.KINDS) == [wire.STATUS, wire.TELEMETRY, wire.RESULTS]
    assert [k.type for k in msg.KINDS.values()] == [wire.STATUS_TYPE, wire.TELEMETRY_TYPE, wire.RESULT_TYPE]
    assert [t for t, k in msg.KINDS.items() if k.gap_checked] == [wire.TELEMETRY, wire.RESULTS]
    assert subscriptions() == [wire.subscription(kind) for kind in msg.KINDS]


def test_a_made_up_message_is_one_entry_plus_its_handler(tmp_path, monkeypatch):
    # The wire's side of a new message (its topic, kept until confirmed), then its one entry.
    monkeypatch.setattr(topics, "TOPIC_KINDS", topics.TOPIC_KINDS + ("heartbeat",))
    monkeypatch.setattr(wire, "CONFIRMED_KINDS", wire.CONFIRMED_KINDS + ("heartbeat",))
    handled = []

    def row(envelope):
        uptime = envelope.body.get("uptime_s")
        if not isinstance(uptime, int):
            raise msg.BodyError(f"heartbeat 'uptime_s' must be an integer, got {uptime!r}")
        return {"uptime_s": uptime}

    def seen(tx, device_id, messages, now):
        handled.append((device_id, [m.row["uptime_s"] for m in messages]))

    monkeypatch.setitem(msg.KINDS, "heartbeat", msg.MessageKind("heartbeat", "heartbeat", row, "heartbeats",
                                                                gap_checked=True, after=seen))
    store = open_store(f"sqlite:///{tmp_path}/fleet.db")
    try:
        with store.db.transaction() as tx:  # its table (a migration, for a real one)
            tx.execute("CREATE TABLE heartbeats (id TEXT PRIMARY KEY, device_id TEXT, seq INTEGER, ts REAL, "
                       "uptime_s INTEGER)")
        device = SimulatedDevice("pi-01")
        first = store.ingest(*_sent(device.envelope("heartbeat", "heartbeat", {"uptime_s": 5})))
        device.next_seq("heartbeat")  # one lost on the way
        third = store.ingest(*_sent(device.envelope("heartbeat", "heartbeat", {"uptime_s": 65})))
        bad = store.ingest(*_sent(device.envelope("heartbeat", "heartbeat", {"uptime_s": "soon"})))
        with store.db.transaction(write=False) as tx:
            rows = tx.rows("SELECT device_id, seq, uptime_s FROM heartbeats ORDER BY seq")
            gaps = tx.rows("SELECT * FROM gaps WHERE device_id = ? AND kind = ?", ("pi-01", "heartbeat"))
    finally:
        store.close()
    assert subscriptions()[-1] == wire.subscription("heartbeat"), "the collector subscribes to it"
    assert (first.status, third.status, bad.status, bad.reason) == ("stored", "stored", "rejected", "invalid_body")
    assert rows == [{"device_id": "pi-01", "seq": 1, "uptime_s": 5}, {"device_id": "pi-01", "seq": 3, "uptime_s": 65}]
    assert len(gaps) == 1, "its sequence numbers are checked for gaps"
    assert handled == [("pi-01", [5]), ("pi-01", [65])], "its handler runs once it is stored"
    [(committed, rejected)] = confirmations([first, third, bad]).values()
    assert [i for i, _ in committed] == [first.message_id, third.message_id] and len(rejected) == 1


def _sent(published):
    json.loads(published.payload)  # a signed envelope, as the board sends it
    return published.topic, published.payload
