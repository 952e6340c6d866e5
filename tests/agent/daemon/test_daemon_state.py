"""The SQLite state: sequence numbers, outbox and inbox, across reopening (an agent restart)."""
import json
import sqlite3

import pytest

from edgeopt_agent import wire
from edgeopt_agent.daemon.inbox import ADDED, DUPLICATE, Inbox
from edgeopt_agent.daemon.outbox import Outbox
from edgeopt_agent.daemon.store import STATE_FILE, Store
from edgeopt_agent.errors import UserError


@pytest.fixture
def state_path(tmp_path):
    return tmp_path / "data" / STATE_FILE


def test_sequences_count_per_stream_and_survive_a_restart(state_path):
    store = Store(state_path)
    assert [store.next_seq("telemetry") for _ in range(3)] == [1, 2, 3]
    assert store.next_seq("status") == 1
    store.close()
    reopened = Store(state_path)
    assert reopened.next_seq("telemetry") == 4
    assert reopened.next_seq("status") == 2


def test_outbox_numbers_messages_and_keeps_them_until_removed(state_path):
    store = Store(state_path)
    outbox = Outbox(store, "dev-1")
    sent = [outbox.add("telemetry", "telemetry", {"n": n}) for n in range(3)]
    result = outbox.add("results", "result", {"job_id": "j"})
    assert [e.seq for e in sent] == [1, 2, 3] and result.seq == 1

    pending = outbox.pending()
    assert [m.topic for m in pending] == ["edgeopt/v1/dev-1/telemetry"] * 3 + ["edgeopt/v1/dev-1/results"]
    assert [json.loads(m.payload)["id"] for m in pending] == [e.id for e in sent + [result]]
    assert outbox.last_id == pending[-1].id
    assert [m.id for m in outbox.pending(after_id=pending[1].id, limit=1)] == [pending[2].id]

    outbox.remove([pending[0].id, pending[2].id])
    store.close()
    restarted = Outbox(Store(state_path), "dev-1")
    assert [json.loads(m.payload)["body"] for m in restarted.pending()] == [{"n": 1}, {"job_id": "j"}]
    assert len(restarted) == 2


def test_seq_and_message_are_written_together(state_path):
    store = Store(state_path)
    outbox = Outbox(store, "dev-1")
    with pytest.raises(RuntimeError):
        with store.transaction():
            outbox.add("telemetry", "telemetry", {"n": 1})
            raise RuntimeError("crash before commit")
    assert len(outbox) == 0
    assert outbox.add("telemetry", "telemetry", {"n": 2}).seq == 1


def test_inbox_stores_once_counts_attempts_and_survives_a_restart(state_path):
    inbox = Inbox(Store(state_path))
    assert inbox.add(b"job-a") == ADDED
    assert inbox.add(b"job-a") == DUPLICATE  # QoS 1 redelivery
    assert inbox.add(b"job-b") == ADDED
    first = inbox.take()
    assert (first.payload, first.attempts) == (b"job-a", 1)

    restarted = Inbox(Store(state_path))
    again = restarted.take()
    assert (again.id, again.attempts) == (first.id, 2)
    restarted.done(again.id)
    assert restarted.take().payload == b"job-b"
    assert restarted.add(b"job-a") == DUPLICATE  # already answered: still recognised
    assert restarted.open_count() == 1


def test_inbox_forgets_answered_jobs_beyond_its_memory(state_path):
    inbox = Inbox(Store(state_path), keep_done=2)
    for payload in (b"1", b"2", b"3"):
        inbox.add(payload)
        inbox.done(inbox.take().id)
    assert inbox.add(b"1") == ADDED
    assert inbox.add(b"3") == DUPLICATE


def test_a_state_file_that_is_not_sqlite_is_a_user_error(tmp_path):
    path = tmp_path / STATE_FILE
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(UserError, match="move the file away"):
        Store(path)


def test_an_unwritable_data_dir_is_a_user_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UserError, match="data"):
        Store(blocker / "sub" / STATE_FILE)


def test_the_state_file_is_plain_sqlite(state_path):
    outbox = Outbox(Store(state_path), "dev-1")
    outbox.add(wire.TELEMETRY, wire.TELEMETRY_TYPE, {})
    with sqlite3.connect(str(state_path)) as db:
        assert db.execute("SELECT COUNT(*) FROM outbox").fetchone() == (1,)
