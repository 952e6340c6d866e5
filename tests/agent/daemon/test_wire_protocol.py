import base64
import hashlib
import json

import pytest

from edgeopt_agent import wire
from edgeopt_agent.errors import UserError
from edgeopt_agent.wire import Envelope, ProtocolError

SHA = hashlib.sha256(b"model").hexdigest()


def envelope_dict(**changes):
    data = Envelope(device_id="rpi-01", seq=3, type="telemetry", body={"x": 1}).to_dict()
    data.update(changes)
    return data


def encode(data) -> bytes:
    return json.dumps(data).encode()


def test_topics_build_and_parse_back():
    assert wire.status_topic("rpi-01") == "edgeopt/v1/rpi-01/status"
    assert wire.jobs_topic("rpi-01") == "edgeopt/v1/rpi-01/jobs"
    for kind in wire.TOPIC_KINDS:
        assert wire.parse_topic(wire.topic("jetson_7.a", kind)) == ("jetson_7.a", kind)
    assert wire.subscription("results") == "edgeopt/v1/+/results"
    assert wire.subscription(None, "rpi-01") == "edgeopt/v1/rpi-01/#"
    assert wire.shared_subscription("collectors", "telemetry") == "$share/collectors/edgeopt/v1/+/telemetry"


@pytest.mark.parametrize("name", ["edgeopt/v1/rpi/other", "edgeopt/v2/rpi/status", "edgeopt/v1/status",
                                  "edgeopt/v1/a/b/status", "x/edgeopt/v1/rpi/status"])
def test_foreign_topics_are_refused(name):
    with pytest.raises(ProtocolError):
        wire.parse_topic(name)


@pytest.mark.parametrize("device_id", ["", "a/b", "+", "#", "-lead", "x" * 65, "sp ace", "ü"])
def test_device_ids_that_are_not_one_topic_level_are_refused(device_id):
    with pytest.raises(ProtocolError, match="invalid device id"):
        wire.topic(device_id, "status")


def test_envelope_round_trip_and_fields():
    sent = Envelope(device_id="rpi-01", seq=7, type="telemetry", body={"cpu": {"load": 0.5}})
    received = Envelope.decode(sent.encode(), expect_device="rpi-01")
    assert received == sent
    assert len(sent.id) == 32 and int(sent.id, 16) >= 0
    assert sent.schema == wire.SCHEMA_VERSION
    assert set(json.loads(sent.encode())) == {"id", "device_id", "seq", "ts", "schema", "type", "body"}
    assert Envelope(device_id="a", seq=1, type="t", body={}).id != Envelope(device_id="a", seq=1, type="t", body={}).id


def test_non_finite_numbers_become_null_so_the_json_stays_valid():
    payload = Envelope(device_id="a", seq=1, type="result", body={"std": float("nan"), "l": [float("inf"), 1.5]}).encode()
    assert json.loads(payload)["body"] == {"std": None, "l": [None, 1.5]}
    assert b"NaN" not in payload


@pytest.mark.parametrize(
    "payload, kind, fragment",
    [
        (b"{not json", "malformed_message", "not valid UTF-8 JSON"),
        (b"\xff\xfe", "malformed_message", "not valid UTF-8 JSON"),
        (b"[1, 2]", "malformed_message", "JSON object"),
        (encode({"id": "a"}), "malformed_message", "lacks device_id"),
        (encode(envelope_dict(schema=2)), "unsupported_schema", "schema 2"),
        (encode(envelope_dict(schema="1")), "malformed_message", "'schema'"),
        (encode(envelope_dict(id="xyz")), "malformed_message", "'id'"),
        (encode(envelope_dict(seq=-1)), "malformed_message", "'seq'"),
        (encode(envelope_dict(seq=True)), "malformed_message", "'seq'"),
        (encode(envelope_dict(ts="yesterday")), "malformed_message", "'ts'"),
        (encode(envelope_dict(ts=10 ** 400)), "malformed_message", "'ts'"),
        (b"[" * 5000, "malformed_message", "nested too deeply"),
        (b'{"x": ' * 5000, "malformed_message", "nested too deeply"),
        (encode(envelope_dict(type="")), "malformed_message", "'type'"),
        (encode(envelope_dict(body=[1])), "malformed_message", "'body'"),
        (encode(envelope_dict(device_id="a/b")), "malformed_message", "invalid device id"),
        (encode(envelope_dict(device_id="rpi-02")), "wrong_device", "addressed to device 'rpi-02'"),
    ],
)
def test_malformed_messages_are_refused_with_a_kind(payload, kind, fragment):
    with pytest.raises(ProtocolError, match=fragment) as caught:
        Envelope.decode(payload, expect_device="rpi-01")
    assert caught.value.kind == kind
    assert isinstance(caught.value, UserError)


