"""The agent's queues on disk: byte caps on the outbox and the inbox, what a full one drops or
refuses and how that is reported, the collector's confirmations, and an older state file."""
import json
import sqlite3

import pytest
from harness import NoSensors

from edgeopt_agent import wire
from edgeopt_agent.daemon.agent import Agent
from edgeopt_agent.daemon.config import build_config
from edgeopt_agent.daemon.inbox import ADDED, DUPLICATE, FULL, Inbox
from edgeopt_agent.daemon.outbox import Outbox
from edgeopt_agent.daemon.store import STATE_FILE, Store
from edgeopt_agent.errors import UserError

DEVICE = "caps-dev"
MiB = 1024 * 1024


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path / STATE_FILE)


def bodies(outbox):
    return [json.loads(m.payload)["body"] for m in outbox.pending(limit=1000)]


def padded(kind, n, size=900):
    return {"kind": kind, "n": n, "pad": "x" * size}


def test_a_full_outbox_drops_the_oldest_telemetry_first_and_counts_it(store):
    outbox = Outbox(store, DEVICE, max_bytes=5000)
    outbox.add("results", "result", padded("r", 0))
    for n in range(6):
        outbox.add("telemetry", "telemetry", padded("t", n))
    assert outbox.size_bytes() <= 5000
    kept = [(b["kind"], b["n"]) for b in bodies(outbox)]
    assert kept == [("r", 0), ("t", 3), ("t", 4), ("t", 5)]
    assert outbox.dropped() == {"telemetry": 3}


def test_results_go_only_when_nothing_else_is_left_and_the_newest_message_always_stays(store):
    outbox = Outbox(store, DEVICE, max_bytes=3000)
    outbox.add("telemetry", "telemetry", padded("t", 0))
    outbox.add("transfer", "transfer", padded("x", 0))
    outbox.add("results", "result", padded("r", 0))
    outbox.add("results", "result", padded("r", 1))  # over the cap: telemetry first, then the transfer request
    assert [(b["kind"], b["n"]) for b in bodies(outbox)] == [("r", 0), ("r", 1)]
    outbox.add("results", "result", padded("r", 2, size=2500))  # no other choice: the oldest result
    assert [(b["kind"], b["n"]) for b in bodies(outbox)] == [("r", 2)]
    outbox.add("results", "result", padded("r", 3, size=4000))  # bigger than the cap on its own: kept
    assert [(b["kind"], b["n"]) for b in bodies(outbox)] == [("r", 3)]
    assert outbox.dropped() == {"telemetry": 1, "transfer": 1, "results": 3}
    assert Outbox(store, DEVICE).dropped() == outbox.dropped()  # counted in the state file


def digests(outbox):
    """Message id -> sha256 of its bytes as queued (what a confirm names a message by)."""
    return {m.message_id: wire.message_digest(m.payload) for m in outbox.pending(limit=1000)}


def test_confirmation_forgets_by_id_and_digest_and_frees_the_bytes(store):
    outbox = Outbox(store, DEVICE)
    sent = [outbox.add("telemetry", "telemetry", padded("t", n)) for n in range(3)]
    digest = digests(outbox)
    before = outbox.size_bytes()
    done = outbox.confirm([(sent[0].id, digest[sent[0].id]), (sent[2].id, digest[sent[2].id]),
                           (sent[1].id, "e" * 64),  # someone's copy under this id: its own bytes stay
                           ("0" * 32, "0" * 64)])
    assert len(done.rows) == 2 and [b["n"] for b in bodies(outbox)] == [1] and done.other_bytes == 1
    assert done.forgotten == {(sent[0].id, digest[sent[0].id]), (sent[2].id, digest[sent[2].id])}
    assert outbox.size_bytes() == before - sum(len(e.encode()) for e in (sent[0], sent[2]))


def test_an_outbox_with_a_signer_signs_what_an_older_agent_left_unsigned(store):
    from edgeopt_agent.message_signing import DeviceKey, verify_message

    old = Outbox(store, DEVICE)
    queued = old.add("results", "result", {"job_id": "old"})
    key = DeviceKey.generate()
    outbox = Outbox(store, DEVICE, signer=key.encode)
    assert outbox.sign_unsigned() == 1 and outbox.sign_unsigned() == 0
    fresh = outbox.add("results", "result", {"job_id": "new"})
    for message, envelope in zip(outbox.pending(), (queued, fresh)):
        document = json.loads(message.payload)
        assert verify_message(document) == key.public_key and document["id"] == envelope.id
        assert message.message_id == envelope.id


def test_the_inbox_refuses_a_job_over_its_byte_cap_and_remembers_it(store):
    inbox = Inbox(store, max_bytes=1000)
    assert inbox.add(b"a" * 600) == ADDED
    assert inbox.add(b"b" * 600) == FULL
    assert inbox.add(b"b" * 600) == DUPLICATE  # a redelivery of the refused job is not answered twice
    assert inbox.size_bytes() == 600 and inbox.open_count() == 1
    inbox.done(inbox.take().id)
    assert inbox.size_bytes() == 0
    assert inbox.add(b"c" * 600) == ADDED  # room again once the first one is answered


def make_agent(tmp_path, **settings):
    config = build_config({"device_id": DEVICE, "data_dir": str(tmp_path / "data"), **settings})
    return Agent(config, sensors=NoSensors())


