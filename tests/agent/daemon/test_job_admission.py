"""Signed jobs, one attack per test: an agent with a trusted key runs a job only when the whole job
is signed by that key, fresh, addressed to it, new to it, and not a rollback of its model.

Most jobs here name a model file the board does not have: an answer `missing_artifact` shows the
job got past every admission check to the artifact, without the cost of a benchmark."""
import json
import logging
import time

import pytest
from harness import QUICK_BENCH, FleetKey, write_tiny_onnx

from edgeopt_agent import signing, wire
from edgeopt_agent.daemon.admission import CLOCK_MARK, COPY_FILE, Admission, JobLedger
from edgeopt_agent.daemon.jobs import JobHandler
from edgeopt_agent.daemon.store import STATE_FILE, Store

ed25519 = pytest.importorskip("cryptography.hazmat.primitives.asymmetric.ed25519",
                              reason="signed jobs need the cryptography package (agent extra)")
serialization = pytest.importorskip("cryptography.hazmat.primitives.serialization")

DEVICE, OTHER, PROFILE = "dev-a", "dev-b", "x86-64"
SHA = "ab" * 32
ADMITTED = "missing_artifact"  # the first check after admission


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """The fleet's private key, and the public key an agent trusts."""
    return FleetKey(tmp_path_factory.mktemp("keys"))


class Board:
    """One device's job handler over its data dir; `restart()` is a new process on the same state."""

    def __init__(self, data_dir, trusted, device_id=DEVICE, profile=PROFILE, clock_skew_s=60.0):
        self.data_dir, self.trusted, self.device_id, self.profile = data_dir, trusted, device_id, profile
        self.clock_skew_s = clock_skew_s
        self.restart()

    def restart(self) -> "Board":
        ledger = JobLedger(Store(self.data_dir / STATE_FILE)) if self.trusted else None
        self.admission = Admission(self.device_id, self.profile, self.trusted, ledger, self.clock_skew_s)
        self.handler = JobHandler(self.device_id, self.data_dir, admission=self.admission)
        return self

    def send(self, body, attempts=1, device_id=None):
        """The job as it arrives on this board's jobs topic, in a new message; the answer's error kind."""
        envelope = wire.Envelope(device_id or self.device_id, 1, wire.BENCHMARK_JOB, body)
        answer = self.handler.handle(envelope.encode(), attempts)
        return answer["error"]["kind"] if answer["error"] else "ok", answer


def job(fleet, job_id="j1", devices=(DEVICE,), profile=None, signed=True, path="models/none.onnx", **options):
    options = dict(dict(QUICK_BENCH), **options)
    return wire.benchmark_body(job_id, SHA, "onnx", path=path, size=10,
                                   target=wire.JobTarget(tuple(devices) if devices else None, profile),
                                   signer=fleet.sign_job if signed else None, **options)


@pytest.fixture
def board(tmp_path, fleet):
    return Board(tmp_path / "data", fleet.trusted)


def test_a_signed_job_for_this_device_runs_end_to_end(tmp_path, fleet):
    board = Board(tmp_path / "data", fleet.trusted)
    sha = write_tiny_onnx(board.data_dir / "models" / "tiny.onnx")
    body = wire.benchmark_body("run", sha, "onnx", path="models/tiny.onnx", target=wire.JobTarget((DEVICE,)),
                                   signer=fleet.sign_job, **QUICK_BENCH)
    kind, answer = board.send(body)
    assert kind == "ok" and answer["result"]["latency_ms"]["p50"] > 0


def test_an_unsigned_job_is_refused(board, fleet):
    kind, answer = board.send(job(fleet, signed=False))
    assert kind == "unsigned_job" and "only runs signed jobs" in answer["error"]["message"]
    assert answer["job_id"] == "j1" and answer["result"] is None


def test_tampered_bench_options_are_refused(board, fleet):
    body = job(fleet)
    heavier = dict(body, bench=dict(body["bench"], timeout_s=1800, runs=100000))
    kind, answer = board.send(heavier)
    assert kind == "signature_invalid" and "changed after signing" in answer["error"]["message"]