def test_oversized_messages_are_refused_before_parsing():
    with pytest.raises(ProtocolError, match="over the 100-byte limit") as caught:
        Envelope.decode(b" " * 101, max_bytes=100)
    assert caught.value.kind == "oversized"


def test_benchmark_job_by_path_and_inline():
    by_path = wire.benchmark_job("rpi-01", 1, "job-1", SHA, "onnx", path="models/m.onnx", runs=50, batch_sizes=(1, 4))
    job = wire.parse_job(Envelope.decode(by_path.encode(), expect_device="rpi-01"))
    assert job.job_id == "job-1" and job.request_id == by_path.id
    assert job.artifact.path == "models/m.onnx" and job.artifact.data_b64 is None
    assert job.bench == {"runs": 50, "batch_sizes": [1, 4]}  # as the job carries them
    assert job.meta is None

    with_meta = wire.benchmark_job("rpi-01", 3, "job-3", SHA, "onnx", path="m.onnx", meta={"precision": "int8"})
    assert wire.parse_job(with_meta).meta == {"precision": "int8"}

    inline = wire.benchmark_job("rpi-01", 2, "job-2", SHA, "tflite", data=b"model")
    job = wire.parse_job(Envelope.decode(inline.encode()))
    assert job.artifact.inline_bytes() == b"model"
    assert job.artifact.format == "tflite"


def job_envelope(body, job_type="benchmark"):
    return Envelope(device_id="rpi-01", seq=1, type=job_type, body=body)


GOOD_ARTIFACT = {"sha256": SHA, "format": "onnx", "path": "m.onnx"}


def test_a_job_describes_how_to_feed_its_inputs():
    inputs = [{"name": "serving_default_args_0", "alias": "input", "shape": [1, 512], "dtype": "float32"},
              {"name": "sr", "shape": [], "dtype": "int64", "value": 16000}]
    job = wire.parse_job(wire.benchmark_job("rpi-01", 1, "job-1", SHA, "onnx", path="m.onnx", inputs=inputs))
    assert job.bench["inputs"] == inputs


