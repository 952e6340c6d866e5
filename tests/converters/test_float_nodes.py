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
