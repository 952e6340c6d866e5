"""Where TensorRT or CUDA is missing, the runner says it is unavailable and why, and a job asking for it
gets an error result with that reason (not a crash, not a silent fallback to another runtime).

These run for real on machines without TensorRT; where TensorRT and a GPU are present they skip,
because there is nothing to refuse (test_tensorrt_gpu.py covers that machine).
"""
from __future__ import annotations

import hashlib
import importlib.util
import shutil
import sys

import pytest

from edgeopt_agent import wire
from edgeopt_agent.bench import UNSUPPORTED, BenchmarkSpec, run_benchmark
from edgeopt_agent.runners import UnsupportedModelError, open_runner, runtime_report, unavailable_reason
from edgeopt_agent.runtimes import RUNTIMES
from edgeopt_agent.runners.tensorrt.cuda_runtime import import_cudart
from edgeopt_agent.runners.tensorrt.build import import_tensorrt

HAS_TENSORRT = importlib.util.find_spec("tensorrt") is not None
needs_no_tensorrt = pytest.mark.skipif(HAS_TENSORRT, reason="TensorRT is installed here: nothing to refuse")


@needs_no_tensorrt
def test_tensorrt_missing_is_named_with_where_to_get_it():
    with pytest.raises(UnsupportedModelError, match=r"TensorRT is not installed \(.*tensorrt.*\); on a Jetson.*python3-libnvinfer"):
        import_tensorrt()


def test_cuda_python_missing_is_named_with_the_version_to_install(monkeypatch):
    for module in ("cuda.bindings.runtime", "cuda.cudart"):  # None in sys.modules: importing it fails
        monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(UnsupportedModelError, match=r"cuda-python is not installed .*cuda-python==12\.\*.*JetPack 6.*"
                                                    r"cuda-python==13\.\*.*JetPack 7; JetPack 4\.6's CUDA 10\.2 has none"):
        import_cudart()


@needs_no_tensorrt
def test_opening_a_tensorrt_runner_says_why_it_cannot(dynamic_onnx):
    with pytest.raises(UnsupportedModelError, match="TensorRT is not installed"):
        open_runner(dynamic_onnx, runtime="tensorrt", precision="fp16")


@needs_no_tensorrt
def test_the_runtime_report_lists_every_runtime_with_its_reason():
    pytest.importorskip("onnxruntime", reason="the report's onnxruntime entries need onnxruntime")
    report = runtime_report()
    assert list(report) == list(RUNTIMES)
    assert report["onnxruntime"] == {"available": True, "reason": None}
    assert report["tensorrt"]["available"] is False and "TensorRT is not installed" in report["tensorrt"]["reason"]
    assert unavailable_reason("tensorrt") == report["tensorrt"]["reason"]
    import onnxruntime

    for runtime, provider in (("onnxruntime-tensorrt", "TensorrtExecutionProvider"), ("onnxruntime-cuda", "CUDAExecutionProvider")):
        if provider in onnxruntime.get_available_providers():
            assert report[runtime] == {"available": True, "reason": None}
        else:
            assert report[runtime]["reason"].startswith(f"this onnxruntime build ({onnxruntime.__version__}) has no {provider}")
    assert unavailable_reason("openvino").startswith("unknown runtime 'openvino'")


@needs_no_tensorrt
def test_a_benchmark_asking_for_tensorrt_answers_unsupported_with_the_reason(dynamic_onnx, tmp_path):
    spec = BenchmarkSpec(artifact=str(dynamic_onnx), runtime="tensorrt", precision="fp16",
                         engine_cache_dir=str(tmp_path / "engines"), runs=5, duration_s=0, idle_s=0, timeout_s=60)
    result = run_benchmark(spec)
    assert result["ok"] is False
    assert result["error"]["kind"] == UNSUPPORTED
    assert "TensorRT is not installed" in result["error"]["message"]
    assert result["runtime"] == "tensorrt"
    assert not (tmp_path / "engines").exists(), "nothing is built or cached when TensorRT is missing"


@needs_no_tensorrt
def test_an_agent_job_asking_for_tensorrt_gets_an_error_result(dynamic_onnx, tmp_path):
    from edgeopt_agent.daemon.jobs import JobHandler

    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(dynamic_onnx, models / "m.onnx")
    sha = hashlib.sha256((models / "m.onnx").read_bytes()).hexdigest()
    job = wire.benchmark_job("jetson-1", 1, "trt-1", sha, "onnx", path="models/m.onnx",
                                 runtime="tensorrt", runs=5, duration_s=0, idle_s=0, timeout_s=60)
    body = JobHandler("jetson-1", tmp_path).handle(job.encode())
    assert body["ok"] is False and body["job_id"] == "trt-1"
    assert body["error"]["kind"] == UNSUPPORTED
    assert "TensorRT is not installed" in body["error"]["message"]


@needs_no_tensorrt
def test_a_folder_named_tensorrt_is_not_taken_for_tensorrt(tmp_path, monkeypatch):
    (tmp_path / "tensorrt").mkdir()  # imports as an empty namespace package
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "tensorrt", raising=False)
    with pytest.raises(UnsupportedModelError, match=r"the 'tensorrt' module found, .*tensorrt, is not TensorRT"):
        import_tensorrt()

