"""A node the quantizer leaves in float stays float where onnxruntime runs it: onnxruntime's
WeightBiasQuantization gives a float-weight Conv/Gemm after a DequantizeLinear per-tensor INT8 weights at
load, unless something it cannot see through stands between them."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

from edgeopt_converters.passes.float_nodes import guard_float_nodes

RNG = np.random.default_rng(28)


class _Reader(CalibrationDataReader):
    def __init__(self, data):
        self.feeds = iter([{"x": data[i:i + 1]} for i in range(len(data))])

    def get_next(self):
        return next(self.feeds, None)


def _depthwise_between_convs(path):
    """x -> Conv -> Relu -> depthwise Conv -> Relu -> Conv, the depthwise's channels' weights 1000-fold apart in
    size, where one scale for all of them (per-tensor INT8) rounds the small ones to nothing."""
    first = RNG.standard_normal((8, 4, 3, 3)).astype(np.float32) * 0.3
    scales = np.logspace(-3, 0, 8, dtype=np.float32)[:, None, None, None]
    depthwise = RNG.standard_normal((8, 1, 3, 3)).astype(np.float32) * scales
    last = np.eye(8, dtype=np.float32)[:, :, None, None] / scales[:, :, 0]  # every channel back to one size
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w1"], ["a"], name="first", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["a"], ["r"], name="relu"),
         helper.make_node("Conv", ["r", "w2", "b2"], ["d"], name="depthwise", group=8, pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["d"], ["s"], name="relu2"),
         helper.make_node("Conv", ["s", "w3"], ["y"], name="last")],
        "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
        [numpy_helper.from_array(first, "w1"), numpy_helper.from_array(depthwise, "w2"),
         numpy_helper.from_array(np.full(8, 0.01, np.float32), "b2"), numpy_helper.from_array(last, "w3")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, str(path))


def _run(path, x, disabled=()):
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(path) + ".optimized.onnx"
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"], disabled_optimizers=list(disabled))
    ran = [n.op_type for n in onnx.load(options.optimized_model_filepath).graph.node]
    return np.concatenate([session.run(None, {"x": x[i:i + 1]})[0] for i in range(len(x))]), ran


def test_a_conv_kept_in_float_runs_in_float_with_its_quantized_neighbours(tmp_path):
    fp32, int8 = tmp_path / "fp32.onnx", tmp_path / "int8.onnx"
    _depthwise_between_convs(fp32)
    data = RNG.standard_normal((32, 4, 8, 8)).astype(np.float32)
    quantize_static(str(fp32), str(int8), _Reader(data), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, nodes_to_exclude=["depthwise"])
    as_loaded, ran = _run(int8, data)
    truly_float, _ = _run(int8, data, disabled=["WeightBiasQuantization"])
    if ran.count("QLinearConv") < 3:
        pytest.skip(f"this onnxruntime runs a float Conv after a DequantizeLinear in float by itself ({ran})")
    assert not np.allclose(as_loaded, truly_float, atol=1e-4)  # the "float" depthwise ran with INT8 weights

    assert guard_float_nodes(int8) == 1
    guarded, ran = _run(int8, data)
    assert ran.count("QLinearConv") == 2 and "Conv" in ran  # the other two INT8, the depthwise float
    np.testing.assert_allclose(guarded, truly_float, rtol=1e-5, atol=1e-5)
    assert guard_float_nodes(int8) == 0  # a guarded node is not guarded twice


def test_the_static_int8_step_guards_the_nodes_it_keeps_in_float(tmp_path):
    from edgeopt_converters.passes.base import StepContext
    from edgeopt_converters.passes.quantize_onnx import OnnxInt8Options, QuantizeOnnxStatic
    from edgeopt_converters.source.tensors import Dataset, InputSpec

    fp32 = tmp_path / "fp32.onnx"
    _depthwise_between_convs(fp32)
    data = Dataset({"x": RNG.standard_normal((8, 4, 8, 8)).astype(np.float32)}, None, "test")
    ctx = StepContext(None, [InputSpec("x", (1, 4, 8, 8), "float32")], data, 1)
    result = QuantizeOnnxStatic(OnnxInt8Options(nodes_to_exclude=("depthwise",))).run(ctx, fp32, tmp_path / "q.onnx")
    assert result.info["float_nodes_guarded"] == 1
    guards = [n for n in onnx.load(str(result.path)).graph.node if n.op_type == "Clip"]
    assert [n.name for n in guards] == ["depthwise_kept_float"]


def test_guards_have_names_of_their_own_and_old_opsets_get_clip_attributes(tmp_path):
    """Two unnamed float Convs reading the same DequantizeLinear, a tensor already named like a guard, and
    an opset-10 graph (Clip's bounds were attributes then): every name stays unique and the graph valid."""
    def graph(opset):
        nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]), helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
                 helper.make_node("Conv", ["d", "w"], ["d_kept_float"]), helper.make_node("Conv", ["d", "w"], ["b"]),
                 helper.make_node("Add", ["d_kept_float", "b"], ["y"])]
        inits = [numpy_helper.from_array(np.array(0.05, np.float32), "s"), numpy_helper.from_array(np.array(128, np.uint8), "z"),
                 numpy_helper.from_array(RNG.standard_normal((4, 4, 1, 1)).astype(np.float32), "w")]
        model = helper.make_model(helper.make_graph(
            nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 3, 3])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 3, 3])], inits),
            opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 6
        path = tmp_path / f"g{opset}.onnx"
        onnx.save(model, str(path))
        return path

    x = RNG.standard_normal((1, 4, 3, 3)).astype(np.float32)
    for opset in (10, 13):
        path = graph(opset)
        before = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        assert guard_float_nodes(path) == 2
        model = onnx.load(str(path))
        onnx.checker.check_model(model)
        names = [n.name for n in model.graph.node if n.name] + [t for n in model.graph.node for t in n.output]
        assert len(names) == len(set(names))
        assert sum(n.op_type == "Clip" for n in model.graph.node) == 2
        after = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        np.testing.assert_allclose(after, before, rtol=1e-6, atol=1e-6)


def test_the_search_sees_through_a_guard_to_the_float_node_behind_it(tmp_path):
    """The guarded node is ranked by what it reads (the DequantizeLinear's tensor, named as in FP32), not as
    a node fed from nowhere at full precision, and the guards themselves are neither ranked nor counted."""
    from edgeopt_converters.precision.sensitivity import node_sensitivity, quantized_nodes

    fp32, int8 = tmp_path / "fp32.onnx", tmp_path / "int8.onnx"
    _depthwise_between_convs(fp32)
    data = RNG.standard_normal((16, 4, 8, 8)).astype(np.float32)
    quantize_static(str(fp32), str(int8), _Reader(data), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, nodes_to_exclude=["depthwise"])
    unguarded = {s.name: s for s in node_sensitivity(fp32, int8, [{"x": data[i:i + 1]} for i in range(4)])}
    assert guard_float_nodes(int8) == 1
    ranked = {s.name: s for s in node_sensitivity(fp32, int8, [{"x": data[i:i + 1]} for i in range(4)])}
    assert not any(name.endswith("_kept_float") for name in ranked)
    assert ranked["depthwise"].drop_db == pytest.approx(unguarded["depthwise"].drop_db, abs=0.5)
    assert "depthwise_kept_float" not in quantized_nodes(int8)
