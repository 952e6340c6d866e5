"""run_benchmark end to end: a real child process running real models, and every way it can fail."""
from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

from edgeopt_agent.bench import BenchmarkSpec, run_benchmark
from edgeopt_agent.bench.inputs import random_feeds
from edgeopt_agent.bench.timing import output_digest
from edgeopt_agent.errors import UserError
from edgeopt_agent.runners import open_runner

LATENCY_KEYS = {"p50", "p90", "p95", "p99", "mean", "std", "min", "max"}


def quick(artifact, **options) -> BenchmarkSpec:
    values = dict(runs=20, duration_s=0.0, warmup_runs=2, warmup_s=0.0, threads=1, idle_s=0, timeout_s=60)
    values.update(options)
    return BenchmarkSpec(artifact=str(artifact), **values)


def expected_digest(path, batch=None, seed=0, feeds=None):
    """The output hash computed here, in-process, with the same runner and the same input."""
    with open_runner(path, threads=1) as runner:
        feeds = feeds if feeds is not None else random_feeds(runner.inputs(), batch, seed)
        return output_digest(runner.outputs(), runner.bind(runner.prepare(feeds))())


def test_result_has_every_measurement(dynamic_onnx):
    result = run_benchmark(quick(dynamic_onnx, runs=30))
    assert result["ok"] is True, result
    assert result["runtime"] == "onnxruntime" and result["threads"] == 1
    assert set(result["latency_ms"]) == LATENCY_KEYS
    lat = result["latency_ms"]
    assert 0 < lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p95"] <= lat["p99"] <= lat["max"]
    assert result["runs"] >= 30 and result["batch"] == 1
    assert result["load_ms"] > 0 and result["first_inference_ms"] > 0 and result["throughput_ips"] > 0
    assert result["peak_rss_mb"] > 0 and result["model_rss_mb"] is not None
    assert result["inputs"][0]["shape"] == ["N", 16]
    assert result["energy_per_inference_mj"] is None and result["power_reason"] == "no sensors given"
    assert result["valid"] is True and result["invalid_reasons"] == []
    assert len(result["batches"]) == 1 and result["batches"][0]["ok"]


def test_result_keeps_what_a_comparison_of_builds_needs(dynamic_onnx):
    """The latency distribution (once, at the top), what ran it and the board's state: see edgeopt fleet compare."""
    from edgeopt_agent.wire import LatencyHistogram
    from edgeopt_agent.wire.latency_histogram import RELATIVE_ACCURACY

    result = run_benchmark(quick(dynamic_onnx, runs=50, batch_sizes=(1, 2)))
    assert result["ok"] is True, result
    histogram = LatencyHistogram.from_dict(result["latency_histogram"])
    assert histogram.count == result["runs"] >= 50
    for p in (50, 90, 99):
        assert histogram.percentile(p) == pytest.approx(result["latency_ms"][f"p{p}"], rel=RELATIVE_ACCURACY * 1.001)
    assert all("latency_histogram" not in batch for batch in result["batches"])  # sent once: results stay small
    assert result["runtime_version"] and result["agent_version"]
    assert result["thermal"] == {"before_c": None, "after_c": None, "throttled": False}  # no sensors given


def test_output_hash_is_stable_and_matches_an_in_process_run(dynamic_onnx):
    first = run_benchmark(quick(dynamic_onnx, seed=3))
    second = run_benchmark(quick(dynamic_onnx, seed=3))
    other_seed = run_benchmark(quick(dynamic_onnx, seed=4))
    assert first["output_sha256"] == second["output_sha256"] == expected_digest(dynamic_onnx, seed=3)
    assert first["output_stable"] is True
    assert other_seed["output_sha256"] != first["output_sha256"]


def test_quantized_tflite_model(int8_tflite):
    path = int8_tflite[0]
    result = run_benchmark(quick(path))
    assert result["ok"] is True, result
    assert result["runtime"] == "tflite" and result["xnnpack"] is True
    assert result["inputs"][0]["dtype"] == "int8" and result["inputs"][0]["quantization"]["scale"] > 0
    assert result["output_sha256"] == expected_digest(path)


def test_batch_sweep_and_latency_budget(dynamic_onnx):
    result = run_benchmark(quick(dynamic_onnx, batch_sizes=(1, 2, 4), latency_budget_ms=60_000))
    assert result["ok"] is True
    assert [b["batch"] for b in result["batches"]] == [1, 2, 4]
    assert all(b["ok"] and set(b["latency_ms"]) == LATENCY_KEYS for b in result["batches"])
    assert result["max_batch_within_budget"] == 4
    assert result["batches"][2]["output_sha256"] == expected_digest(dynamic_onnx, batch=4)

    tight = run_benchmark(quick(dynamic_onnx, batch_sizes=(1, 2), latency_budget_ms=1e-9))
    assert tight["max_batch_within_budget"] is None
    assert "no batch size has p90 within" in tight["budget_reason"]


