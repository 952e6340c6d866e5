"""Mixed precision's op-type stage: only the multiply-accumulate ops in INT8."""
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from edgeopt_converters.precision.graph_regions import MAC_OPS
from edgeopt_converters.precision.mac_only import MAC_ONLY_STAGE, mac_only_stage, mac_op_types, restricted
from edgeopt_converters.passes.base import StepCall, StepContext
from edgeopt_converters.passes.quantize_onnx import OnnxInt8Options, QuantizeOnnxStatic
from edgeopt_converters.recipe import PlannedArtifact, with_exclusions, with_int8
from edgeopt_converters.source.tensors import Dataset, InputSpec


def lcnet_block(path: Path) -> Path:
    """Conv -> learnable affine (Mul, Add) -> HardSwish -> Conv: a PP-LCNet-style block."""
    rng = np.random.default_rng(0)
    inits = [nh.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w1"),
             nh.from_array(np.array(1.3, np.float32), "scale"), nh.from_array(np.array(0.2, np.float32), "bias"),
             nh.from_array(rng.standard_normal((4, 8, 1, 1)).astype(np.float32), "w2")]
    nodes = [h.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             h.make_node("Mul", ["c1", "scale"], ["m"], name="affine_scale"),
             h.make_node("Add", ["m", "bias"], ["a"], name="affine_bias"),
             h.make_node("HardSwish", ["a"], ["hs"], name="act"),
             h.make_node("Conv", ["hs", "w2"], ["y"], name="conv2")]
    graph = h.make_graph(nodes, "block", [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 8, 8])],
                         [h.make_tensor_value_info("y", T.FLOAT, [1, 4, 8, 8])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _quantize(tmp_path: Path, options: OnnxInt8Options) -> onnx.GraphProto:
    model = lcnet_block(tmp_path / "block.onnx")
    rng = np.random.default_rng(1)
    data = Dataset({"x": rng.standard_normal((8, 3, 8, 8)).astype(np.float32)}, None, "test")
    ctx = StepContext(None, [InputSpec("x", (1, 3, 8, 8), "float32")], data, 1)
    out = tmp_path / f"int8-{len(options.op_types or ())}.onnx"
    QuantizeOnnxStatic(options).run(ctx, model, out)
    return onnx.load(str(out)).graph


def _rounded_outputs(graph) -> dict:
    """For each compute node, whether its output is rounded to INT8 (read by a QuantizeLinear)."""
    quantized = {n.input[0] for n in graph.node if n.op_type == "QuantizeLinear"}
    return {n.name: n.output[0] in quantized for n in graph.node
            if n.op_type not in ("QuantizeLinear", "DequantizeLinear")}


def test_only_the_mac_ops_read_int8_when_the_stage_restricts_the_op_types(tmp_path):
    whole = _rounded_outputs(_quantize(tmp_path, OnnxInt8Options(reduce_range=True)))
    assert all(whole.values()), f"whole-graph INT8 rounds every op's output: {whole}"
    only = _rounded_outputs(_quantize(tmp_path, restricted(OnnxInt8Options(reduce_range=True), MAC_OPS)))
    # Rounded: what a MAC op writes and what it reads (the activation feeding conv2); between them, float.
    assert only == {"conv1": True, "affine_scale": False, "affine_bias": False, "act": True, "conv2": True}


def test_the_stage_is_one_attempt_with_the_best_floats_and_only_the_mac_op_types():
    class Search:
        def __init__(self, int8, wins):
            self.best = PlannedArtifact("onnx", "int8", "test", steps=(StepCall("quantize-onnx-static", int8),))
            self.best = type("Record", (), {"planned": self.best})()
            self.floats, self.wins, self.tried = ["tail"], wins, []

        def attempt(self, nodes, stage, method=None, fewer_floats=False, op_types=None):
            self.tried.append((list(nodes), stage, op_types))
            return self.wins

    kept, report = Search(OnnxInt8Options(), True), {}
    mac_only_stage(kept, report)
    assert kept.tried == [(["tail"], MAC_ONLY_STAGE, MAC_OPS)] and report == {"op_types": list(MAC_OPS)}
    lost, report = Search(OnnxInt8Options(), False), {}
    mac_only_stage(lost, report)
    assert len(lost.tried) == 1 and report == {}, "an attempt that does not beat the best leaves no trace in the result"
    tensorrt = Search(OnnxInt8Options.for_tensorrt(), True)
    mac_only_stage(tensorrt, {})
    assert tensorrt.tried == [] and mac_op_types(OnnxInt8Options.for_tensorrt()) is None


def test_the_restriction_reaches_the_quantize_step_and_the_scheme():
    item = PlannedArtifact("onnx", "int8", "test",
                           steps=(StepCall("preprocess-onnx"), StepCall("quantize-onnx-static", OnnxInt8Options())))
    attempt = with_exclusions(item, ["a"], "percentile")
    attempt = with_int8(attempt, restricted(attempt.int8, MAC_OPS))
    step = dict((c.name, c.options) for c in attempt.steps)["quantize-onnx-static"]
    assert step.op_types == MAC_OPS and step.nodes_to_exclude == ("a",) and step.calibrate_method == "percentile"
    assert "(Conv/ConvTranspose/MatMul/Gemm only)" in attempt.int8.scheme
    assert restricted(OnnxInt8Options(), None) == OnnxInt8Options()
