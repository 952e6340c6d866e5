"""Costing the graph onnxruntime executes (its own fusions) instead of guessing them from the artifact's graph.

The models are written by onnxruntime's own quantizer (quantize_dynamic) or as a converter writes QDQ, and
the executed graph is what onnxruntime saves after optimizing them; the costs are checked by hand.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgeopt_agent.errors import UserError
from edgeopt_converters.cost.graph_cost import analyze_onnx
from edgeopt_converters.cost.ort_graph import optimized

F = TensorProto.FLOAT
RUN = ("compute", "elementwise", "move")


def _model(nodes, inputs, initializers=(), output_type=F):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info("y", output_type, None)], list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _dynamic_int8(model, tmp_path):
    quantization = pytest.importorskip("onnxruntime.quantization")
    import onnx

    onnx.save(model, str(tmp_path / "float.onnx"))
    quantization.quantize_dynamic(str(tmp_path / "float.onnx"), str(tmp_path / "int8.onnx"),
                                  weight_type=quantization.QuantType.QInt8)
    return onnx.load(str(tmp_path / "int8.onnx"))


def _run(cost):
    return [n for n in cost.nodes if n.role in RUN]


def test_dynamic_int8_matmul_is_one_fused_int8_kernel(tmp_path):
    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32), "w")
    model = _dynamic_int8(_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", F, [16, 64])], [weight]),
                          tmp_path)
    assert [n.op_type for n in model.graph.node] == ["DynamicQuantizeLinear", "Mul", "MatMulInteger", "Cast", "Mul"]
    guessed = _run(analyze_onnx(model))
    assert len(guessed) == 5  # quantize, scale, integer product, cast and rescale: five passes
    (fused,) = _run(analyze_onnx(model, runtime="onnxruntime"))
    assert fused.op_type == "DynamicQuantizeMatMul" and fused.kind == "dynamic-gemm" and fused.precision == "int8"
    assert fused.ops == 2 * 16 * 32 * 64
    assert fused.weight_bytes == 64 * 32 + 4 + 1  # INT8 weights, their scale and zero point
    assert fused.activation_bytes == 16 * 64 * 4 + 16 * 32 * 4  # float in, float out: the quantize is inside


def test_dynamic_int8_lstm_counts_its_transposed_weights(tmp_path):
    rng = np.random.default_rng(0)
    hidden, features, steps = 16, 8, 5
    w = numpy_helper.from_array(rng.standard_normal((1, 4 * hidden, features)).astype(np.float32), "w")
    r = numpy_helper.from_array(rng.standard_normal((1, 4 * hidden, hidden)).astype(np.float32), "r")
    lstm = helper.make_node("LSTM", ["x", "w", "r"], ["y"], hidden_size=hidden)
    model = _dynamic_int8(_model([lstm], [("x", F, [steps, 1, features])], [w, r]), tmp_path)
    (node,) = [n for n in _run(analyze_onnx(model, runtime="onnxruntime")) if "LSTM" in n.op_type]
    assert node.op_type == "DynamicQuantizeLSTM" and node.kind == "dynamic-gemm" and node.precision == "int8"
    assert node.ops == 2 * steps * 4 * hidden * (features + hidden)  # as the float LSTM's


def test_qdq_convolution_runs_as_the_runtimes_int8_kernel_and_no_qdq_pass_is_left():
    s = numpy_helper.from_array(np.array(0.05, np.float32), "s")
    z = numpy_helper.from_array(np.array(128, np.uint8), "z")
    ws = numpy_helper.from_array(np.array(0.01, np.float32), "ws")
    wz = numpy_helper.from_array(np.array(0, np.int8), "wz")
    wq = numpy_helper.from_array(np.ones((8, 8, 3, 3), np.int8), "wq")
    nodes = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"]),
             helper.make_node("Conv", ["xd", "wd"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["c", "s", "z"], ["y"])]
    cost = analyze_onnx(_model(nodes, [("x", TensorProto.UINT8, [1, 8, 16, 16])], [s, z, ws, wz, wq], TensorProto.UINT8),
                        runtime="onnxruntime")
    run = _run(cost)
    assert not [n for n in run if n.kind == "qdq"]
    (conv,) = [n for n in run if n.kind == "conv"]
    assert conv.op_type == "QLinearConv" and conv.precision == "int8" and conv.ops == 2 * 8 * 256 * 72
    assert conv.activation_bytes == 2 * 8 * 256  # one byte per element in, one out
    # Whatever else onnxruntime leaves (a layout change to NHWC and back) moves 8-bit data.
    assert all(n.precision == "int8" for n in run)
    assert cost.precision == "int8" and any("ORT_ENABLE_ALL" in note for note in cost.notes)


def test_a_float_activation_is_carried_by_the_convolution_before_it():
    w = numpy_helper.from_array(np.ones((8, 4, 3, 3), np.float32), "w")
    model = _model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
                   [("x", F, [1, 4, 16, 16])], [w])
    run = _run(analyze_onnx(model, runtime="onnxruntime"))
    assert not [n for n in run if n.op_type == "Relu"]
    (conv,) = [n for n in run if n.role == "compute"]
    # At least the model's own multiply-accumulates; more where the runtime pads channels to its vector block.
    # 8 output channels fill an NCHWc block of 8 floats (AVX2) but not one of 16 (AVX-512): then it is unfolded.
    assert conv.kind in ("conv", "gemm-conv") and conv.ops >= 2 * 8 * 256 * 36


def _conv_1d(channels: int, positions: int):
    w = numpy_helper.from_array(np.ones((channels, channels, 3), np.float32), "w")
    return _model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1])], [("x", F, [1, channels, positions])], [w])


@pytest.mark.parametrize("positions, panels", [(4, 1), (16, 1), (20, 2), (33, 3)])
def test_a_1d_convolution_runs_unfolded_into_whole_sgemm_panels(positions, panels):
    (conv,) = [n for n in _run(analyze_onnx(_conv_1d(32, positions), runtime="onnxruntime")) if n.role == "compute"]
    assert conv.kind == "gemm-conv" and conv.ops == 2 * 32 * 96 * positions
    assert conv.kernel_ops == 2 * 32 * 96 * 16 * panels
    assert conv.padded_ops == (0.0 if positions == 16 else conv.kernel_ops)  # none where nothing is padded


def test_a_1d_convolution_at_one_position_is_a_matrix_vector_product_and_pads_nothing():
    (conv,) = [n for n in _run(analyze_onnx(_conv_1d(32, 1), runtime="onnxruntime")) if n.role == "compute"]
    assert conv.kind == "gemm-conv" and conv.padded_ops == 0.0 and conv.kernel_ops == conv.ops == 2 * 32 * 96


def test_only_the_executed_graph_knows_a_convolution_is_unfolded_and_blocked_ones_are_not():
    assert [n.kind for n in analyze_onnx(_conv_1d(32, 4)).nodes] == ["conv"]  # the model's own graph: no guess
    w = numpy_helper.from_array(np.ones((64, 64, 3, 3), np.float32), "w")  # 64 channels: NCHWc on every x86 block
    model = _model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], [("x", F, [1, 64, 8, 8])], [w])
    (conv,) = [n for n in _run(analyze_onnx(model, runtime="onnxruntime")) if n.role == "compute"]
    assert conv.kind == "conv" and conv.padded_ops == 0.0


def test_an_unknown_runtime_is_a_user_error_and_the_optimized_graph_is_a_model():
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [1, 4])])
    with pytest.raises(UserError, match="available: onnxruntime"):
        analyze_onnx(model, runtime="tflite")
    assert [n.op_type for n in optimized(model).graph.node] == ["Relu"]
