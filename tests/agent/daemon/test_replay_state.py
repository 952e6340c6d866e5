"""The replay and rollback record survives losing a file, and a clock set back cannot revive a job.

The record (job ids seen, the last release of each model, the latest time seen) is kept in
agent.db and in replay-state.json beside it; either restores the other at start. Jobs here name a
model file the board does not have: `missing_artifact` shows a job got past every admission check.
"""
import json
import logging
import time

import pytest
from harness import FleetKey

from edgeopt_agent import wire
from edgeopt_agent.daemon.admission import COPY_FILE, Admission, JobLedger
from edgeopt_agent.daemon.jobs import JobHandler
from edgeopt_agent.daemon.store import STATE_FILE, Store
from edgeopt_agent.errors import UserError

ed25519 = pytest.importorskip("cryptography.hazmat.primitives.asymmetric.ed25519",
                              reason="signed jobs need the cryptography package (agent extra)")
serialization = pytest.importorskip("cryptography.hazmat.primitives.serialization")

DEVICE = "dev-a"
SHA = "cd" * 32
ADMITTED = "missing_artifact"
T0 = 1_800_000_000.0  # the fake "now" every test starts at
DAY = 86400.0
QUICK = {"runs": 1, "duration_s": 0.0, "warmup_runs": 0, "warmup_s": 0.0}


@pytest.fixture(scope="module")
def fleet_key(tmp_path_factory):
    return FleetKey(tmp_path_factory.mktemp("keys"))


def signed_job(fleet_key, job_id, issued_at, lifetime_s=DAY, release=None, **options):
    return wire.benchmark_body(job_id, SHA, "onnx", path="models/none.onnx", size=10,
                               target=wire.JobTarget((DEVICE,), None), issued_at=issued_at, lifetime_s=lifetime_s,
                               release=release, signer=fleet_key.sign_job, **dict(QUICK, **options))


class Board:
    """A device's admission and job handler over a data dir, with a clock the test sets."""

    def __init__(self, data_dir, trusted):
        self.data_dir, self.trusted, self.now, self.store = data_dir, trusted, T0, None
        self.restart()

    def restart(self) -> "Board":
        if self.store is not None:
            self.store.close()
        self.store = Store(self.data_dir / STATE_FILE)
        ledger = JobLedger(self.store, clock=lambda: self.now)
        admission = Admission(DEVICE, None, self.trusted, ledger, clock_skew_s=60.0, clock=lambda: self.now)
        self.handler = JobHandler(DEVICE, self.data_dir, admission=admission)
        return self

    def delete(self, *names) -> "Board":
        """Stop, delete state files, start again."""
        self.store.close()
        self.store = None
        for name in names:
            for path in self.data_dir.glob(name + "*"):  # agent.db with its -wal and -shm
                path.unlink()
        return self.restart()

    def send(self, body):
        answer = self.handler.handle(wire.Envelope(DEVICE, 1, wire.BENCHMARK_JOB, body).encode())
        return (answer["error"]["kind"], answer["error"]["message"]) if answer["error"] else ("ok", "")


@pytest.fixture
def board(tmp_path, fleet_key):
    board = Board(tmp_path / "data", fleet_key.trusted)
    yield board
    if board.store is not None:
        board.store.close()


def test_deleting_agent_db_does_not_let_a_job_run_again(board, fleet_key, caplog):
    body = signed_job(fleet_key, "j1", issued_at=T0)
    assert board.send(body)[0] == ADMITTED
    caplog.set_level(logging.WARNING, logger="edgeopt_agent.daemon.admission")
    board.delete(STATE_FILE)
    assert "restored from" in caplog.text
    assert board.send(body)[0] == "replayed"
    assert board.send(signed_job(fleet_key, "j2", issued_at=T0))[0] == ADMITTED


def test_deleting_agent_db_does_not_let_an_older_release_in(board, fleet_key):
    new, old = wire.Release("net.py:build", 2000.0), wire.Release("net.py:build", 1000.0)
    assert board.send(signed_job(fleet_key, "v2", issued_at=T0, release=new))[0] == ADMITTED
    older = signed_job(fleet_key, "v1", issued_at=T0, release=old)
    assert board.send(older)[0] == "downgrade"
    board.delete(STATE_FILE)
    kind, message = board.send(older)
    assert kind == "replayed"  # this very job was seen (and refused) before
    kind, message = board.send(signed_job(fleet_key, "v1-again", issued_at=T0, release=old))
    assert kind == "downgrade" and "--allow-downgrade" in message


