"""Conversion steps one by one on small models: the registry, pre-processing, calibration, mixed precision."""
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import edgeopt
from edgeopt_agent.errors import UserError
from edgeopt_converters.precision.architecture import classify
from edgeopt_converters.source.model_source import load_source
from edgeopt_converters.passes.base import Step, StepCall, StepContext, option, step_class
from edgeopt_converters.passes.errors import StepFailed
from edgeopt_converters.passes.preprocess_onnx import PreprocessOnnx
from edgeopt_converters.passes.quantize_onnx import OnnxInt8Options, QuantizeOnnxStatic
from edgeopt_converters.precision.quant_check import check_weights
from edgeopt_converters.source.tensors import Dataset, InputSpec


def test_every_builtin_step_is_registered_with_described_options():
    step_class("export-onnx")  # loads the built-in steps
    steps = dict(Step.registry)
    assert {"export-onnx", "export-tflite", "preprocess-onnx", "quantize-onnx-static", "quantize-onnx-dynamic",
            "convert-onnx-fp16"} <= set(steps)
    for cls in steps.values():
        for row in cls.describe():
            assert row["description"], f"{cls.name}.{row['name']} has no description"


def test_a_subclass_registers_itself_and_names_are_unique():
    @dataclass(frozen=True)
    class DoublerOptions:
        factor: int = option(2, "how much")

    class Doubler(Step):
        name = "test-doubler"
        Options = DoublerOptions

    try:
        assert StepCall("test-doubler", DoublerOptions(factor=3)).build().options.factor == 3
        assert Doubler.describe() == [{"name": "factor", "type": "int", "default": 2, "description": "how much"}]
        with pytest.raises(TypeError, match="two conversion steps"):
            type("Again", (Step,), {"name": "test-doubler"})
        with pytest.raises(TypeError, match="takes DoublerOptions"):
            Doubler(OnnxInt8Options())
    finally:
        Step.registry.pop("test-doubler")
    with pytest.raises(UserError, match="unknown conversion step 'test-doubler'"):
        step_class("test-doubler")


def constant_weight_cnn(path: Path) -> Path:
    """A paddle2onnx-style model: opset 11, weights in Constant nodes, dynamic H/W, a dictionary in metadata."""
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((32, 3, 3, 3)).astype(np.float32) * 0.2
    w2 = rng.standard_normal((64, 32, 3, 3)).astype(np.float32) * 0.05
    nodes = [h.make_node("Constant", [], ["w1"], value=nh.from_array(w1, "w1"), name="c1"),
             h.make_node("Constant", [], ["w2"], value=nh.from_array(w2, "w2"), name="c2"),
             h.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1], name="conv1"),
             h.make_node("Relu", ["a"], ["b"], name="relu1"),
             h.make_node("Conv", ["b", "w2"], ["c"], pads=[1, 1, 1, 1], name="conv2"),
             h.make_node("Relu", ["c"], ["y"], name="relu2")]
    graph = h.make_graph(nodes, "cw", [h.make_tensor_value_info("x", T.FLOAT, ["n", 3, "h", "w"])],
                         [h.make_tensor_value_info("y", T.FLOAT, ["n", 64, "h", "w"])])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 11)])
    model.ir_version = 7
    model.metadata_props.add(key="character", value="a\nb\nc")
    onnx.save(model, str(path))
    return path


def _ctx(shape, n=8, name="x"):
    rng = np.random.default_rng(1)
    data = Dataset({name: rng.standard_normal((n,) + tuple(shape[1:])).astype(np.float32)}, None, "test")
    return StepContext(None, [InputSpec(name, tuple(shape), "float32")], data, shape[0])


def test_preprocessing_folds_constant_weights_upgrades_the_opset_and_keeps_metadata(tmp_path, monkeypatch):
    model = constant_weight_cnn(tmp_path / "cw.onnx")
    ctx = _ctx((1, 3, 16, 16))
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    result = PreprocessOnnx().run(ctx, model, Path("..") / "pre.onnx")
    assert not list((tmp_path / "cwd").iterdir()), "onnxruntime's temporary files leaked into the working folder"
    assert result.path.resolve() == (tmp_path / "pre.onnx").resolve()
    pre = onnx.load(str(result.path))
    assert not [n for n in pre.graph.node if n.op_type == "Constant"]
    assert {i.name for i in pre.graph.initializer} >= {"w1", "w2"}
    assert next(o.version for o in pre.opset_import if o.domain in ("", "ai.onnx")) >= 13
    dims = pre.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims[1:]] == [3, 16, 16] and not dims[0].dim_value, "batch stays dynamic"
    assert {p.key: p.value for p in pre.metadata_props}["character"] == "a\nb\nc"
    assert any("Constant nodes folded" in line for line in result.info["preprocess"])

    quantized = QuantizeOnnxStatic(OnnxInt8Options()).run(ctx, result.path, tmp_path / "q.onnx").path
    check = check_weights(model, quantized)
    assert check.quantized and check.ratio < 0.3, check.describe()
    # Straight from the Constant-node model onnxruntime leaves every weight in float: the check says so.
    raw = QuantizeOnnxStatic(OnnxInt8Options(per_channel=False)).run(ctx, model, tmp_path / "raw.onnx").path
    assert not check_weights(model, raw).quantized