@pytest.mark.parametrize(
    "body, kind, fragment",
    [
        ({"artifact": GOOD_ARTIFACT}, "invalid_job", "job_id"),
        ({"job_id": "j", "artifact": GOOD_ARTIFACT, "extra": 1}, "invalid_job", "unknown job field"),
        ({"job_id": "j"}, "invalid_job", "needs 'artifact'"),
        ({"job_id": "j", "artifact": dict(GOOD_ARTIFACT, sha256="ABC")}, "invalid_job", "sha256"),
        ({"job_id": "j", "artifact": dict(GOOD_ARTIFACT, format="pt")}, "invalid_job", "'format'"),
        ({"job_id": "j", "artifact": dict(GOOD_ARTIFACT, data_b64="bW9kZWw=")}, "invalid_job", "exactly one"),
        ({"job_id": "j", "artifact": {"sha256": SHA, "format": "onnx"}}, "invalid_job", "exactly one"),
        ({"job_id": "j", "artifact": GOOD_ARTIFACT, "signature": "x"}, "invalid_job",
         "'signature' must be an object"),
        ({"job_id": "j", "artifact": dict(GOOD_ARTIFACT, signature={})}, "invalid_job", "unknown artifact field"),
        ({"job_id": "j", "artifact": GOOD_ARTIFACT, "signature": {"alg": "rsa", "key_id": "k", "value": "x"}},
         "signature_invalid", "not one of ed25519"),
        ({"job_id": "j", "artifact": GOOD_ARTIFACT, "signature": {"alg": "ed25519", "key_id": "k", "value": "c2hvcnQ="}},
         "signature_invalid", "base64 of 64 bytes"),
        ({"job_id": "j", "artifact": GOOD_ARTIFACT, "signature": {"alg": "ed25519", "key_id": "k", "value": "A" * 86 + "=="}},
         "invalid_job", "a signed job must name its 'target'"),
        ({"job_id": "j", "artifact": GOOD_ARTIFACT, "target": {"devices": []}}, "invalid_job", "1-10000 device ids"),
        ({"job_id": "j", "artifact": GOOD_ARTIFACT, "target": {}}, "invalid_job", "'devices', a 'profile', or both"),
        ({"job_id": "j", "artifact": GOOD_ARTIFACT, "target": {"devices": ["a/b"]}}, "invalid_device_id", "a/b"),
        ({"job_id": "j", "artifact": GOOD_ARTIFACT, "issued_at": 10}, "invalid_job", "must both be seconds"),
        ({"job_id": "j", "artifact": GOOD_ARTIFACT, "issued_at": 10, "expires_at": 10}, "invalid_job",
         "must be after 'issued_at'"),
        ({"job_id": "j", "artifact": GOOD_ARTIFACT, "issued_at": 0, "expires_at": 31 * 86400}, "invalid_job",
         "at most 30 days later"),
        ({"job_id": "j", "artifact": GOOD_ARTIFACT, "release": {"model": "m"}}, "invalid_job", "exactly 'model'"),
        ({"job_id": "j", "artifact": GOOD_ARTIFACT, "allow_downgrade": 1}, "invalid_job", "true or false"),
        ({"job_id": "j", "artifact": dict(GOOD_ARTIFACT, chunks=3)}, "invalid_job", "exactly one"),
        ({"job_id": "j", "artifact": GOOD_ARTIFACT, "bench": {"runz": 1}}, "invalid_job", "unknown bench option"),
        ({"job_id": "j", "artifact": GOOD_ARTIFACT, "bench": {"runs": "10"}}, "invalid_job", "'runs'"),
        ({"job_id": "j", "artifact": GOOD_ARTIFACT, "bench": {"runs": None}}, "invalid_job", "may not be null"),
        ({"job_id": "j", "artifact": GOOD_ARTIFACT, "bench": {"batch_sizes": [0]}}, "invalid_job", "batch_sizes"),
        ({"job_id": "j", "artifact": GOOD_ARTIFACT, "bench": {"duration_s": float("inf")}}, "invalid_job", "duration_s"),
        ({"job_id": "j", "artifact": GOOD_ARTIFACT, "bench": []}, "invalid_job", "'bench' must be an object"),
        ({"job_id": "j", "artifact": GOOD_ARTIFACT, "bench": {"inputs": {"x": [1]}}}, "invalid_job", "'inputs' must be a list"),
        ({"job_id": "j", "artifact": GOOD_ARTIFACT, "bench": {"inputs": [{"name": "x", "shape": [-1]}]}}, "invalid_job",
         "'inputs' 'x' needs a 'shape'"),
        ({"job_id": "j", "artifact": GOOD_ARTIFACT, "bench": {"inputs": [{"name": "x", "shape": [2**20, 2**20]}]}},
         "invalid_job", "more than"),
        ({"job_id": "j", "artifact": GOOD_ARTIFACT, "bench": {"inputs": [{"name": "x", "shape": [], "value": "16k"}]}},
         "invalid_job", "'value' must be a number"),
        ({"job_id": "j", "artifact": GOOD_ARTIFACT, "bench": {"inputs": [{"name": "x", "shape": [], "code": 1}]}},
         "invalid_job", "unknown key"),
        ({"job_id": "j", "artifact": GOOD_ARTIFACT, "bench": {"inputs": [{"shape": [1]}]}}, "invalid_job", "needs a 'name'"),
        ({"job_id": "j", "artifact": GOOD_ARTIFACT, "bench": {"timeout_s": 10 ** 400}}, "invalid_job", "timeout_s"),
        ({"job_id": "j", "artifact": GOOD_ARTIFACT, "meta": "resnet"}, "invalid_job", "'meta' must be an object"),
        ({"job_id": "j", "artifact": GOOD_ARTIFACT, "meta": {"notes": "x" * 20000}}, "invalid_job", "16384-byte limit"),
        ({"job_id": "j", "artifact": GOOD_ARTIFACT, "meta": {"a": [[[[[[[[[1]]]]]]]]]}}, "invalid_job",
         "nested more than 8"),
    ],
)
def test_invalid_jobs_are_refused_with_their_job_id(body, kind, fragment):
    with pytest.raises(ProtocolError, match=fragment) as caught:
        wire.parse_job(job_envelope(body))
    assert caught.value.kind == kind
    assert caught.value.job_id == body.get("job_id")