def test_a_copied_signature_on_a_new_job_id_is_refused(board, fleet):
    old = job(fleet, job_id="old")
    assert board.send(old)[0] == ADMITTED
    kind, _ = board.send(dict(old, job_id="new"))  # same artifact and options, the old signature
    assert kind == "signature_invalid"


def test_the_same_job_sent_again_is_a_replay_also_after_a_restart(board, fleet):
    body = job(fleet)
    assert board.send(body)[0] == ADMITTED
    kind, answer = board.send(body)  # the same signed job in a new message
    assert kind == "replayed" and "already received" in answer["error"]["message"]
    assert board.restart().send(body)[0] == "replayed"  # remembered in the state file
    assert board.send(job(fleet, job_id="j2"))[0] == ADMITTED  # a new job is fine


def test_a_job_started_again_after_an_interruption_is_not_a_replay(board, fleet):
    body = job(fleet)
    envelope = wire.job_message(DEVICE, 1, body).encode()
    assert board.handler.handle(envelope, 1)["error"]["kind"] == ADMITTED
    board.restart()  # the agent died mid-job: the worker takes the same inbox entry again
    assert board.handler.handle(envelope, 2)["error"]["kind"] == ADMITTED


def test_a_job_refused_for_its_signature_does_not_block_the_genuine_one(board, fleet):
    genuine = job(fleet, job_id="j-1")
    forged = dict(genuine, bench=dict(genuine["bench"], runs=1))
    assert board.send(forged)[0] == "signature_invalid"
    assert board.send(genuine)[0] == ADMITTED


def test_an_expired_job_is_refused(board, fleet):
    now = time.time()
    kind, answer = board.send(job(fleet, issued_at=now - 7200, lifetime_s=3600))
    assert kind == "expired" and "expired 60 min ago" in answer["error"]["message"]
    # Within the clock skew the agent allows (60 s here) it still runs.
    assert board.send(job(fleet, job_id="j2", issued_at=now - 3630, lifetime_s=3600))[0] == ADMITTED


def test_a_job_issued_in_the_future_beyond_the_clock_skew_is_refused(board, fleet):
    now = time.time()
    kind, answer = board.send(job(fleet, issued_at=now + 600))
    assert kind == "not_yet_valid" and "check the clocks" in answer["error"]["message"]
    assert board.send(job(fleet, job_id="j2", issued_at=now + 30))[0] == ADMITTED


def test_a_job_for_another_device_is_refused(board, fleet):
    for_b = job(fleet, devices=(OTHER,))
    kind, answer = board.send(for_b)  # device B's signed job, published on A's jobs topic
    assert kind == "wrong_target" and "device dev-b" in answer["error"]["message"]
    assert Board(board.data_dir.parent / "b", fleet.trusted, OTHER).send(for_b)[0] == ADMITTED


def test_a_job_for_another_device_leaves_the_record_and_the_time_mark_as_they_were(tmp_path, fleet):
    """A valid signed job addressed elsewhere (issued a little ahead, within the skew, with a
    release) changes nothing here: no id remembered, no clock mark raised, no release, either copy."""
    data, now = tmp_path / "data", time.time()
    store = Store(data / STATE_FILE)
    try:
        ledger = JobLedger(store, clock=lambda: now)
        handler = JobHandler(DEVICE, data, admission=Admission(DEVICE, PROFILE, fleet.trusted, ledger, 60.0,
                                                               clock=lambda: now))

        def send(body):
            return handler.handle(wire.Envelope(DEVICE, 1, wire.BENCHMARK_JOB, body).encode())["error"]["kind"]

        assert send(job(fleet, job_id="mine", issued_at=now - 10)) == ADMITTED
        before, copy = ledger.state(), (data / COPY_FILE).read_bytes()
        assert before.marks[CLOCK_MARK] == now
        theirs = job(fleet, job_id="theirs", devices=(OTHER,), issued_at=now + 40,
                     release=wire.Release("net.py:build", 3.0))
        assert send(theirs) == "wrong_target"
        after = ledger.state()
        assert (after.jobs, after.releases, after.marks) == (before.jobs, before.releases, before.marks)
        assert not ledger.seen("theirs") and ledger.mark(CLOCK_MARK) == now
        assert (data / COPY_FILE).read_bytes() == copy
    finally:
        store.close()


