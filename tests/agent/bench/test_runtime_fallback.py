"""The engine runs the runtime a job names, falls back to the job's `fallback_runtimes` only when that
runtime is not on this machine (and says so, with the reason), and caps threads at the CPUs it may
use (and says so). Without fallback_runtimes a missing runtime stays an error
(test_tensorrt_unavailable.py)."""
from __future__ import annotations

import importlib.util

import pytest

from edgeopt_agent import wire
from edgeopt_agent.bench import BenchmarkSpec, run_benchmark
from edgeopt_agent.bench.spec import available_cpus
from edgeopt_agent.errors import UserError
from edgeopt_agent.runners import UnsupportedModelError

HAS_TENSORRT = importlib.util.find_spec("tensorrt") is not None
QUICK = {"runs": 3, "duration_s": 0, "warmup_runs": 0, "warmup_s": 0, "idle_s": 0, "timeout_s": 120}


@pytest.fixture(autouse=True)
def _needs_onnxruntime():
    pytest.importorskip("onnxruntime", reason="the fallback runs the ONNX file on onnxruntime")


@pytest.mark.skipif(HAS_TENSORRT, reason="TensorRT is installed here: nothing to fall back from")
def test_a_missing_tensorrt_falls_back_to_onnxruntime_and_says_why(dynamic_onnx, tmp_path):
    spec = BenchmarkSpec(artifact=str(dynamic_onnx), runtime="tensorrt", precision="fp16",
                         fallback_runtimes=("onnxruntime",), threads=1,
                         engine_cache_dir=str(tmp_path / "engines"), **QUICK)
    result = run_benchmark(spec)
    assert result["ok"] is True, result.get("error")
    assert result["runtime"] == "onnxruntime" and result["runtime_version"]
    assert "CPUExecutionProvider" in result["providers"]
    fallback = result["fallback"]
    assert fallback["from"] == "tensorrt" and fallback["to"] == "onnxruntime"
    assert "TensorRT is not installed" in fallback["reason"]
    assert fallback["precision_dropped"] == "fp16"  # onnxruntime runs the file at its own precision
    assert any(n.startswith("runtime tensorrt is not available here (TensorRT is not installed")
               and n.endswith("ran onnxruntime instead") for n in result["notes"])
    assert result["spec"]["runtime"] == "tensorrt" and result["spec"]["fallback_runtimes"] == ["onnxruntime"]
    assert not (tmp_path / "engines").exists()


def test_a_runtime_that_is_here_runs_without_a_fallback(dynamic_onnx):
    spec = BenchmarkSpec(artifact=str(dynamic_onnx), runtime="onnxruntime", fallback_runtimes=("tensorrt",),
                         threads=1, **QUICK)
    result = run_benchmark(spec)
    assert result["ok"] is True and result["runtime"] == "onnxruntime" and result["fallback"] is None


@pytest.mark.skipif(HAS_TENSORRT, reason="TensorRT is installed here: nothing to fall back from")
def test_when_no_runtime_asked_for_is_here_the_error_names_each_reason(dynamic_onnx, monkeypatch):
    spec = BenchmarkSpec(artifact=str(dynamic_onnx), runtime="tensorrt", fallback_runtimes=("onnxruntime-cuda",),
                         threads=1, **QUICK)
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime has CUDA: the fallback would run")
    result = run_benchmark(spec)
    assert result["ok"] is False and result["error"]["kind"] == "unsupported"
    message = result["error"]["message"]
    assert message.startswith("no runtime asked for can run here: tensorrt: TensorRT is not installed")
    assert "onnxruntime-cuda: this onnxruntime build" in message


def test_a_fallback_that_cannot_run_the_file_is_refused_before_anything_runs(dynamic_onnx):
    with pytest.raises(UnsupportedModelError, match=r"runtime 'tflite' cannot run a \.onnx file"):
        run_benchmark(BenchmarkSpec(artifact=str(dynamic_onnx), runtime="tensorrt", fallback_runtimes=("tflite",),
                                    **QUICK))


@pytest.mark.parametrize("fallbacks, message", [(("openvino",), "unknown fallback runtime 'openvino'"),
                                                (("onnxruntime", "onnxruntime"), "must be distinct"),
                                                (("tensorrt",), "differ from the runtime"),
                                                ("onnxruntime", "must be a list")])
def test_the_spec_checks_its_fallbacks(dynamic_onnx, fallbacks, message):
    with pytest.raises(UserError, match=message):
        BenchmarkSpec(artifact=str(dynamic_onnx), runtime="tensorrt", fallback_runtimes=fallbacks)


def test_the_wire_carries_fallback_runtimes_as_a_list_of_names():
    assert wire.parse_bench({"runtime": "tensorrt", "precision": "int8", "fallback_runtimes": ["onnxruntime"]}) == {
        "runtime": "tensorrt", "precision": "int8", "fallback_runtimes": ["onnxruntime"]}
    assert wire.parse_bench({"fallback_runtimes": None}) == {"fallback_runtimes": None}
    for bad in ("onnxruntime", [], [""], [1], ["x"] * 9):
        with pytest.raises(wire.ProtocolError, match="fallback_runtimes"):
            wire.parse_bench({"fallback_runtimes": bad})


def test_threads_beyond_the_cpus_are_capped_and_the_result_says_so(dynamic_onnx):
    cpus = available_cpus()
    result = run_benchmark(BenchmarkSpec(artifact=str(dynamic_onnx), threads=cpus + 3, **QUICK))
    assert result["ok"] is True
    assert result["threads"] == cpus and result["threads_requested"] == cpus + 3
    assert result["threads_capped"] == (f"threads capped at {cpus}: {cpus + 3} asked for, but this machine lets "
                                        f"the benchmark use {cpus} CPU{'s' if cpus != 1 else ''}")
    assert result["notes"][0] == result["threads_capped"]


def test_threads_within_the_cpus_run_as_asked(dynamic_onnx):
    result = run_benchmark(BenchmarkSpec(artifact=str(dynamic_onnx), threads=1, **QUICK))
    assert result["ok"] is True
    assert result["threads"] == 1 and result["threads_requested"] == 1 and result["threads_capped"] is None