def test_unknown_job_type_names_the_known_ones():
    with pytest.raises(ProtocolError, match="unknown job type 'reboot'; this agent runs: benchmark") as caught:
        wire.parse_job(job_envelope({"job_id": "j"}, job_type="reboot"))
    assert caught.value.kind == "unknown_job_type" and caught.value.job_id == "j"


def test_inline_artifact_size_is_capped_before_decoding():
    big = base64.b64encode(b"\0" * (wire.MAX_INLINE_ARTIFACT_BYTES + 3)).decode()
    with pytest.raises(ProtocolError, match="send its path") as caught:
        wire.parse_job(job_envelope({"job_id": "j", "artifact": {"sha256": SHA, "format": "onnx", "data_b64": big}}))
    assert caught.value.kind == "artifact_too_large"


def test_bad_base64_is_reported_when_decoded():
    job = wire.parse_job(job_envelope({"job_id": "j", "artifact": {"sha256": SHA, "format": "onnx", "data_b64": "@@"}}))
    with pytest.raises(ProtocolError, match="not valid base64"):
        job.artifact.inline_bytes()


def test_the_host_helper_refuses_to_build_a_broken_job():
    with pytest.raises(ProtocolError, match="exactly one"):
        wire.benchmark_job("rpi-01", 1, "j", SHA, "onnx")


def test_result_bodies():
    ok = wire.result_body("j", "benchmark", "r" * 32, result={"ok": True, "latency_ms": {"p50": 1.0}})
    assert ok["ok"] is True and ok["error"] is None and ok["result"]["latency_ms"] == {"p50": 1.0}
    failed = wire.result_body("j", "benchmark", None, result={"ok": False, "error": {"kind": "crash", "message": "m"}})
    assert failed["ok"] is False and failed["error"] == {"kind": "crash", "message": "m"}
    refused = wire.result_body(None, None, None, error=wire.error_info("malformed_message", "bad"))
    assert refused == {"job_id": None, "job_type": None, "request_id": None, "ok": False,
                       "error": {"kind": "malformed_message", "message": "bad"}, "result": None, "meta": None}
    echoed = wire.result_body("j", "benchmark", None, result={"ok": True}, meta={"model": "resnet"})
    assert echoed["meta"] == {"model": "resnet"}
    with pytest.raises(ValueError):
        wire.result_body("j", "benchmark", None)


def test_status_body():
    assert wire.status_body("online", "connected", profile="rpi5") == {
        "state": "online", "reason": "connected", "profile": "rpi5"}
    with pytest.raises(ProtocolError):
        wire.status_body("asleep", "x")


def test_protocol_module_uses_the_standard_library_only():
    import ast
    import sys
    from pathlib import Path

    if not hasattr(sys, "stdlib_module_names"):
        pytest.skip("sys.stdlib_module_names needs Python 3.10+")
    for module in ("errors", "topics", "envelope", "bench_options", "chunks", "jobs", "transfers", "confirms"):
        tree = ast.parse((Path(wire.__file__).parent / f"{module}.py").read_text())
        imported = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                imported.add(node.module.split(".")[0])
        assert imported <= set(sys.stdlib_module_names) | {"__future__"}, (module, imported)