def test_fixed_batch_model_reports_the_batches_it_cannot_run(fixed_onnx):
    result = run_benchmark(quick(fixed_onnx, batch_sizes=(1, 4)))
    assert result["ok"] is True and result["batch"] == 1
    bad = result["batches"][1]
    assert bad["batch"] == 4 and bad["ok"] is False
    assert bad["error"]["kind"] == "unsupported"
    assert "fixed batch size of 1, so batch 4 cannot run" in bad["error"]["message"]

    only_bad = run_benchmark(quick(fixed_onnx, batch_sizes=(8,)))
    assert only_bad["ok"] is False and only_bad["error"]["kind"] == "unsupported"


def test_input_file(dynamic_onnx, tmp_path):
    data = np.random.default_rng(5).standard_normal((2, 16)).astype(np.float32)
    np.savez(tmp_path / "inputs.npz", x=data)
    result = run_benchmark(quick(dynamic_onnx, input_file=tmp_path / "inputs.npz"))
    assert result["ok"] is True and result["batch"] == 1  # two samples: one batch (the model's own, 1) per run
    assert result["input"] == {"source": "file", "path": str(tmp_path / "inputs.npz")}
    assert result["output_sha256"] == expected_digest(dynamic_onnx, feeds={"x": data[:1]})

    np.savez(tmp_path / "wrong.npz", image=data)
    wrong = run_benchmark(quick(dynamic_onnx, input_file=tmp_path / "wrong.npz"))
    assert wrong["ok"] is False and wrong["error"]["kind"] == "bad_input"
    assert "do not match the model's inputs ['x']" in wrong["error"]["message"]


def test_corrupt_model_is_a_bad_artifact_result(tmp_path):
    path = tmp_path / "corrupt.onnx"
    path.write_bytes(os.urandom(256))
    result = run_benchmark(quick(path))
    assert result["ok"] is False
    assert result["error"]["kind"] == "bad_artifact"
    assert "not a valid ONNX model" in result["error"]["message"]


def test_problems_found_before_the_child_starts_raise(tmp_path, dynamic_onnx):
    with pytest.raises(UserError, match="artifact not found"):
        run_benchmark(quick(tmp_path / "absent.onnx"))
    (tmp_path / "readme.txt").write_text("not a model")
    with pytest.raises(UserError, match="not a model"):
        run_benchmark(quick(tmp_path / "readme.txt"))
    with pytest.raises(UserError, match="input file not found"):
        run_benchmark(quick(dynamic_onnx, input_file=tmp_path / "absent.npz"))


def test_spec_may_come_as_a_job_dict(dynamic_onnx):
    result = run_benchmark({"artifact": str(dynamic_onnx), "runs": 5, "duration_s": 0, "idle_s": 0})
    assert result["ok"] is True and result["runs"] >= 5


def test_memory_limit_below_what_the_runtime_maps(dynamic_onnx):
    result = run_benchmark(quick(dynamic_onnx, memory_limit_mb=16))
    assert result["ok"] is False and result["error"]["kind"] == "out_of_memory"
    assert "memory limit of 16 MB" in result["error"]["message"]


@pytest.mark.skipif(os.environ.get("EDGEOPT_EMULATED") == "qemu-user",
                    reason="qemu-user does not apply a guest's RLIMIT_AS (it would limit the emulator): "
                           "the 1.2 GB allocation succeeds there (scripts/verify_arm.sh)")
def test_out_of_memory_in_one_batch_keeps_the_others(dynamic_onnx):
    # 20M x 16 float32 inputs are 1.2 GiB: more than the 1 GiB address space allowed.
    result = run_benchmark(quick(dynamic_onnx, memory_limit_mb=1024, batch_sizes=(1, 20_000_000), runs=3))
    assert result["ok"] is True and result["batches"][0]["ok"]
    assert result["batches"][1]["error"]["kind"] == "out_of_memory"


@pytest.mark.slow
def test_hang_becomes_a_timeout(dynamic_onnx):
    result = run_benchmark(quick(dynamic_onnx, duration_s=600, max_duration_s=600, timeout_s=3))
    assert result["ok"] is False and result["error"]["kind"] == "timeout"
    assert "timeout_s=3" in result["error"]["message"]


@pytest.mark.slow
def test_segfault_in_the_child_becomes_a_crash(dynamic_onnx):
    psutil = pytest.importorskip("psutil")
    box = {}
    spec = quick(dynamic_onnx, duration_s=600, max_duration_s=600, timeout_s=120)
    worker = threading.Thread(target=lambda: box.update(result=run_benchmark(spec)))
    worker.start()
    me = psutil.Process()
    deadline = time.monotonic() + 60
    child = None
    while child is None and time.monotonic() < deadline:
        kids = [p for p in me.children() if p.status() != psutil.STATUS_ZOMBIE]
        child = next((p for p in kids if "edgeopt_agent.bench.child" in " ".join(p.cmdline())), None)
        time.sleep(0.05)
    assert child is not None, "the benchmark child never started"
    os.kill(child.pid, signal.SIGSEGV)
    worker.join(60)
    result = box["result"]
    assert result["ok"] is False and result["error"]["kind"] == "crash"
    assert "SIGSEGV" in result["error"]["message"]
