"""Kernel kinds of nodes, and the roofline timed per kind: classification on hand-built graphs,
prediction arithmetic with given roofs, host roofs from given kernel times (nothing timed here)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgeopt_converters.cost import node_kinds as k
from edgeopt_converters.cost.graph_cost import analyze_onnx
from edgeopt_converters.cost.roofline import KindRoof, Machine, node_time, predict

F = TensorProto.FLOAT


def _model(nodes, inputs, initializers=()):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info(nodes[-1].output[0], F, None)], list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _w(name, shape, dtype=np.float32):
    return numpy_helper.from_array(np.ones(shape, dtype), name)


def _kinds(cost):
    return {n.name: n.kind for n in cost.nodes}


def test_convolutions_are_dense_depthwise_or_pointwise_and_matrix_products_gemm():
    nodes = [
        helper.make_node("Conv", ["x", "w3"], ["a"], pads=[1, 1, 1, 1], name="dense"),
        helper.make_node("Conv", ["a", "dw"], ["b"], pads=[1, 1, 1, 1], group=16, name="depthwise"),
        helper.make_node("Conv", ["b", "pw"], ["c"], name="pointwise"),
        helper.make_node("Conv", ["c", "g"], ["d"], pads=[1, 1, 1, 1], group=4, name="grouped"),
        helper.make_node("Relu", ["d"], ["e"], name="relu"),
        helper.make_node("GlobalAveragePool", ["e"], ["f"], name="gap"),
        helper.make_node("Flatten", ["f"], ["h"], name="flatten"),
        helper.make_node("Gemm", ["h", "fc"], ["i"], transB=1, name="fc"),
        helper.make_node("MatMul", ["i", "mm"], ["j"], name="matmul"),
        helper.make_node("Softmax", ["j"], ["y"], name="softmax"),
    ]
    inits = [_w("w3", (16, 8, 3, 3)), _w("dw", (16, 1, 3, 3)), _w("pw", (32, 16, 1, 1)), _w("g", (32, 8, 3, 3)),
             _w("fc", (10, 32)), _w("mm", (10, 4))]
    kinds = _kinds(analyze_onnx(_model(nodes, [("x", F, [1, 8, 8, 8])], inits)))
    assert kinds == {"dense": k.CONV, "depthwise": k.DEPTHWISE, "pointwise": k.POINTWISE, "grouped": k.CONV,
                     "relu": k.ELEMENTWISE, "gap": k.POOL, "flatten": k.VIEW, "fc": k.GEMM, "matmul": k.GEMM,
                     "softmax": k.NORMALIZATION}


def test_a_qdq_depthwise_convolution_is_depthwise_at_int8_and_real_qdq_passes_are_qdq():
    s, z = numpy_helper.from_array(np.array(0.1, np.float32), "s"), numpy_helper.from_array(np.array(0, np.int8), "z")
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="q_in"),
        helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"], name="dq_in"),
        helper.make_node("DequantizeLinear", ["wq", "s", "z"], ["wd"], name="dq_w"),
        helper.make_node("Conv", ["xd", "wd"], ["c"], group=8, pads=[1, 1, 1, 1], name="dw"),
        helper.make_node("QuantizeLinear", ["c", "s", "z"], ["cq"], name="q_out"),
        helper.make_node("DequantizeLinear", ["cq", "s", "z"], ["y"], name="dq_out"),
    ]
    cost = analyze_onnx(_model(nodes, [("x", F, [1, 8, 16, 16])], [s, z, _w("wq", (8, 1, 3, 3), np.int8)]))
    by_name = {n.name: n for n in cost.nodes}
    assert by_name["dw"].kind == k.DEPTHWISE and by_name["dw"].precision == "int8"
    assert by_name["q_in"].kind == k.QDQ and by_name["q_in"].role == "elementwise"  # a real pass over the input
    assert by_name["dq_w"].role == "folded"


def test_classification_from_op_type_and_weight_shape():
    assert k.kind_of("QLinearConv", (64, 1, 3, 3), group=64) == k.DEPTHWISE
    assert k.kind_of("ConvInteger", (64, 32, 1, 1)) == k.POINTWISE
    assert k.kind_of("Conv", (64, 32, 1, 1), group=2) == k.CONV  # grouped 1x1: neither pointwise nor depthwise
    assert k.kind_of("MatMulInteger") == k.GEMM and k.kind_of("LSTM") == k.GEMM
    assert k.kind_of("LayerNormalization") == k.NORMALIZATION and k.kind_of("ReduceMean") == k.POOL
    assert k.kind_of("Resize") == k.POOL and k.kind_of("DynamicQuantizeLinear") == k.QDQ
    assert k.kind_of("Transpose", moves=("Transpose",)) == k.MOVE and k.kind_of("Mul") == k.ELEMENTWISE


def test_a_node_is_timed_with_its_kinds_roof_and_the_rest_at_the_peaks():
    cost = analyze_onnx(_model(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
         helper.make_node("Conv", ["c", "dw"], ["d"], pads=[1, 1, 1, 1], group=8, name="dw"),
         helper.make_node("Sigmoid", ["d"], ["e"], name="sig"),
         helper.make_node("Mul", ["d", "e"], ["y"], name="mul")],
        [("x", F, [1, 64, 32, 32])], [_w("w", (8, 64, 3, 3)), _w("dw", (8, 1, 3, 3))]))
    nodes = {n.name: n for n in cost.nodes}
    machine = Machine("m", {"fp32": 100.0}, 10.0, overhead_us=2.0, run_overhead_us=30.0, kinds={
        "fp32/depthwise": KindRoof(4.0, 2.0), "fp32/conv": KindRoof(50.0, 0.0), "fp32/elementwise": KindRoof(1.0, 5.0)})
    conv, dw, mul = (node_time(nodes[n], machine) for n in ("conv", "dw", "mul"))
    # conv: its own throughput, the machine's bandwidth (a compute kind's roof states none)
    assert conv.roof == "fp32/conv" and conv.bound == "compute"
    assert conv.ms == pytest.approx((max(nodes["conv"].ops / 50e9, nodes["conv"].bytes / 10e9) + 2e-6) * 1e3)
    # depthwise: the lower of its own bandwidth and the machine's
    assert dw.ms == pytest.approx((max(nodes["dw"].ops / 4e9, nodes["dw"].bytes / 2e9) + 2e-6) * 1e3)
    assert mul.ms == pytest.approx((max(nodes["mul"].ops / 1e9, nodes["mul"].bytes / 5e9) + 2e-6) * 1e3)
    prediction = predict(cost, machine)
    times = {t.node.name: t.ms for t in prediction.nodes}
    assert prediction.roofline_ms == pytest.approx(0.030 + sum(times.values()))
    overhead = 4 * 2e-3  # each node's dispatch, apart from its work
    assert prediction.kind_ms() == pytest.approx({"fp32/conv": times["conv"] - 2e-3, "fp32/depthwise": times["dw"] - 2e-3,
                                                  "fp32/elementwise": times["sig"] + times["mul"] - 4e-3,
                                                  "overhead": overhead})
    assert any("measured per-kind roofs" in n for n in prediction.notes)
    # Without kind roofs every node is timed at the peaks, as before.
    plain = predict(cost, Machine("m", {"fp32": 100.0}, 10.0))
    assert all(t.roof == "" for t in plain.nodes) and any("no per-kind figures" in n for n in plain.notes)
    # Per-kind efficiency: depthwise x3, every other kind at the whole-graph factor 1.5.
    calibrated = predict(cost, machine, efficiency=1.5, samples=4, kind_efficiency={"fp32/depthwise": 3.0})
    # (dispatch costs are a kind of their own: without a factor of theirs, the whole-graph one)
    assert calibrated.ms == pytest.approx(0.030 + 3.0 * (times["dw"] - 2e-3)
                                          + 1.5 * (times["conv"] + times["sig"] + times["mul"] + 2e-3))


def test_host_kind_roofs_come_from_each_kernels_time_net_of_the_run_and_its_other_nodes():
    from edgeopt_converters.cost.host_peaks import KIND_PREFIX, machine_from
    from edgeopt_converters.cost.kind_kernels import COMPUTE_KINDS, kind_kernels

    kernels = kind_kernels()
    seconds = {"fp32": 0.01, "int8": 0.004, "dram": 0.01, "overhead": 200e-6, "run": 11e-6}
    seconds.update({KIND_PREFIX + kk.name: 0.001 * (i + 1) for i, kk in enumerate(kernels)})
    host = machine_from(seconds, 1)
    assert host.overhead_us == pytest.approx(1.0) and host.run_overhead_us == pytest.approx(10.0)
    kinds_measured = {f"{kk.precision}/{kk.kind}" for kk in kernels}
    assert set(host.kinds) == kinds_measured
    for key in ("fp32/elementwise", "int8/gemm", "int8/dynamic-gemm"):
        mine = [(i, kk) for i, kk in enumerate(kernels) if f"{kk.precision}/{kk.kind}" == key]
        nets = [(kk, 0.001 * (i + 1) - 11e-6 - (kk.nodes - 1) * 1e-6) for i, kk in mine]
        assert all(not kk.others for kk, _ in nets)
        assert host.kinds[key].gops == pytest.approx(max(kk.ops / net / 1e9 for kk, net in nets))
        expected_gbps = 0.0 if key.split("/")[1] in COMPUTE_KINDS else max(kk.bytes / net / 1e9 for kk, net in nets)
        assert host.kinds[key].gbps == pytest.approx(expected_gbps)
    # The pool chain starts with a pointwise convolution: its time at the pointwise roof is taken off.
    pool = next((i, kk) for i, kk in enumerate(kernels) if kk.name == "int8/pool:0")
    assert pool[1].others and host.kinds["int8/pool"].gops > pool[1].ops / (0.001 * (pool[0] + 1)) / 1e9


def test_a_convolutions_own_dispatch_cost_comes_from_the_tiny_convolution_chain():
    from edgeopt_converters.cost.host_peaks import KIND_PREFIX, machine_from
    from edgeopt_converters.cost.kind_kernels import kind_kernels
    from edgeopt_converters.cost.roofline import node_time

    kernels = kind_kernels()
    seconds = {"fp32": 0.01, "int8": 0.004, "dram": 0.01, "overhead": 200e-6, "run": 11e-6,
               "dispatch": 10e-6 + 50 * 3e-6}  # a run's fixed cost, then 3 us per tiny convolution
    seconds.update({KIND_PREFIX + kk.name: 0.001 * (i + 1) for i, kk in enumerate(kernels)})
    host = machine_from(seconds, 1)
    peak = 2.0 * 256 * 1024 * 1024 / 0.01  # the FP32 MatMul's operations per second
    assert host.compute_overhead_us == pytest.approx(3.0 - 2 * 16 * 32 * 16 * 3 / peak * 1e6)
    # The compute kinds' roofs are net of their nodes' own dispatch: 1 node of the int8 product kernel.
    i, gemm = next((i, kk) for i, kk in enumerate(kernels) if kk.name == "int8/gemm:0")
    net = 0.001 * (i + 1) - 11e-6 - (host.compute_overhead_us - host.overhead_us) * 1e-6
    assert host.kinds["int8/gemm"].gops == pytest.approx(gemm.ops / net / 1e9)
    # A convolution node pays it; an elementwise one the plain overhead.
    conv = next(n for n in _kinds_nodes() if n.role == "compute")
    add = next(n for n in _kinds_nodes() if n.role == "elementwise")
    bare = Machine("m", {"fp32": 1e9}, 1e9, overhead_us=1.0, compute_overhead_us=3.0)
    assert node_time(conv, bare).ms == pytest.approx(0.003, rel=1e-3)
    assert node_time(add, bare).ms == pytest.approx(0.001, rel=1e-3)


def _kinds_nodes():
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"), helper.make_node("Add", ["c", "c"], ["y"], name="add")]
    return analyze_onnx(_model(nodes, [("x", F, [1, 4, 8, 8])], [_w("w", (4, 4, 1, 1))])).nodes


def test_a_prediction_splits_each_nodes_dispatch_cost_from_its_work_and_calibrates_them_apart():
    bare = Machine("m", {"fp32": 1e9}, 1e9, overhead_us=1.0, compute_overhead_us=3.0)
    cost = type("Cost", (), {"nodes": _kinds_nodes()})()
    prediction = predict(cost, bare)
    kinds = prediction.kind_ms()
    assert kinds["overhead"] == pytest.approx(0.004, rel=1e-3)  # 3 us for the Conv, 1 us for the Add
    assert sum(kinds.values()) == pytest.approx(prediction.roofline_ms)
    work = prediction.roofline_ms - 0.004
    scaled = predict(cost, bare, efficiency=2.0, kind_efficiency={"overhead": 5.0})
    assert scaled.ms == pytest.approx(2.0 * work + 5.0 * 0.004)


def test_an_int8_node_of_a_kind_measured_only_in_float_takes_the_float_roof_not_the_int8_peak():
    from edgeopt_converters.cost.graph_cost import NodeCost

    softmax = NodeCost("sm", "QLinearSoftmax", 4e6, 0.0, 2e6, "int8", "elementwise", kind="normalization")
    machine = Machine("m", {"fp32": 100.0, "int8": 400.0}, 10.0, kinds={"fp32/normalization": KindRoof(2.0, 4.0)})
    timed = node_time(softmax, machine)
    assert timed.roof == "fp32/normalization" and timed.ms == pytest.approx(max(4e6 / 2e9, 2e6 / 4e9) * 1e3)
    assert predict(type("Cost", (), {"nodes": [softmax]})(), machine).kind_ms() == {"int8/normalization": timed.ms}


def test_an_unfolded_convolution_is_timed_by_the_work_its_padded_panels_do():
    from edgeopt_converters.cost.graph_cost import NodeCost

    conv = NodeCost("c", "Conv", 1e6, 2e5, 1e4, "fp32", "compute", kind=k.GEMM_CONV, padded_ops=4e6)
    machine = Machine("m", {"fp32": 100.0}, 100.0, kinds={"fp32/gemm-conv": KindRoof(50.0, 0.0)})
    timed = node_time(conv, machine)
    assert conv.kernel_ops == 4e6 and conv.intensity == pytest.approx(1e6 / 2.1e5)  # the arithmetic it needs
    assert timed.roof == "fp32/gemm-conv" and timed.bound == "compute"
    assert timed.ms == pytest.approx(4e6 / 50e9 * 1e3)  # the work it does


def test_padding_to_sgemm_panels():
    assert k.gemm_conv_ops(100.0, 1) == 100.0  # one column: a matrix-vector product
    assert k.gemm_conv_ops(100.0, 4) == 400.0
    assert k.gemm_conv_ops(160.0, 16) == 160.0
    assert k.gemm_conv_ops(170.0, 17) == 320.0
