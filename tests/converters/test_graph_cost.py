"""Per-node operations and bytes of standard layers, against hand-computed values, and the roofline."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgeopt_agent.errors import UserError
from edgeopt_agent.profiles import load_profile
from edgeopt_converters.cost.graph_cost import analyze_onnx
from edgeopt_converters.cost.roofline import Machine, machine_for, node_time, predict

F = TensorProto.FLOAT


def _model(nodes, inputs, initializers=(), outputs=("y",)):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info(o, F, None) for o in outputs], list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _weights(name, shape, dtype=np.float32):
    return numpy_helper.from_array(np.ones(shape, dtype), name)


def _node(cost, name):
    return next(n for n in cost.nodes if n.name == name)


def test_convolution():
    # 3 -> 8 channels, 3x3, 32x32, same padding: 8*32*32 outputs x 3*3*3 MACs each.
    cost = analyze_onnx(_model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], name="conv")],
                               [("x", F, [1, 3, 32, 32])], [_weights("w", (8, 3, 3, 3))]))
    conv = _node(cost, "conv")
    assert conv.macs == 8 * 32 * 32 * 27 == 221184 and conv.ops == 2 * 221184
    assert conv.weight_bytes == 8 * 27 * 4
    assert conv.activation_bytes == 3 * 32 * 32 * 4 + 8 * 32 * 32 * 4
    assert conv.intensity == pytest.approx(442368 / 45920) and conv.precision == "fp32"


def test_depthwise_convolution():
    # 16 groups of one channel each: a 3x3 window per output, 16*28*28 outputs.
    cost = analyze_onnx(_model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], group=16,
                                                 name="dw")],
                               [("x", F, [1, 16, 28, 28])], [_weights("w", (16, 1, 3, 3))]))
    dw = _node(cost, "dw")
    assert dw.macs == 16 * 28 * 28 * 9 == 112896
    assert dw.bytes == 16 * 784 * 4 * 2 + 16 * 9 * 4
    assert dw.intensity < 2.5  # depthwise reuses little: memory-bound on every board


def test_matmul_and_gemm():
    cost = analyze_onnx(_model(
        [helper.make_node("MatMul", ["a", "b"], ["m"], name="matmul"),
         helper.make_node("Gemm", ["m", "w"], ["y"], transB=1, name="gemm")],
        [("a", F, [4, 64])], [_weights("b", (64, 32)), _weights("w", (10, 32))]))
    assert _node(cost, "matmul").macs == 4 * 32 * 64
    assert _node(cost, "matmul").bytes == 4 * 64 * 4 + 64 * 32 * 4 + 4 * 32 * 4
    assert _node(cost, "gemm").macs == 4 * 10 * 32


def test_attention():
    # softmax(Q K^T) V for batch 1, 4 heads, 16 tokens, head size 8: two batched matrix products
    # of heads*s*s*d MACs each, and a softmax over heads*s*s scores.
    heads, s, d = 4, 16, 8
    cost = analyze_onnx(_model(
        [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2], name="kt"),
         helper.make_node("MatMul", ["q", "kt"], ["scores"], name="qk"),
         helper.make_node("Softmax", ["scores"], ["p"], axis=-1, name="softmax"),
         helper.make_node("MatMul", ["p", "v"], ["y"], name="pv")],
        [(n, F, [1, heads, s, d]) for n in ("q", "k", "v")]))
    assert _node(cost, "qk").macs == heads * s * s * d == 8192
    assert _node(cost, "pv").macs == heads * s * s * d
    assert _node(cost, "softmax").ops == 5 * heads * s * s  # max, subtract, exp, sum, divide per score
    assert _node(cost, "kt").ops == 0 and _node(cost, "kt").bytes == 2 * heads * s * d * 4
    assert cost.ops == 2 * 2 * 8192 + 5 * 1024


def test_pooling():
    cost = analyze_onnx(_model(
        [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="maxpool"),
         helper.make_node("GlobalAveragePool", ["p"], ["y"], name="gap")],
        [("x", F, [1, 8, 32, 32])]))
    assert _node(cost, "maxpool").ops == 8 * 16 * 16 * 4  # a 2x2 window per output
    assert _node(cost, "maxpool").bytes == 8 * 32 * 32 * 4 + 8 * 16 * 16 * 4
    assert _node(cost, "gap").ops == 8 * 16 * 16 and _node(cost, "gap").bytes == 8 * 16 * 16 * 4 + 8 * 4


def test_recurrent_lstm():
    # 5 steps, batch 1, input 10, hidden 20: 4 gates x hidden x (input + hidden) MACs per step.
    cost = analyze_onnx(_model([helper.make_node("LSTM", ["x", "w", "r"], ["y"], hidden_size=20, name="lstm")],
                               [("x", F, [5, 1, 10])], [_weights("w", (1, 80, 10)), _weights("r", (1, 80, 20))]))
    assert _node(cost, "lstm").macs == 5 * 80 * (10 + 20)


def test_activation_after_a_convolution_is_fused_and_views_move_nothing():
    cost = analyze_onnx(_model(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
         helper.make_node("Relu", ["c"], ["r"], name="relu"),
         helper.make_node("Flatten", ["r"], ["y"], name="flatten")],
        [("x", F, [1, 3, 8, 8])], [_weights("w", (4, 3, 1, 1))]))
    relu = _node(cost, "relu")
    assert relu.role == "fused" and relu.bytes == 0 and relu.ops == 4 * 64
    assert _node(cost, "flatten").role == "view" and _node(cost, "flatten").bytes == 0


def test_qdq_convolution_runs_int8_and_moves_quantized_bytes():
    scale = numpy_helper.from_array(np.array(0.1, np.float32), "s")
    zero = numpy_helper.from_array(np.array(0, np.int8), "z")
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="q_in"),
        helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"], name="dq_in"),
        helper.make_node("DequantizeLinear", ["wq", "s", "z"], ["wd"], name="dq_w"),
        helper.make_node("Conv", ["xd", "wd"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("QuantizeLinear", ["c", "s", "z"], ["cq"], name="q_out"),
        helper.make_node("DequantizeLinear", ["cq", "s", "z"], ["y"], name="dq_out"),
    ]
    cost = analyze_onnx(_model(nodes, [("x", F, [1, 3, 32, 32])],
                               [scale, zero, _weights("wq", (8, 3, 3, 3), np.int8)]))
    conv = _node(cost, "conv")
    assert conv.precision == "int8" and cost.precision == "int8"
    assert conv.macs == 221184
    assert conv.weight_bytes == 8 * 27  # one byte per weight
    assert conv.activation_bytes == 3 * 32 * 32 + 8 * 32 * 32  # reads and writes INT8 activations
    assert {n.name for n in cost.nodes if n.role == "folded"} == {"dq_in", "dq_w", "q_out"}
    # The graph's own input is quantized, and its output dequantized, by real passes.
    assert _node(cost, "q_in").role == "elementwise" and _node(cost, "dq_out").role == "elementwise"


def test_free_input_dimensions_are_fixed_by_the_given_shape():
    model = _model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv")], [("x", F, ["N", 3, "H", "W"])],
                   [_weights("w", (8, 3, 1, 1))])
    assert _node(analyze_onnx(model), "conv").macs == 8 * 3  # N, H and W default to 1
    assert _node(analyze_onnx(model, [(2, 3, 10, 10)]), "conv").macs == 2 * 8 * 100 * 3
    with pytest.raises(UserError, match="1 inputs"):
        analyze_onnx(model, [(1, 3, 4, 4), (1,)])


def test_roofline_verdict_and_prediction():
    cost = analyze_onnx(_model(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
         helper.make_node("Conv", ["c", "dw"], ["y"], pads=[1, 1, 1, 1], group=8, name="dw")],
        [("x", F, [1, 64, 32, 32])], [_weights("w", (8, 64, 3, 3)), _weights("dw", (8, 1, 3, 3))]))
    board = Machine("m", {"fp32": 100.0}, 10.0)  # 100 GOP/s, 10 GB/s: ridge at 10 ops/byte
    conv, dw = node_time(_node(cost, "conv"), board), node_time(_node(cost, "dw"), board)
    assert conv.bound == "compute" and _node(cost, "conv").intensity > board.ridge("fp32")
    assert conv.ms == pytest.approx(_node(cost, "conv").ops / 100e9 * 1e3)
    assert dw.bound == "memory" and dw.ms == pytest.approx(_node(cost, "dw").bytes / 10e9 * 1e3)
    prediction = predict(cost, board)
    assert prediction.ms == pytest.approx(conv.ms + dw.ms) and not prediction.calibrated
    assert any("uncalibrated" in n for n in prediction.notes)
    calibrated = predict(cost, board, efficiency=1.5, samples=3)
    assert calibrated.ms == pytest.approx(1.5 * prediction.ms) and calibrated.calibrated
    with_overhead = predict(cost, Machine("m", {"fp32": 100.0}, 10.0, overhead_us=5.0))
    assert with_overhead.ms == pytest.approx(prediction.ms + 2 * 0.005)


def test_board_rooflines_come_from_the_profiles_cited_figures():
    rpi5 = machine_for(load_profile("rpi5"))
    assert rpi5.peak("fp32") == (pytest.approx(76.8), "fp32") and rpi5.peak("int8")[0] == pytest.approx(614.0)
    assert rpi5.bandwidth_gbps == 17.1
    rpi4 = machine_for(load_profile("rpi4"))
    assert rpi4.peak("int8") == (pytest.approx(57.6), "fp32")  # no INT8 figure: FP32's, and the prediction says so
    cost = analyze_onnx(_model([helper.make_node("MatMulInteger", ["a", "b"], ["y"], name="mm")],
                               [("a", TensorProto.UINT8, [4, 16])], [_weights("b", (16, 8), np.int8)]))
    assert any("no int8 peak" in n for n in predict(cost, rpi4).notes)


def test_a_working_set_that_fits_in_half_the_cache_moves_at_cache_bandwidth():
    cost = analyze_onnx(_model([helper.make_node("Add", ["x", "x"], ["y"], name="add")], [("x", F, [1, 1024])]))
    add = _node(cost, "add")  # reads 4 KiB twice, writes 4 KiB: memory-bound everywhere
    dram_only = Machine("m", {"fp32": 100.0}, 10.0)
    cached = Machine("m", {"fp32": 100.0}, 10.0, cache_bytes=2 * add.bytes, cache_bandwidth_gbps=40.0)
    too_small = Machine("m", {"fp32": 100.0}, 10.0, cache_bytes=add.bytes, cache_bandwidth_gbps=40.0)
    assert node_time(add, dram_only).ms == pytest.approx(add.bytes / 10e9 * 1e3)
    assert node_time(add, cached).ms == pytest.approx(add.bytes / 40e9 * 1e3)
    assert node_time(add, too_small).ms == pytest.approx(node_time(add, dram_only).ms)


def test_the_last_level_cache_comes_from_sysfs(tmp_path):
    from edgeopt_converters.cost.host_peaks import last_level_cache_bytes

    for index, (level, kind, size) in enumerate([(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "1024K"),
                                                 (3, "Unified", "32M")]):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        (folder / "level").write_text(f"{level}\n")
        (folder / "type").write_text(f"{kind}\n")
        (folder / "size").write_text(f"{size}\n")
    assert last_level_cache_bytes(str(tmp_path)) == 32 * 2**20
    assert last_level_cache_bytes(str(tmp_path / "missing")) == 0


def test_a_node_without_an_int8_kernel_runs_in_float_between_real_qdq_passes():
    scale = numpy_helper.from_array(np.array(0.1, np.float32), "s")
    zero = numpy_helper.from_array(np.array(0, np.int8), "z")
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    nodes = [
        helper.make_node("DequantizeLinear", ["wq", "s", "z"], ["wd"], name="dq_w"),
        helper.make_node("Conv", ["x", "wd"], ["c"], name="conv"),
        helper.make_node("QuantizeLinear", ["c", "s", "z"], ["cq"], name="q_conv"),
        helper.make_node("DequantizeLinear", ["cq", "s", "z"], ["cd"], name="dq_div"),
        helper.make_node("Div", ["cd", "two"], ["d"], name="div"),
        helper.make_node("QuantizeLinear", ["d", "s", "z"], ["dq"], name="q_div"),
        helper.make_node("DequantizeLinear", ["dq", "s", "z"], ["y"], name="dq_out"),
    ]
    cost = analyze_onnx(_model(nodes, [("x", F, [1, 4, 8, 8])], [scale, zero, two, _weights("wq", (8, 4, 1, 1), np.int8)]))
    div = _node(cost, "div")
    assert div.precision == "fp32" and div.activation_bytes == 2 * 8 * 64 * 4  # float in, float out
    # The conv's output is quantized as part of its kernel; the Div needs a real dequantize before it
    # and a real quantize after it.
    assert _node(cost, "q_conv").role == "folded"
    assert _node(cost, "dq_div").role == "elementwise" and _node(cost, "q_div").role == "elementwise"
    assert _node(cost, "conv").activation_bytes == 4 * 64 * 4 + 8 * 64  # float graph input, INT8 output


def test_shapes_inference_cannot_give_come_from_one_onnxruntime_run(monkeypatch):
    import onnx

    model = _model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
                    helper.make_node("Relu", ["c"], ["y"], name="relu")],
                   [("x", F, [1, 3, 32, 32])], [_weights("w", (8, 3, 3, 3))])
    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", lambda m, **_: m)  # as if it gave up
    cost = analyze_onnx(model)
    assert _node(cost, "conv").macs == 8 * 32 * 32 * 27
    assert any("one onnxruntime run" in n for n in cost.notes)


def test_every_slice_of_constant_weights_is_folded_however_many_there_are():
    """Silero VAD's exported LSTM slices its weights out of Constant nodes: dozens of such slices. Each is
    computed once at load time; none may be charged as a copy on every run (a protobuf wrapper's id()
    once stood for a node, and ids are handed out anew on each access)."""
    nodes, names = [], []
    for k in range(40):
        nodes += [helper.make_node("Constant", [], [f"w{k}"], value=numpy_helper.from_array(
                      np.full((64, 64), k, np.float32), f"wv{k}")),
                  helper.make_node("Constant", [], [f"s{k}"], value=numpy_helper.from_array(np.array([0], np.int64), f"sv{k}")),
                  helper.make_node("Constant", [], [f"e{k}"], value=numpy_helper.from_array(np.array([32], np.int64), f"ev{k}")),
                  helper.make_node("Slice", [f"w{k}", f"s{k}", f"e{k}"], [f"part{k}"], name=f"slice{k}")]
        names.append(f"slice{k}")
    nodes += [helper.make_node("Concat", [f"part{k}" for k in range(40)], ["weights"], axis=0, name="concat"),
              helper.make_node("MatMul", ["x", "weights"], ["y"], name="mm")]
    cost = analyze_onnx(_model(nodes, [("x", F, [1, 1280])]))
    assert {_node(cost, name).role for name in names + ["concat"]} == {"folded"}
    assert _node(cost, "mm").role == "compute"


def test_a_weight_only_matmul_costs_its_product_in_float_and_reads_its_packed_weights():
    """onnxruntime's MatMulNBits (weight-only INT8/INT4): the arithmetic of the float product it replaces,
    at float precision unless accuracy_level 4, and the packed weights' bytes."""
    k, n, bits, block = 256, 128, 8, 32
    packed = numpy_helper.from_array(np.zeros((n, k // block, block * bits // 8), np.uint8), "B")
    scales = numpy_helper.from_array(np.ones((n * (k // block),), np.float32), "scales")
    node = helper.make_node("MatMulNBits", ["x", "B", "scales"], ["y"], name="wo", domain="com.microsoft",
                            K=k, N=n, bits=bits, block_size=block)
    model = _model([node], [("x", F, [1, 4, k])], [packed, scales])
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    cost = _node(analyze_onnx(model), "wo")
    assert cost.role == "compute" and cost.precision == "fp32"
    assert cost.ops == 2.0 * 4 * k * n
    assert cost.weight_bytes == pytest.approx(n * k + n * (k // block) * 4, rel=0.01)


def test_control_flow_with_a_constant_condition_is_not_folded_nor_what_follows():
    """An If whose condition is a weight still runs its branch on the outer graph's tensors (Silero VAD's
    If(sr == 16000) once sr is baked in): neither it nor the MatMul after it is computed once at load."""
    branch = helper.make_graph([helper.make_node("Relu", ["x"], ["r"])], "then", [],
                               [helper.make_tensor_value_info("r", F, [1, 64])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["n"])], "else", [],
                              [helper.make_tensor_value_info("n", F, [1, 64])])
    nodes = [helper.make_node("If", ["c"], ["h"], name="if", then_branch=branch, else_branch=other),
             helper.make_node("MatMul", ["h", "W"], ["y"], name="mm")]
    cond = numpy_helper.from_array(np.array(True), "c")
    model = _model(nodes, [("x", F, [1, 64])], [cond, _weights("W", (64, 32))])
    cost = analyze_onnx(model)
    assert _node(cost, "if").role != "folded"
    assert _node(cost, "mm").role == "compute" and _node(cost, "mm").ops == 2.0 * 64 * 32