def test_preprocessing_failure_is_one_line_and_fails_the_artifact(tmp_path):
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model")
    with pytest.raises(Exception):
        PreprocessOnnx().run(_ctx((1, 3, 8, 8)), broken, tmp_path / "out.onnx")
    model = constant_weight_cnn(tmp_path / "cw.onnx")
    with pytest.raises(StepFailed, match="upgrading opset 11 to 99"):
        PreprocessOnnx(min_opset=99).run(_ctx((1, 3, 8, 8)), model, tmp_path / "out.onnx")


def masked_attention(path: Path) -> Path:
    """One attention block whose additive mask is float32's minimum where tokens are padding (as BERT exports)."""
    rng = np.random.default_rng(0)
    inits = [nh.from_array(rng.standard_normal((8, 8)).astype(np.float32), "W"),
             nh.from_array(rng.standard_normal((8, 8)).astype(np.float32), "V"),
             nh.from_array(np.array(1, np.float32), "one"),
             nh.from_array(np.array(np.finfo(np.float32).min, np.float32), "big"),
             nh.from_array(np.array([1], np.int64), "axis")]
    nodes = [h.make_node("Cast", ["mask"], ["maskf"], to=T.FLOAT, name="cast"),
             h.make_node("Sub", ["one", "maskf"], ["inv"], name="invert"),
             h.make_node("Mul", ["inv", "big"], ["ext"], name="extend"),
             h.make_node("Unsqueeze", ["ext", "axis"], ["ext3"], name="unsqueeze"),
             h.make_node("MatMul", ["x", "W"], ["q"], name="query"),
             h.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1], name="keys"),
             h.make_node("MatMul", ["q", "xt"], ["scores"], name="scores"),
             h.make_node("Add", ["scores", "ext3"], ["masked"], name="mask_add"),
             h.make_node("Softmax", ["masked"], ["probs"], axis=-1, name="softmax"),
             h.make_node("MatMul", ["probs", "x"], ["context"], name="context"),
             h.make_node("MatMul", ["context", "V"], ["y"], name="project")]
    graph = h.make_graph(nodes, "attention", [h.make_tensor_value_info("x", T.FLOAT, [1, 6, 8]),
                                              h.make_tensor_value_info("mask", T.INT64, [1, 6])],
                         [h.make_tensor_value_info("y", T.FLOAT, [1, 6, 8])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _attention_data(n=12):
    rng = np.random.default_rng(2)
    masks = np.ones((n, 6), np.int64)
    for i in range(n):
        masks[i, 6 - i % 3:] = 0
    return {"x": rng.standard_normal((n, 6, 8)).astype(np.float32), "mask": masks}


@pytest.mark.parametrize("method", ["percentile", "entropy"])
def test_histogram_calibrators_work_on_a_transformer_with_a_float_min_mask(tmp_path, method):
    """onnxruntime alone raises 'Too many bins for data range' here; the mask's nodes stay float instead."""
    model = masked_attention(tmp_path / "attn.onnx")
    data = _attention_data()
    ctx = StepContext(None, [InputSpec("x", (1, 6, 8), "float32"), InputSpec("mask", (1, 6), "int64")],
                      Dataset(data, None, "test"), 1)
    result = QuantizeOnnxStatic(OnnxInt8Options(calibrate_method=method)).run(ctx, model, tmp_path / "q.onnx")
    assert "ext" in result.info["unquantizable_tensors"]
    assert {"extend", "mask_add"} <= set(result.info["float_nodes"])
    session_f, session_q = (ort.InferenceSession(str(p)) for p in (model, result.path))
    feed = {k: v[:1] for k, v in data.items()}
    ref, got = session_f.run(None, feed)[0], session_q.run(None, feed)[0]
    cosine = float((ref * got).sum() / np.linalg.norm(ref) / np.linalg.norm(got))
    assert cosine > 0.95 and any(n.op_type == "DequantizeLinear" for n in onnx.load(str(result.path)).graph.node)


@pytest.mark.parametrize("method", ["minmax", "percentile", "entropy"])
def test_calibration_hands_samples_over_in_chunks_and_gets_the_same_ranges(tmp_path, monkeypatch, method):
    """onnxruntime holds every intermediate tensor of the samples it is given (24 GB for 240 lines of
    a 48x320 text recognizer); edgeopt gives them in chunks, and the ranges must not change."""
    from onnxruntime.quantization.calibrate import load_tensors_data

    from edgeopt_converters.passes import calibration

    model = masked_attention(tmp_path / "attn.onnx")
    data = _attention_data(n=12)

    def batches(samples_per_run=1):
        return ({k: v[i:i + samples_per_run] for k, v in data.items()} for i in range(0, 12, samples_per_run))

    def ranges(name):
        calibration.calibrate(model, batches, method, None, False, tmp_path / name)
        return {k: (float(np.min(v.range_value[0])), float(np.max(v.range_value[1])))
                for k, v in load_tensors_data(tmp_path / name).data.items()}

    with monkeypatch.context() as m:  # onnxruntime's own way: every sample in one call
        m.setattr(calibration, "_seed_histograms", lambda *a: None)
        whole = ranges("whole.json")
    calls = []
    real_chunks = calibration._chunks
    monkeypatch.setattr(calibration, "COLLECTED_BYTES", 1)  # one sample per chunk
    monkeypatch.setattr(calibration, "_chunks", lambda *a: (calls.append(c) or c for c in real_chunks(*a)))
    chunked = ranges("chunked.json")
    assert len(calls) == (12 if method == "minmax" else 24), "one-sample chunks, for MinMax and the method's own pass"
    assert chunked == whole


def test_a_transformer_gets_a_dynamic_int8_artifact_beside_static(tmp_path):
    model = masked_attention(tmp_path / "attn.onnx")
    assert classify(model).kind == "transformer"
    np.savez(tmp_path / "data.npz", **_attention_data(24))
    manifest = edgeopt.convert(str(model), device="x86-64", output_dir=tmp_path / "out", formats=["onnx"],
                               calibration=tmp_path / "data.npz", calibrate_method="entropy", time_on_host=False)
    artifacts = {a["key"]: a for a in manifest["artifacts"]}
    assert {"onnx-fp32", "onnx-int8", "onnx-int8-dynamic"} <= set(artifacts)
    dynamic = artifacts["onnx-int8-dynamic"]
    assert dynamic["steps"] == ["preprocess-onnx", "quantize-onnx-dynamic"]
    assert dynamic["scheme"].startswith("dynamic S8") and dynamic["accuracy"]["verdict"] != "failed"
    assert any(n.startswith("architecture: transformer") for n in manifest["notes"])


def test_mixed_precision_turns_a_failing_int8_detector_into_a_passing_one(tmp_path, nets_path):
    """The tiny YOLO-style head: one INT8 scale for boxes and scores zeroes every score. Sensitivity finds
    the Concat that mixes them; keeping it in float keeps every detection."""
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "calib.npz", x=rng.standard_normal((32, 3, 16, 16)).astype(np.float32))
    np.savez(tmp_path / "eval.npz", x=rng.standard_normal((320, 3, 16, 16)).astype(np.float32))
    manifest = edgeopt.convert(f"{nets_path}:tiny_detector", device="x86-64", output_dir=tmp_path / "out",
                               input_shape="1,3,16,16", calibration=tmp_path / "calib.npz",
                               eval_data=tmp_path / "eval.npz", formats=["onnx"], time_on_host=False)
    int8 = {a["key"]: a for a in manifest["artifacts"]}["onnx-int8"]
    mixed = int8["mixed_precision"]
    assert mixed["whole_graph"]["verdict"] == "failed" and mixed["whole_graph"]["drop_points"] == 100.0
    assert mixed["sensitivity"][0]["op_type"] == "Concat"
    assert int8["accuracy"]["verdict"] == "ok"
    assert len(int8["float_nodes"]) == 1 and int8["float_nodes"] == [mixed["sensitivity"][0]["node"]]
    assert int8["scheme"].endswith("1 nodes float") and int8["weights"]["quantized"]
    assert any("kept in float make it ok" in n for n in manifest["notes"])
    graph = onnx.load(str(tmp_path / "out" / "model.int8.onnx")).graph
    concat = next(n for n in graph.node if n.name == int8["float_nodes"][0])
    assert not any(n.op_type == "QuantizeLinear" and n.input[0] in concat.output for n in graph.node)


@pytest.mark.slow
def test_tflite_dynamic_range_int8_keeps_float_io_and_int8_weights(tmp_path, nets_path):
    import torch
    from edgeopt_converters.runtime import open_predictor

    source = load_source(f"{nets_path}:small_cnn", None, False)
    ctx = _ctx((1, 3, 16, 16))
    ctx.source = source
    result = step_class("export-tflite")(precision="int8", dynamic=True).run(ctx, None, tmp_path / "m.tflite")
    assert result.info["scheme"].startswith("dynamic-range INT8")
    predictor = open_predictor(result.path, 1)
    try:
        io = predictor.io()
        assert {t["dtype"] for t in io["inputs"] + io["outputs"]} == {"float32"}
        x = ctx.calibration.arrays["x"][:1]
        got = predictor.predict({"x": x})[0]
    finally:
        predictor.close()
    with torch.no_grad():
        ref = source.module(torch.from_numpy(x)).numpy()
    assert float((ref * got).sum() / np.linalg.norm(ref) / np.linalg.norm(got)) > 0.99
    from ai_edge_litert.interpreter import Interpreter

    tensors = Interpreter(model_path=str(result.path)).get_tensor_details()
    assert any(t["dtype"] == np.int8 and len(t["shape"]) == 4 for t in tensors), "conv weights are not INT8"


def test_a_failed_fp16_names_the_ops_that_lose_precision(tmp_path):
    """x @ (10000 + w) - x @ 10000: FP16 weights near 10000 are spaced 8 apart, so w is rounded away."""
    rng = np.random.default_rng(0)
    small = rng.standard_normal((8, 8)).astype(np.float32)
    inits = [nh.from_array(small + 10000, "W"), nh.from_array(np.full((8, 8), 10000, np.float32), "B")]
    nodes = [h.make_node("MatMul", ["x", "W"], ["a"], name="shifted"),
             h.make_node("MatMul", ["x", "B"], ["b"], name="shift"),
             h.make_node("Sub", ["a", "b"], ["y"], name="cancel")]
    graph = h.make_graph(nodes, "fp16", [h.make_tensor_value_info("x", T.FLOAT, [1, 8])],
                         [h.make_tensor_value_info("y", T.FLOAT, [1, 8])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "m.onnx"))
    np.savez(tmp_path / "data.npz", x=rng.standard_normal((32, 8)).astype(np.float32))
    manifest = edgeopt.convert(str(tmp_path / "m.onnx"), device="x86-64", output_dir=tmp_path / "out",
                               formats=["onnx"], precisions=["fp32", "fp16"], calibration=tmp_path / "data.npz",
                               time_on_host=False)
    fp16 = {a["key"]: a for a in manifest["artifacts"]}["onnx-fp16"]
    assert fp16["accuracy"]["verdict"] == "failed"
    blamed = fp16["fp16_sensitive_nodes"]
    assert blamed and blamed[0]["node"] == "cancel" and blamed[0]["sqnr_drop_db"] > 20
    assert any("onnx-fp16 failed; the ops losing most precision in FP16: cancel (Sub" in w for w in manifest["warnings"])


def test_a_recurrent_model_gets_a_dynamic_int8_artifact(tmp_path):
    rng = np.random.default_rng(0)
    hidden = 16
    inits = [nh.from_array(rng.standard_normal((1, 4 * hidden, 8)).astype(np.float32) * 0.3, "W"),
             nh.from_array(rng.standard_normal((1, 4 * hidden, hidden)).astype(np.float32) * 0.3, "R"),
             nh.from_array(rng.standard_normal((hidden, 1)).astype(np.float32) * 0.3, "head")]
    nodes = [h.make_node("Transpose", ["x"], ["steps"], perm=[1, 0, 2], name="time_major"),
             h.make_node("LSTM", ["steps", "W", "R"], ["", "h"], hidden_size=hidden, name="lstm"),
             h.make_node("Reshape", ["h", "shape"], ["flat"], name="flatten"),
             h.make_node("MatMul", ["flat", "head"], ["y"], name="head")]
    inits.append(nh.from_array(np.array([1, hidden], np.int64), "shape"))
    graph = h.make_graph(nodes, "lstm", [h.make_tensor_value_info("x", T.FLOAT, [1, 4, 8])],
                         [h.make_tensor_value_info("y", T.FLOAT, [1, 1])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "lstm.onnx"))
    assert classify(tmp_path / "lstm.onnx").kind == "recurrent"
    np.savez(tmp_path / "data.npz", x=rng.standard_normal((24, 4, 8)).astype(np.float32))
    manifest = edgeopt.convert(str(tmp_path / "lstm.onnx"), device="x86-64", output_dir=tmp_path / "out",
                               formats=["onnx"], input_shape="1,4,8", calibration=tmp_path / "data.npz",
                               output_kinds={"y": "regression"}, time_on_host=False)
    dynamic = {a["key"]: a for a in manifest["artifacts"]}["onnx-int8-dynamic"]
    assert "LSTM" in dynamic["scheme"] and dynamic["accuracy"]["verdict"] != "failed"
    graph = onnx.load(str(tmp_path / "out" / dynamic["path"])).graph
    assert any(n.op_type == "DynamicQuantizeLSTM" for n in graph.node)