def test_a_job_refused_for_the_inbox_cap_is_answered_with_an_inbox_full_error(tmp_path):
    agent = make_agent(tmp_path, inbox_max_bytes=MiB)
    inline = b"\0" * (MiB // 2)
    first = wire.benchmark_job(DEVICE, 1, "big-1", "a" * 64, "onnx", data=inline)
    second = wire.benchmark_job(DEVICE, 2, "big-2", "b" * 64, "onnx", data=inline)
    agent._on_message(wire.jobs_topic(DEVICE), first.encode())
    agent._on_message(wire.jobs_topic(DEVICE), second.encode())
    agent._on_message(wire.jobs_topic(DEVICE), second.encode())  # QoS 1 redelivery: one answer only
    assert agent.inbox.open_count() == 1
    [answer] = [m for m in agent.outbox.pending() if m.kind == wire.RESULTS]
    body = json.loads(answer.payload)["body"]
    assert body["ok"] is False and body["error"]["kind"] == "inbox_full"
    assert (body["job_id"], body["request_id"], body["job_type"]) == ("big-2", second.id, "benchmark")
    assert "inbox_max_bytes" in body["error"]["message"] and "again" in body["error"]["message"]

    agent.send_telemetry()
    state = json.loads(agent.outbox.pending()[-1].payload)["body"]["agent"]
    assert state["jobs_refused"] == {"inbox_full": 1}
    assert state["inbox_max_bytes"] == MiB and 0 < state["inbox_bytes"] <= MiB
    assert state["outbox_dropped"] == {} and state["delivery"] == "collector"
    assert state["outbox_max_bytes"] == 64 * MiB and state["outbox_bytes"] > 0


def test_the_agent_forgets_what_the_collector_confirms_and_logs_rejections(tmp_path, caplog):
    agent = make_agent(tmp_path)
    kept = agent.outbox.add(wire.RESULTS, wire.RESULT_TYPE, {"job_id": "kept"})
    stored = agent.outbox.add(wire.RESULTS, wire.RESULT_TYPE, {"job_id": "stored"})
    bad = agent.outbox.add(wire.TELEMETRY, wire.TELEMETRY_TYPE, {"bad": True})
    digest = digests(agent.outbox)
    confirm = wire.confirm_message(DEVICE, 1, committed=[(stored.id, digest[stored.id]), (kept.id, "c" * 64)],
                                   rejected=[(bad.id, digest[bad.id], "invalid_body"), (kept.id, "d" * 64, "x")])
    agent._on_message(wire.confirm_topic(DEVICE), confirm.encode())
    assert [json.loads(m.payload)["id"] for m in agent.outbox.pending()] == [kept.id]  # other bytes: kept
    assert "rejected message %s (invalid_body)" % bad.id in caplog.text
    assert "rejected message %s" % kept.id not in caplog.text

    other = wire.confirm_message("another-dev", 2, committed=[(kept.id, digest[kept.id])])
    agent._on_message(wire.confirm_topic(DEVICE), other.encode())  # addressed to someone else
    agent._on_message(wire.confirm_topic(DEVICE), b"{not json")
    by_id_only = wire.Envelope(device_id=DEVICE, seq=3, type=wire.CONFIRM_TYPE,
                               body={"committed": [kept.id], "rejected": []})  # the form before digests
    agent._on_message(wire.confirm_topic(DEVICE), by_id_only.encode())
    assert len(agent.outbox) == 1 and "ignoring a confirm message" in caplog.text
    agent.send_telemetry()
    state = json.loads(agent.outbox.pending()[-1].payload)["body"]["agent"]
    assert state["rejected_by_collector"] == 1 and state["confirmed_other_bytes"] == 2
    assert state["confirms_refused"] == {"malformed_message": 2, "wrong_device": 1}


def test_broker_delivery_does_not_subscribe_to_confirmations(tmp_path):
    agent = make_agent(tmp_path, delivery="broker")
    assert wire.confirm_topic(DEVICE) not in agent.session._subscriptions
    assert wire.confirm_topic(DEVICE) in make_agent(tmp_path / "b").session._subscriptions


@pytest.mark.parametrize("settings, message", [
    ({"outbox_max_bytes": 1000}, "outbox_max_bytes must be at least"),
    ({"inbox_max_bytes": 0}, "inbox_max_bytes must be at least"),
    ({"delivery": "maybe"}, "delivery 'maybe' is not one of collector, broker"),
    ({"confirm_timeout": 0.0}, "confirm timeout must be positive"),
])
def test_bad_queue_settings_are_user_errors(settings, message):
    with pytest.raises(UserError, match=message):
        build_config({"device_id": DEVICE, **settings})


def test_a_state_file_of_an_older_agent_keeps_its_queue_and_can_be_confirmed(tmp_path):
    path = tmp_path / STATE_FILE
    envelope = wire.Envelope(device_id=DEVICE, seq=7, type="result", body={"job_id": "old"})
    with sqlite3.connect(str(path)) as db:  # the outbox as the first release made it
        db.execute("CREATE TABLE outbox (id INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, "
                   "topic TEXT NOT NULL, payload BLOB NOT NULL, retain INTEGER NOT NULL, created REAL NOT NULL)")
        db.execute("INSERT INTO outbox (kind, topic, payload, retain, created) VALUES (?, ?, ?, 0, 0)",
                   ("results", wire.results_topic(DEVICE), envelope.encode()))
    outbox = Outbox(Store(path), DEVICE)
    [message] = outbox.pending()
    assert message.message_id == envelope.id and outbox.size_bytes() == len(envelope.encode())
    assert len(outbox.confirm([(envelope.id, wire.message_digest(envelope.encode()))]).rows) == 1
    assert len(outbox) == 0
