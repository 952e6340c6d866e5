"""The "profile" job option: the agent runs onnxruntime's per-op profiler and publishes it with the result."""
from __future__ import annotations

import hashlib

import pytest
from harness import QUICK_BENCH, write_tiny_onnx

from edgeopt_agent import wire
from edgeopt_agent.bench import BenchmarkSpec
from edgeopt_agent.daemon.jobs import JobHandler
from edgeopt_agent.errors import UserError

DEVICE = "dev-p"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("agent-data")
    write_tiny_onnx(folder / "models" / "tiny.onnx")
    return folder


def _job(data_dir, **bench):
    sha = hashlib.sha256((data_dir / "models" / "tiny.onnx").read_bytes()).hexdigest()
    return wire.benchmark_job(DEVICE, 1, "job-profile", sha, "onnx", path="models/tiny.onnx",
                                  **dict(QUICK_BENCH, **bench))


def test_a_profiled_job_publishes_per_op_times_with_its_result(data_dir):
    body = JobHandler(DEVICE, data_dir).handle(_job(data_dir, profile=True).encode())
    assert body["ok"] is True, body["error"]
    profile = body["result"]["op_profile"]
    assert profile["profiler"] == "onnxruntime" and profile["runs"] >= 1
    assert profile["nodes"] and all(n["ms"] >= 0 and n["calls"] == profile["runs"] for n in profile["nodes"])
    assert sum(t["nodes"] for t in profile["op_types"]) == profile["node_count"]
    assert body["result"]["spec"]["profile"] is True


def test_without_the_option_there_is_no_profile(data_dir):
    body = JobHandler(DEVICE, data_dir).handle(_job(data_dir).encode())
    assert body["ok"] is True and "op_profile" not in body["result"]


def test_the_option_must_be_a_boolean(data_dir):
    with pytest.raises(wire.ProtocolError, match="true or false"):
        _job(data_dir, profile="yes")
    with pytest.raises(UserError, match="true or false"):
        BenchmarkSpec(artifact="m.onnx", profile=1)