def test_deleting_the_copy_rebuilds_it_from_agent_db(board, fleet_key):
    body = signed_job(fleet_key, "j1", issued_at=T0, release=wire.Release("m", 5.0))
    assert board.send(body)[0] == ADMITTED
    board.delete(COPY_FILE)
    copy = json.loads((board.data_dir / COPY_FILE).read_text())
    assert [row[0] for row in copy["jobs"]] == ["j1"] and copy["releases"][0][:2] == ["m", 5.0]
    board.delete(STATE_FILE)  # and now the other one: the rebuilt copy still knows
    assert board.send(body)[0] == "replayed"


def test_losing_both_files_of_a_used_data_dir_refuses_jobs_issued_before(board, fleet_key):
    body = signed_job(fleet_key, "j1", issued_at=T0)
    assert board.send(body)[0] == ADMITTED
    (board.data_dir / "artifacts").mkdir()
    (board.data_dir / "artifacts" / f"{SHA}.onnx").write_bytes(b"an artifact this board ran")
    board.now = T0 + 3600
    board.delete(STATE_FILE, COPY_FILE)
    kind, message = board.send(body)
    assert kind == "replayed" and "lost its record" in message
    assert board.send(signed_job(fleet_key, "j2", issued_at=T0 + 3590))[0] == ADMITTED  # a new job runs


def test_a_new_data_dir_accepts_a_job_issued_a_while_ago(board, fleet_key):
    """Nothing was ever run here: a job that waited on the broker is not a replay (the bound a
    fully wiped data dir leaves: a job still valid may run again, until it expires)."""
    board.now = T0 + 3600
    assert board.send(signed_job(fleet_key, "j1", issued_at=T0))[0] == ADMITTED


def test_a_clock_set_ahead_and_back_cannot_revive_a_forgotten_job(board, fleet_key):
    old = signed_job(fleet_key, "j1", issued_at=T0, lifetime_s=DAY)
    assert board.send(old)[0] == ADMITTED
    board.now = T0 + 30 * DAY  # the clock jumps ahead: j1's id is forgotten as expired
    assert board.send(signed_job(fleet_key, "j2", issued_at=board.now))[0] == ADMITTED
    board.now = T0 + 3600  # and back, to a time at which j1 would still be valid
    kind, message = board.send(old)
    assert kind == "expired" and "set back" in message
    # After a restart the mark, beyond the clock, is not obeyed: jobs issued before now are refused instead.
    assert board.restart().send(old)[0] == "replayed"
    board.delete(STATE_FILE)
    assert board.send(old)[0] == "replayed"  # and from the copy


def test_a_clock_behind_the_latest_issued_job_judges_expiry_by_that_job(board, fleet_key):
    assert board.send(signed_job(fleet_key, "fresh", issued_at=T0 + 40))[0] == ADMITTED  # within the skew
    board.now = T0 - 5 * DAY  # e.g. a board without a real-time clock booted with an old time
    stale = signed_job(fleet_key, "stale", issued_at=T0 - 5 * DAY, lifetime_s=DAY)
    assert board.send(stale)[0] == "expired"


def test_a_damaged_copy_without_agent_db_stops_the_start_with_one_line(tmp_path, fleet_key):
    data = tmp_path / "data"
    data.mkdir()
    (data / COPY_FILE).write_text("{not json")
    with pytest.raises(UserError, match=r"damaged .* restore either file from a backup") as caught:
        JobLedger(Store(data / STATE_FILE))
    assert "\n" not in str(caught.value)


def test_a_damaged_copy_beside_agent_db_is_rebuilt(board, fleet_key):
    body = signed_job(fleet_key, "j1", issued_at=T0)
    assert board.send(body)[0] == ADMITTED
    (board.data_dir / COPY_FILE).write_text('{"schema": "edgeopt.replay-state/1", "jobs": 7}')
    board.restart()
    assert json.loads((board.data_dir / COPY_FILE).read_text())["jobs"][0][0] == "j1"
    assert board.send(body)[0] == "replayed"


