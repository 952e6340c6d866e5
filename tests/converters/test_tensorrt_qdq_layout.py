"""The INT8 ONNX made for Jetson boards follows TensorRT's explicit-quantization rules.

Checked by reading the graph: symmetric INT8 everywhere (zero points 0), per-channel weights,
Q/DQ only on the inputs of the layers TensorRT runs in INT8 (weighted layers and residual Adds),
never hanging off other ops; and the model still matches FP32 in onnxruntime.
"""
from collections import defaultdict

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

import edgeopt
from edgeopt_converters.passes.quantize_onnx import TENSORRT_INT8_OPS

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def jetson_int8(tmp_path_factory, nets_path):
    out = tmp_path_factory.mktemp("jetson")
    rng = np.random.default_rng(3)
    np.savez(out / "calib.npz", input=rng.standard_normal((32, 3, 16, 16)).astype(np.float32))
    np.savez(out / "eval.npz", input=rng.standard_normal((32, 3, 16, 16)).astype(np.float32))
    manifest = edgeopt.convert(f"{nets_path}:residual_net", device="jetson-agx-orin", output_dir=out / "model",
                               input_shape="1,3,16,16", calibration=out / "calib.npz", eval_data=out / "eval.npz",
                               time_on_host=False)
    return out / "model", manifest


def _graph_index(graph):
    producers = {out: node for node in graph.node for out in node.output}
    consumers = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            consumers[name].append(node)
    inits = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    return producers, consumers, inits


def test_all_quantization_is_symmetric_int8(jetson_int8):
    folder, manifest = jetson_int8
    graph = onnx.load(str(folder / "model.int8.onnx")).graph
    _, _, inits = _graph_index(graph)
    qdq = [n for n in graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    assert qdq
    for node in qdq:
        assert len(node.input) == 3 and node.input[2] in inits, f"{node.name} has no constant zero point"
        zero_point = inits[node.input[2]]
        assert zero_point.dtype == np.int8 and not zero_point.any(), f"{node.name}: zero point {zero_point}"
    entry = next(a for a in manifest["artifacts"] if a["key"] == "onnx-int8")
    assert "symmetric-activations" in entry["scheme"] and "TensorRT" in entry["scheme"]


def test_weighted_layers_and_residual_adds_take_dequantized_inputs(jetson_int8):
    folder, _ = jetson_int8
    graph = onnx.load(str(folder / "model.int8.onnx")).graph
    producers, _, inits = _graph_index(graph)
    int8_layers = [n for n in graph.node if n.op_type in TENSORRT_INT8_OPS]
    assert {n.op_type for n in int8_layers} >= {"Conv", "Add"}
    for node in int8_layers:
        inputs = node.input[:2]
        for name in inputs:
            producer = producers.get(name)
            assert producer is not None and producer.op_type == "DequantizeLinear", \
                f"{node.op_type} {node.name}: input {name} is not dequantized INT8"
        if node.op_type == "Conv":
            weight_dq = producers[node.input[1]]
            weight = weight_dq.input[0]
            assert weight in inits and inits[weight].dtype == np.int8, "Conv weights are not stored as INT8"
            scale = inits[weight_dq.input[1]]
            assert scale.ndim == 1 and scale.size == inits[weight].shape[0], "Conv weights are not per-channel"


def test_no_qdq_hangs_off_layers_tensorrt_would_not_run_in_int8(jetson_int8):
    folder, _ = jetson_int8
    graph = onnx.load(str(folder / "model.int8.onnx")).graph
    _, consumers, _ = _graph_index(graph)
    for dq in (n for n in graph.node if n.op_type == "DequantizeLinear"):
        users = consumers[dq.output[0]]
        assert users and all(u.op_type in TENSORRT_INT8_OPS for u in users), \
            f"{dq.name} feeds {[u.op_type for u in users]}: a Q/DQ pair outside the INT8 layers splits TensorRT's fusions"


def test_jetson_int8_matches_fp32_in_onnxruntime(jetson_int8):
    folder, manifest = jetson_int8
    x = np.random.default_rng(9).standard_normal((8, 3, 16, 16)).astype(np.float32)
    fp32 = ort.InferenceSession(str(folder / "model.fp32.onnx")).run(None, {"x": x})[0]
    int8 = ort.InferenceSession(str(folder / "model.int8.onnx")).run(None, {"x": x})[0]
    cosine = (fp32 * int8).sum(1) / np.linalg.norm(fp32, axis=1) / np.linalg.norm(int8, axis=1)
    assert cosine.min() > 0.99
    accuracy = {a["key"]: a["accuracy"] for a in manifest["artifacts"]}
    assert accuracy["onnx-int8"]["cosine_similarity"] > 0.99
    assert accuracy["onnx-fp16"]["max_abs_error"] < 1e-2
