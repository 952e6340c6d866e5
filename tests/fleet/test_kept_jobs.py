"""The jobs deploy keeps in the fleet database: due again with back-off, answered by the board's stored
result (the one naming the job message), dropped when they expire; on SQLite and PostgreSQL."""
from __future__ import annotations

import json
import time

from fleet_simulator import SimulatedDevice

from edgeopt.fleet.jobs import JobQueue, job_row
from edgeopt.fleet.store import open_store
from edgeopt_agent import wire

T0 = 1_800_000_000.0


def job(device_id, job_id, lifetime_s=3600.0, issued_at=T0):
    return wire.benchmark_job(device_id, 1, job_id, "cd" * 32, "onnx", path="models/m.onnx", size=10,
                              issued_at=issued_at, lifetime_s=lifetime_s)


def test_a_kept_job_is_due_again_with_back_off_until_its_board_answers(db_url):  # SQLite and PostgreSQL (conftest)
    board = SimulatedDevice("pi-1")
    first, second, short = job("pi-1", "j1"), job("pi-1", "j2"), job("pi-2", "j3", lifetime_s=50.0)
    with open_store(db_url) as store:
        queue = JobQueue(store.db, resend_s=10.0, max_resend_s=25.0)
        assert queue.keep([job_row("pi-1", first), job_row("pi-1", second), job_row("pi-2", short)], sent_at=T0) == 3
        assert queue.keep([job_row("pi-1", first)], sent_at=T0) == 0  # kept once
        assert queue.take_due(T0 + 9) == []
        due = queue.take_due(T0 + 10)
        assert sorted((j.device_id, j.job_id, j.sends) for j in due) == [("pi-1", "j1", 2), ("pi-1", "j2", 2),
                                                                         ("pi-2", "j3", 2)]
        assert {j.request_id: j.payload for j in due}[first.id] == first.encode()  # the very bytes sent first
        assert queue.take_due(T0 + 19) == []  # claimed: next after 10 s more, then 20 s, capped at 25 s
        assert len(queue.take_due(T0 + 20)) == 3

        # pi-1 answers j1 (a result naming the job message's id): it is sent no more.
        answer = board.result("j1")
        data = json.loads(answer.payload)
        data["body"]["request_id"] = first.id
        assert store.ingest(answer.topic, answer.changed(data)).status == "stored"
        # The same request id from another board answers nothing of pi-1's.
        other = SimulatedDevice("pi-3").result("j2")
        data = json.loads(other.payload)
        data["body"]["request_id"] = second.id
        assert store.ingest(other.topic, other.changed(data)).status == "stored"

        assert sorted(j.job_id for j in queue.take_due(T0 + 40)) == ["j2", "j3"]  # j1 answered
        assert queue.take_due(T0 + 64) == []  # 40 s would be next: capped at 25 s
        assert [j.job_id for j in queue.take_due(T0 + 65)] == ["j2"]  # j3 expired at T0 + 50
        assert queue.counts(T0 + 65) == {"waiting": 1, "answered": 1, "expired": 1}


def test_fleet_stats_counts_the_kept_jobs(tmp_path, capsys):
    from edgeopt.cli.main import main

    url = f"sqlite:///{tmp_path}/fleet.db"
    with open_store(url) as store:
        queue = JobQueue(store.db)
        queue.keep([job_row("pi-1", job("pi-1", "old", issued_at=time.time() - 7200)),
                    job_row("pi-1", job("pi-1", "new", issued_at=time.time()))])
        assert store.stats()["jobs"] == {"waiting": 1, "answered": 0, "expired": 1}
    capsys.readouterr()
    assert main(["fleet", "stats", "--db", url]) == 0
    out = capsys.readouterr().out
    assert "kept jobs: 1 waiting for their board" in out and "1 expired unanswered" in out
