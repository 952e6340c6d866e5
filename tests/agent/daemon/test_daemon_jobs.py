"""Job handling in-process: every bad input becomes an error result naming its kind; good jobs run the real engine."""
import base64
import hashlib
import json

import pytest
from agent_harness import job
from harness import QUICK_BENCH, write_tiny_onnx

from edgeopt_agent import wire
from edgeopt_agent.daemon.config import build_config
from edgeopt_agent.daemon.jobs import MAX_ATTEMPTS, JobHandler

DEVICE = "dev-1"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("agent-data")
    write_tiny_onnx(folder / "models" / "tiny.onnx")
    (folder / "models" / "garbage.onnx").write_bytes(b"\x08\x01garbage, not a protobuf" * 4)
    (folder.parent / "outside.onnx").write_bytes(b"outside")
    return folder


@pytest.fixture(scope="module")
def handler(data_dir):
    return JobHandler(DEVICE, data_dir)


def sha_of(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def benchmark(data_dir, name="tiny.onnx", **bench):
    path = data_dir / "models" / name
    return wire.benchmark_job(DEVICE, 1, f"job-{name}", sha_of(path), "onnx", path=f"models/{name}",
                                  **dict(QUICK_BENCH, **bench))


def test_a_job_by_path_runs_the_engine(handler, data_dir):
    envelope = benchmark(data_dir)
    body = handler.handle(envelope.encode())
    assert body["ok"] is True, body["error"]
    assert (body["job_id"], body["job_type"], body["request_id"]) == ("job-tiny.onnx", "benchmark", envelope.id)
    result = body["result"]
    assert result["runtime"] == "onnxruntime" and result["runs"] >= 5
    assert result["latency_ms"]["p50"] > 0 and len(result["output_sha256"]) == 64


def test_meta_is_echoed_in_results_and_errors(handler, data_dir):
    meta = {"model": "tiny", "precision": "fp32", "accuracy_drop_points": 0.0}
    path = data_dir / "models" / "tiny.onnx"
    good = wire.benchmark_job(DEVICE, 1, "m1", sha_of(path), "onnx", path="models/tiny.onnx", meta=meta,
                                  **QUICK_BENCH)
    assert handler.handle(good.encode())["meta"] == meta
    refused = wire.benchmark_job(DEVICE, 2, "m2", "0" * 64, "onnx", path="models/tiny.onnx", meta=meta)
    body = handler.handle(refused.encode())
    assert body["ok"] is False and body["meta"] == meta


def test_an_inline_job_is_written_then_run(handler, data_dir):
    data = (data_dir / "models" / "tiny.onnx").read_bytes()
    envelope = wire.benchmark_job(DEVICE, 2, "inline", hashlib.sha256(data).hexdigest(), "onnx", data=data,
                                      **QUICK_BENCH)
    body = handler.handle(envelope.encode())
    assert body["ok"] is True, body["error"]
    assert (data_dir / "artifacts" / f"{hashlib.sha256(data).hexdigest()}.onnx").read_bytes() == data


def error_of(body, from_engine=False):
    """An agent-side refusal carries no result; an engine failure carries the engine's own (ok: false) result."""
    assert body["ok"] is False
    if from_engine:
        assert body["result"]["ok"] is False and body["result"]["error"] == body["error"]
    else:
        assert body["result"] is None
    return body["error"]["kind"], body["error"]["message"]


def test_malformed_json(handler):
    body = handler.handle(b"{this is not json")
    assert error_of(body)[0] == "malformed_message"
    assert (body["job_id"], body["request_id"]) == (None, None)


@pytest.mark.parametrize("payload", [b"[" * 5000, b'{"id": ' * 5000])
def test_a_message_that_cannot_be_parsed_is_answered_not_raised(handler, payload):
    assert error_of(handler.handle(payload))[0] == "malformed_message"


def test_a_number_too_big_for_a_float_is_a_malformed_message(handler, data_dir):
    message = dict(benchmark(data_dir).to_dict(), ts=10 ** 400)
    body = handler.handle(json.dumps(message).encode())
    assert error_of(body)[0] == "malformed_message" and body["job_id"] == "job-tiny.onnx"


def test_a_message_for_another_device(handler, data_dir):
    envelope = job("dev-2", benchmark(data_dir).body)
    body = handler.handle(envelope.encode())
    assert error_of(body)[0] == "wrong_device"
    assert body["request_id"] == envelope.id and body["job_id"] == "job-tiny.onnx"


def test_unknown_job_type(handler):
    envelope = job(DEVICE, {"job_id": "j-1"}, job_type="reboot")
    body = handler.handle(envelope.encode())
    kind, message = error_of(body)
    assert kind == "unknown_job_type" and "benchmark" in message
    assert (body["job_id"], body["job_type"], body["request_id"]) == ("j-1", "reboot", envelope.id)


def test_missing_artifact(handler, data_dir):
    artifact = {"sha256": "0" * 64, "format": "onnx", "path": "models/absent.onnx"}
    body = handler.handle(job(DEVICE, {"job_id": "j", "artifact": artifact}).encode())
    assert error_of(body)[0] == "missing_artifact"


def test_sha256_mismatch_is_refused_before_loading(handler, data_dir):
    artifact = {"sha256": "1" * 64, "format": "onnx", "path": "models/tiny.onnx"}
    body = handler.handle(job(DEVICE, {"job_id": "j", "artifact": artifact}).encode())
    assert error_of(body)[0] == "artifact_mismatch"
    assert body["job_id"] == "j"


def test_corrupt_inline_data(handler):
    artifact = {"sha256": "2" * 64, "format": "onnx", "data_b64": base64.b64encode(b"bytes").decode()}
    body = handler.handle(job(DEVICE, {"job_id": "j", "artifact": artifact}).encode())
    assert error_of(body)[0] == "artifact_mismatch"


@pytest.mark.parametrize("path", ["../outside.onnx", "/etc/passwd"])
def test_paths_escaping_the_data_dir(handler, data_dir, path):
    artifact = {"sha256": hashlib.sha256(b"outside").hexdigest(), "format": "onnx", "path": path}
    body = handler.handle(job(DEVICE, {"job_id": "j", "artifact": artifact}).encode())
    assert error_of(body)[0] == "invalid_path"


def test_input_file_is_confined_too(handler, data_dir):
    body = handler.handle(benchmark(data_dir, input_file="../outside.onnx").encode())
    kind, message = error_of(body)
    assert kind == "invalid_path" and "input file" in message


def test_input_file_must_be_under_models(handler, data_dir):
    (data_dir / "agent.db").touch()
    kind, message = error_of(handler.handle(benchmark(data_dir, input_file="agent.db").encode()))
    assert kind == "invalid_path" and "not under models/" in message


@pytest.mark.parametrize("option, value", [("timeout_s", 1801), ("max_duration_s", 601), ("idle_s", 61)])
def test_bench_options_over_the_agents_limits_are_refused(handler, data_dir, option, value):
    kind, message = error_of(handler.handle(benchmark(data_dir, **{option: value}).encode()))
    assert kind == "invalid_job" and f"'{option}' is {value} s, over this agent's limit" in message


def test_the_limits_come_from_the_config(tmp_path):
    limits = build_config({"device_id": DEVICE, "max_job_timeout": 10.0}).bench_limits
    handler = JobHandler(DEVICE, tmp_path, limits=limits)
    kind, message = error_of(handler.handle(benchmark_for(tmp_path, timeout_s=11)))
    assert kind == "invalid_job" and "limit of 10 s" in message


def benchmark_for(data_dir, **bench) -> bytes:
    sha = write_tiny_onnx(data_dir / "models" / "tiny.onnx")
    return wire.benchmark_job(DEVICE, 1, "j", sha, "onnx", path="models/tiny.onnx",
                                  **dict(QUICK_BENCH, **bench)).encode()


def test_a_model_the_runtime_cannot_load(handler, data_dir):
    body = handler.handle(benchmark(data_dir, name="garbage.onnx").encode())
    assert error_of(body, from_engine=True)[0] == "bad_artifact"


def test_a_hanging_benchmark_is_killed(handler, data_dir):
    body = handler.handle(benchmark(data_dir, timeout_s=0.05).encode())
    assert error_of(body, from_engine=True)[0] == "timeout"


def test_options_the_engine_refuses(handler, data_dir):
    path = data_dir / "models" / "tiny.onnx"  # sent as is: `wire.benchmark_job` would refuse it on the host
    body = wire.benchmark_body("j", sha_of(path), "onnx", path="models/tiny.onnx", runtime="pytorch")
    body = handler.handle(wire.Envelope(device_id=DEVICE, seq=1, type=wire.BENCHMARK_JOB, body=body).encode())
    kind, message = error_of(body)
    assert kind == "invalid_job" and "pytorch" in message


def test_a_job_interrupted_too_often_is_not_run_again(handler, data_dir):
    body = handler.handle(benchmark(data_dir).encode(), attempts=MAX_ATTEMPTS + 1)
    kind, message = error_of(body)
    assert kind == "interrupted" and "interrupted 2 times" in message


def test_every_answer_is_valid_json_in_an_envelope(handler):
    body = handler.handle(b"\xff")
    envelope = wire.Envelope(device_id=DEVICE, seq=1, type=wire.RESULT_TYPE, body=body)
    assert json.loads(envelope.encode())["body"]["error"]["kind"] == "malformed_message"


def test_a_job_received_before_a_restart_is_answered_after_it(tmp_path):
    import time

    from edgeopt_agent.daemon.agent import Agent
    from edgeopt_agent.daemon.config import build_config
    from edgeopt_agent.daemon.inbox import Inbox
    from edgeopt_agent.daemon.store import STATE_FILE, Store

    data_dir = tmp_path / "data"
    sha = write_tiny_onnx(data_dir / "models" / "tiny.onnx")
    job_message = wire.benchmark_job(DEVICE, 1, "before-restart", sha, "onnx", path="models/tiny.onnx",
                                         **QUICK_BENCH)
    store = Store(data_dir / STATE_FILE)
    Inbox(store).add(job_message.encode())  # received, then the agent stopped
    store.close()

    agent = Agent(build_config({"device_id": DEVICE, "data_dir": str(data_dir)}))
    agent.worker.start()
    deadline = time.monotonic() + 60
    while not len(agent.outbox) and time.monotonic() < deadline:
        time.sleep(0.05)
    agent.worker.stop()
    [message] = agent.outbox.pending()
    answer = json.loads(message.payload)
    assert message.topic == wire.results_topic(DEVICE)
    assert answer["body"]["job_id"] == "before-restart" and answer["body"]["ok"] is True
    assert agent.inbox.open_count() == 0