def test_one_signed_job_serves_the_devices_of_a_profile_and_no_other_profile(tmp_path, fleet):
    rollout = job(fleet, devices=(DEVICE, OTHER), profile=PROFILE)
    assert Board(tmp_path / "a", fleet.trusted, DEVICE).send(rollout)[0] == ADMITTED
    assert Board(tmp_path / "b", fleet.trusted, OTHER).send(rollout)[0] == ADMITTED
    assert Board(tmp_path / "c", fleet.trusted, "dev-c").send(rollout)[0] == "wrong_target"  # not named
    pi = Board(tmp_path / "pi", fleet.trusted, DEVICE, profile="rpi5")  # named, but another profile
    assert pi.send(rollout)[0] == "wrong_target"
    any_x86 = job(fleet, job_id="j2", devices=None, profile=PROFILE)
    assert Board(tmp_path / "d", fleet.trusted, "dev-d").send(any_x86)[0] == ADMITTED
    assert pi.send(any_x86)[0] == "wrong_target"


def test_an_older_build_of_a_model_is_refused_unless_the_signed_job_allows_it(board, fleet):
    def release(version, job_id, **options):
        return job(fleet, job_id=job_id, release=wire.Release("resnet.py:net", version), **options)

    assert board.send(release(2000.0, "v2"))[0] == ADMITTED
    kind, answer = board.send(release(1000.0, "v1"))
    assert kind == "downgrade" and "--allow-downgrade" in answer["error"]["message"]
    assert board.send(job(fleet, job_id="other-model", release=wire.Release("other.py:net", 1.0)))[0] == ADMITTED
    assert board.send(release(2000.0, "v2-again"))[0] == ADMITTED  # the same build again is fine
    unsigned_allow = dict(release(1000.0, "v1-b"), allow_downgrade=True)  # added after signing
    assert board.send(unsigned_allow)[0] == "signature_invalid"
    assert board.restart().send(release(1000.0, "v1-c"))[0] == "downgrade"
    assert board.send(release(1000.0, "v1-d", allow_downgrade=True))[0] == ADMITTED
    assert board.send(release(1000.0, "v1-e"))[0] == ADMITTED  # the last accepted is now the older one


def test_remembered_job_ids_are_forgotten_once_their_job_has_expired(tmp_path):
    ledger = JobLedger(Store(tmp_path / STATE_FILE))
    ledger.remember("old", keep_until=100.0, now=50.0)
    ledger.remember("current", keep_until=300.0, now=150.0)
    assert ledger.remembered() == 1 and ledger.seen("current") and not ledger.seen("old")


def test_without_a_trusted_key_jobs_run_unchecked_and_the_agent_says_so(tmp_path, fleet, caplog):
    board = Board(tmp_path / "data", None)
    caplog.set_level(logging.WARNING, logger="edgeopt_agent.daemon.admission")
    assert board.send(job(fleet, signed=False, devices=(OTHER,)))[0] == ADMITTED  # as before: no checks
    assert "without checking who sent it" in caplog.text
    assert not (board.data_dir / STATE_FILE).exists()  # and nothing remembered


def test_the_statement_is_what_the_agent_parsed(fleet):
    """A key repeated in the JSON: the agent checks the signature over the value it will use."""
    body = job(fleet)
    raw = json.dumps(wire.job_message(DEVICE, 1, body).to_dict())
    doubled = raw.replace('"bench": {', '"bench": {"runs": 99999, ', 1).replace('"bench":{', '"bench":{"runs":99999,', 1)
    assert doubled != raw
    parsed = wire.parse_job(wire.Envelope.decode(doubled.encode()))
    signing.check_signature(fleet.trusted, parsed)  # the later key wins in the parse, as when signed
    assert parsed.bench["runs"] == QUICK_BENCH["runs"]