# --- failing closed, and staying closed (issue 38) ----------------------------------------------------


def used(board):
    """Leave what a data dir that ran a job holds (its artifact)."""
    (board.data_dir / "artifacts").mkdir(exist_ok=True)
    (board.data_dir / "artifacts" / f"{SHA}.onnx").write_bytes(b"an artifact this board ran")


def test_a_damaged_copy_without_agent_db_refuses_every_start_until_the_operator_resets(board, fleet_key, capsys):
    board.now = time.time()  # the reset below runs on the real clock
    body = signed_job(fleet_key, "j1", issued_at=board.now - 600)
    assert board.send(body)[0] == ADMITTED
    used(board)
    board.store.close()
    board.store = None
    for path in board.data_dir.glob(STATE_FILE + "*"):
        path.unlink()
    (board.data_dir / COPY_FILE).write_text("{damaged")
    for attempt in range(3):  # systemd's Restart= starts it again and again: each start refuses
        with pytest.raises(UserError, match="accept-replay-risk"):
            board.restart()
        board.store.close()
        board.store = None
    assert (board.data_dir / COPY_FILE).read_text() == "{damaged"  # nothing was taken for a ledger

    from edgeopt_agent.daemon.cli import main

    assert main(["--device-id", DEVICE, "--data-dir", str(board.data_dir), "--accept-replay-risk"]) == 0
    out = capsys.readouterr().out
    assert "started a new job ledger" in out and "damaged" in out
    assert list(board.data_dir.glob(COPY_FILE + ".damaged-*"))  # kept aside, for whoever looks into it
    board.now = time.time()
    board.restart()
    assert board.send(body)[0] == "replayed"  # issued before the reset
    assert board.send(signed_job(fleet_key, "j2", issued_at=board.now))[0] == ADMITTED
    from edgeopt_agent.daemon.store import lock_data_dir

    running = lock_data_dir(board.data_dir)  # an agent running on it: no reset under its feet
    try:
        assert main(["--device-id", DEVICE, "--data-dir", str(board.data_dir), "--accept-replay-risk"]) == 2
    finally:
        running.close()
    assert "already running" in capsys.readouterr().err


def test_a_valid_but_empty_copy_without_agent_db_is_a_lost_ledger(board, fleet_key, caplog):
    body = signed_job(fleet_key, "j1", issued_at=T0)
    assert board.send(body)[0] == ADMITTED
    used(board)
    empty = json.dumps({"schema": "edgeopt.replay-state/1", "marks": {}, "jobs": [], "releases": []})
    board.store.close()
    board.store = None
    for path in board.data_dir.glob(STATE_FILE + "*"):
        path.unlink()
    (board.data_dir / COPY_FILE).write_text(empty)
    board.now = T0 + 3600
    caplog.set_level(logging.WARNING, logger="edgeopt_agent.daemon.admission")
    board.restart()
    assert "remembers nothing" in caplog.text
    kind, message = board.send(body)
    assert kind == "replayed" and "lost its record" in message


def test_a_clock_mark_far_ahead_is_refused_not_obeyed(board, fleet_key, caplog):
    body = signed_job(fleet_key, "j1", issued_at=T0)
    assert board.send(body)[0] == ADMITTED
    copy = json.loads((board.data_dir / COPY_FILE).read_text())
    copy["marks"]["clock_mark"] = T0 + 3650 * DAY  # ten years ahead: it used to make every job `expired`
    board.store.close()
    board.store = None
    for path in board.data_dir.glob(STATE_FILE + "*"):
        path.unlink()
    (board.data_dir / COPY_FILE).write_text(json.dumps(copy))
    board.now = T0 + 60
    caplog.set_level(logging.WARNING, logger="edgeopt_agent.daemon.admission")
    board.restart()
    assert "not obeyed" in caplog.text
    assert board.send(body)[0] == "replayed"  # still refused: its id is remembered, and it predates the start
    assert board.send(signed_job(fleet_key, "j2", issued_at=board.now))[0] == ADMITTED  # new jobs run
    marks = json.loads((board.data_dir / COPY_FILE).read_text())["marks"]
    assert marks["clock_mark"] < T0 + DAY  # the far mark is gone from both copies
