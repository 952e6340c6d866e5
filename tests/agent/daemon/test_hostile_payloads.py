"""Bounded fuzzing of what reaches the agent over MQTT: job envelopes and transfer chunks.

Every hostile job is answered with an error result the agent meant to give (never
`internal_error`, the catch-all for agent bugs) that can itself be sent; every hostile chunk is
dropped by the checks made for it (never by the catch-all that logs a traceback); and the agent
still runs a valid job afterwards. The seeded cases run in-process here, and once more through a
real agent process and broker.
"""
from __future__ import annotations

import json
import logging
import random
import time

import pytest
from agent_harness import Listener
from harness import QUICK_BENCH, AgentProcess, write_tiny_onnx
from hostile_payloads import hostile_payloads, oversized

from edgeopt_agent import wire
from edgeopt_agent.daemon.jobs import JobHandler
from edgeopt_agent.daemon.artifact_transfer import Transfers

DEVICE = "fuzz-dev"
# A job that survives its mutation runs for real: huge run counts are capped by max_duration_s.
FUZZ_BENCH = dict(QUICK_BENCH, max_duration_s=0.05, timeout_s=20)
CATCH_ALL_MESSAGES = ("could not be handled", "failed inside the agent", "could not ask for the chunks")


@pytest.fixture
def agent_parts(tmp_path):
    data_dir = tmp_path / "data"
    sha = write_tiny_onnx(data_dir / "models" / "tiny.onnx")
    asked = []
    transfers = Transfers(DEVICE, data_dir, request=asked.append, idle_timeout_s=0.05)
    return sha, JobHandler(DEVICE, data_dir, transfers=transfers), transfers


def job_template(sha, meta=None):
    job = wire.benchmark_job(DEVICE, 1, "fuzz", sha, "onnx", path="models/tiny.onnx", meta=meta, **FUZZ_BENCH)
    return json.loads(job.encode())


def chunk_template(sha):
    return json.loads(wire.chunk_message(DEVICE, 1, sha, 0, b"\x00" * 1024).encode())


def chunked_job_template(sha):
    plan = wire.ChunkPlan(chunk_size=1024, sha256=("0" * 64, "1" * 64))
    job = wire.benchmark_job(DEVICE, 1, "fuzz-chunks", sha, "onnx", chunks=plan, size=2048, **FUZZ_BENCH)
    return json.loads(job.encode())


def catch_all_records(caplog):
    return [r for r in caplog.records if any(text in r.getMessage() for text in CATCH_ALL_MESSAGES)]


def assert_answered(label, body):
    """A result body the agent meant to send, and that can be sent."""
    assert isinstance(body, dict) and isinstance(body.get("ok"), bool), label
    if not body["ok"]:
        assert body["error"]["kind"] != "internal_error", (label, body["error"])
        assert body["error"]["message"].strip(), label
    wire.Envelope(device_id=DEVICE, seq=1, type=wire.RESULT_TYPE, body=body).encode()


def run_job_cases(handler, transfers, template, count, seed):
    """What Agent._on_message and the worker do with each payload, in order."""
    kinds = {}
    cases = list(hostile_payloads(random.Random(seed), template, count))
    cases.append(("oversized", oversized(template, f"seed {seed}")))
    for label, payload in cases:
        stored = payload[: wire.MAX_MESSAGE_BYTES + 1]  # as the agent keeps it in its inbox
        transfers.job_arrived(payload)
        body = handler.handle(stored)
        assert_answered(label, body)
        kind = "ok" if body["ok"] else body["error"]["kind"]
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


@pytest.mark.parametrize("count, seed", [(150, 1), pytest.param(400, 2, marks=pytest.mark.slow)])
def test_hostile_jobs_are_answered_and_a_valid_job_still_runs(agent_parts, caplog, count, seed):
    sha, handler, transfers = agent_parts
    caplog.set_level(logging.INFO)
    started = time.monotonic()
    kinds = run_job_cases(handler, transfers, job_template(sha), count, seed)
    # Jobs echo their meta in the result, and chunked jobs go through the transfer code first.
    with_meta = run_job_cases(handler, transfers, job_template(sha, {"model": "tiny", "tags": ["a", "b"]}),
                              count // 5, seed + 100)
    chunked = run_job_cases(handler, transfers, chunked_job_template(sha), count // 5, seed + 200)
    assert catch_all_records(caplog) == []
    assert kinds.get("malformed_message", 0) > 0 and kinds.get("invalid_job", 0) > 0, kinds
    assert sum(with_meta.values()) == sum(chunked.values()) == count // 5 + 1
    valid = handler.handle(json.dumps(job_template(sha)).encode())
    assert valid["ok"] is True, valid["error"]
    print(f"{count} + 2 x {count // 5} hostile jobs answered in {time.monotonic() - started:.1f} s: "
          f"{kinds}; with meta: {with_meta}; chunked: {chunked}")


@pytest.mark.parametrize("count, seed", [(400, 3), pytest.param(4000, 4, marks=pytest.mark.slow)])
def test_hostile_chunks_are_dropped_by_their_checks(agent_parts, caplog, count, seed):
    sha, handler, transfers = agent_parts
    caplog.set_level(logging.INFO)
    template = chunk_template(sha)
    cases = list(hostile_payloads(random.Random(seed), template, count))
    cases.append(("oversized", oversized(template, "chunk")))
    for label, payload in cases:
        transfers.chunk_arrived(payload)  # never raises by contract; the log says which path took it
    assert catch_all_records(caplog) == []
    assert any("dropping a chunk message" in r.getMessage() for r in caplog.records)
    valid = handler.handle(json.dumps(job_template(sha)).encode())
    assert valid["ok"] is True, valid["error"]


@pytest.mark.slow
def test_a_real_agent_answers_hostile_messages_and_keeps_serving(mqtt_broker, tmp_path):
    data_dir = tmp_path / "agent-data"
    sha = write_tiny_onnx(data_dir / "models" / "tiny.onnx")
    listener = Listener(mqtt_broker, DEVICE)
    agent = AgentProcess(mqtt_broker, data_dir, DEVICE).start()
    try:
        listener.wait_for("status", lambda e: e["body"]["state"] == "online")
        rng = random.Random(5)
        jobs = [payload for _, payload in hostile_payloads(rng, job_template(sha), 60)]
        jobs.append(oversized(job_template(sha), "real agent"))
        chunks = [payload for _, payload in hostile_payloads(rng, chunk_template(sha), 60)]
        for payload in chunks:
            listener._client.publish(wire.chunks_topic(DEVICE), payload, qos=1).wait_for_publish(20)
        for payload in jobs:
            listener.send_job(payload)
        valid = wire.benchmark_job(DEVICE, 999, "after-the-storm", sha, "onnx", path="models/tiny.onnx",
                                       **QUICK_BENCH)
        listener.send_job(valid.encode())
        body = listener.wait_for("results", lambda e: e["body"].get("job_id") == "after-the-storm", timeout=120)["body"]
        assert body["ok"] is True, body["error"]
        # Each distinct job message (as the agent stores it) got exactly one answer, none of them a bug's.
        distinct = len({payload[: wire.MAX_MESSAGE_BYTES + 1] for payload in jobs}) + 1
        answers = listener.of("results")
        assert len(answers) == distinct, (len(answers), distinct)
        assert not [a for a in answers if (a["body"].get("error") or {}).get("kind") == "internal_error"]
        assert agent.alive()
        assert "Traceback" not in agent.log()
    finally:
        agent.close()
        listener.close()
