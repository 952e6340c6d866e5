"""The TensorRT runner on a real GPU: engines built and cached, outputs against ONNX Runtime, GPU timings.

Needs TensorRT, cuda-python and an NVIDIA GPU; without them every test here skips with the reason
(TensorRT cannot be installed on the development machines: see DEVELOPERS.md). Nothing is mocked:
scripts/verify_tensorrt.py runs the same checks on larger nets from the command line.
"""
from __future__ import annotations

import numpy as np
import pytest

trt = pytest.importorskip("tensorrt", reason="TensorRT is not installed (its libraries come from NVIDIA's index; see DEVELOPERS.md)")
pytest.importorskip("cuda", reason="cuda-python is not installed (pip install cuda-python matching the CUDA version)")
onnx = pytest.importorskip("onnx", reason="building the test models needs the onnx package")
ort = pytest.importorskip("onnxruntime", reason="the reference outputs come from onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from edgeopt_agent.bench import BenchmarkSpec, run_benchmark  # noqa: E402
from edgeopt_agent.runners import UnsupportedModelError, open_runner  # noqa: E402
from edgeopt_agent.runners.tensorrt.cuda_runtime import CudaRuntime  # noqa: E402

RNG = np.random.default_rng(3)


@pytest.fixture(scope="module", autouse=True)
def gpu():
    try:
        return CudaRuntime.load().gpu_info()
    except UnsupportedModelError as exc:
        pytest.skip(f"no usable NVIDIA GPU: {exc}")


def save_cnn(path):
    """conv3x3(3->16) relu conv3x3(16->16) relu global-avg-pool flatten gemm(16->10); x [N, 3, 32, 32]."""
    weights = {
        "w1": (RNG.standard_normal((16, 3, 3, 3)) * 0.3).astype(np.float32),
        "b1": (RNG.standard_normal(16) * 0.1).astype(np.float32),
        "w2": (RNG.standard_normal((16, 16, 3, 3)) * 0.1).astype(np.float32),
        "b2": (RNG.standard_normal(16) * 0.1).astype(np.float32),
        "fc": (RNG.standard_normal((10, 16)) * 0.3).astype(np.float32),
        "fcb": (RNG.standard_normal(10) * 0.1).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "fc", "fcb"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
        [numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def save_qdq(fp32_path, path):
    """The same net quantized for TensorRT: QDQ, symmetric INT8 activations, per-channel symmetric weights."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"x": RNG.random((1, 3, 32, 32), dtype=np.float32)} for _ in range(16)])

        def get_next(self):
            return next(self.batches, None)

    quantize_static(
        str(fp32_path), str(path), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
        extra_options={"ActivationSymmetric": True, "WeightSymmetric": True},
    )
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("trt-models")
    fp32 = save_cnn(folder / "cnn.onnx")
    return {"fp32": fp32, "int8": save_qdq(fp32, folder / "cnn.int8.onnx")}


def reference(path, x):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def cosine(a, b) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize("precision, source, floor", [("fp32", "fp32", 0.9999), ("fp16", "fp32", 0.999), ("int8", "int8", 0.99)])
def test_engine_outputs_match_onnxruntime(models, tmp_path, precision, source, floor):
    x = RNG.random((1, 3, 32, 32), dtype=np.float32)
    with open_runner(models[source], runtime="tensorrt", precision=precision, cache_dir=tmp_path) as runner:
        got = runner.infer({"x": x})["y"]
        info = runner.describe()
    assert got.shape == (1, 10)
    assert cosine(got, reference(models["fp32"], x)) >= floor
    assert info["precision"] == precision and info["engine"]["cached"] is False and info["engine"]["build_s"] > 0


def test_a_second_job_reuses_the_engine(models, tmp_path):
    with open_runner(models["fp32"], runtime="tensorrt", precision="fp16", cache_dir=tmp_path) as first:
        built = first.describe()["engine"]
    with open_runner(models["fp32"], runtime="tensorrt", precision="fp16", cache_dir=tmp_path) as second:
        reused = second.describe()["engine"]
    assert reused["cached"] is True and reused["build_s"] == 0.0
    assert reused["path"] == built["path"] and reused["cached_build_s"] == pytest.approx(built["build_s"], abs=1e-3)
    assert list(tmp_path.glob("timing-*.cache")), "the timing cache is kept for the next build"
    with open_runner(models["fp32"], runtime="tensorrt", precision="fp32", cache_dir=tmp_path) as other:
        assert other.describe()["engine"]["cached"] is False  # another precision is another engine


def test_precisions_the_model_cannot_take_are_refused(models, tmp_path):
    with pytest.raises(UnsupportedModelError, match="holds Q/DQ nodes"):
        open_runner(models["int8"], runtime="tensorrt", precision="fp16", cache_dir=tmp_path).load()
    with pytest.raises(UnsupportedModelError, match="needs an INT8 QDQ ONNX"):
        open_runner(models["fp32"], runtime="tensorrt", precision="int8", cache_dir=tmp_path).load()


def test_benchmark_reports_gpu_compute_apart_from_end_to_end(models, tmp_path):
    spec = BenchmarkSpec(artifact=str(models["fp32"]), runtime="tensorrt", precision="fp16", engine_cache_dir=str(tmp_path),
                         batch_sizes=[1, 4], runs=50, duration_s=0, idle_s=0, timeout_s=300)
    result = run_benchmark(spec)
    assert result["ok"] is True, result.get("error")
    assert result["engine"]["precision"] == "fp16" and result["engine"]["max_batch"] == 4
    for entry in result["batches"]:
        assert entry["ok"] is True, entry
        compute, latency = entry["gpu_compute_ms"], entry["gpu_latency_ms"]
        assert 0 < compute["p50"] <= latency["p50"] <= entry["latency_ms"]["p50"]
        assert entry["h2d_ms"]["p50"] > 0 and entry["d2h_ms"]["p50"] > 0 and entry["enqueue_ms"]["p50"] > 0
        assert entry["gpu_memory_mb"] is not None
        assert entry["output_stable"] is True
    assert result["gpu_compute_ms"] == result["batches"][0]["gpu_compute_ms"]


def test_a_memory_limit_is_not_applied_under_cuda_and_the_result_says_so(models, tmp_path):
    spec = BenchmarkSpec(artifact=str(models["fp32"]), runtime="tensorrt", precision="fp16", engine_cache_dir=str(tmp_path),
                         memory_limit_mb=256, runs=10, duration_s=0, idle_s=0, timeout_s=300)
    result = run_benchmark(spec)
    assert result["ok"] is True, result.get("error")
    assert any(note.startswith("memory limit not enforced: CUDA reserves") for note in result["notes"])
