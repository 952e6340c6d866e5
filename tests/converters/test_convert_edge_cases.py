"""Inputs that are valid but unusual: fixed batches above 1, several outputs, outputs without
classes, typed ONNX inputs, reruns into the same folder, and the measurement-vs-prediction rule."""
import json
from dataclasses import replace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import edgeopt
from edgeopt_agent.errors import UserError
from edgeopt_agent.profiles import load_profile
from edgeopt_converters.accuracy import compare
from edgeopt_converters.pipeline import _measured_on_host

pytestmark = pytest.mark.slow


def test_fixed_batch_of_four_with_sample_counts_that_do_not_divide(tmp_path, nets_path):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "calib.npz", input=rng.standard_normal((3, 3, 16, 16)).astype(np.float32))
    np.savez(tmp_path / "eval.npz", input=rng.standard_normal((10, 3, 16, 16)).astype(np.float32))
    manifest = edgeopt.convert(f"{nets_path}:small_cnn", device="x86-64", output_dir=tmp_path / "out",
                               input_shape="4,3,16,16", calibration=tmp_path / "calib.npz",
                               eval_data=tmp_path / "eval.npz", formats=["tflite"], time_on_host=False)
    by_key = {a["key"]: a for a in manifest["artifacts"]}
    assert by_key["tflite-int8"]["inputs"][0]["shape"][0] == 4
    for artifact in by_key.values():
        assert artifact["accuracy"]["samples"] == 10  # the padded rows of the last batch are not counted
    # Calibrated on the 3 real samples (padded to a batch of 4), not left uncalibrated.
    assert by_key["tflite-int8"]["accuracy"]["cosine_similarity"] > 0.95


def test_every_output_is_compared(tmp_path, nets_path):
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "calib.npz", input=rng.standard_normal((16, 8)).astype(np.float32))
    manifest = edgeopt.convert(f"{nets_path}:two_heads", device="x86-64", output_dir=tmp_path / "out",
                               input_shape="1,8", calibration=tmp_path / "calib.npz", formats=["onnx"],
                               time_on_host=False)
    for artifact in manifest["artifacts"]:
        outputs = artifact["accuracy"]["outputs"]
        assert len(outputs) == 2 == len(artifact["outputs"])
        assert all(o["cosine_similarity"] > 0.98 for o in outputs)


def test_outputs_without_classes_are_judged_by_their_kind(tmp_path, nets_path):
    """A regression head has no top-1: the accuracy budget judges it by its error, never by an argmax."""
    rng = np.random.default_rng(2)
    np.savez(tmp_path / "calib.npz", input=rng.standard_normal((16, 8)).astype(np.float32))
    common = dict(device="x86-64", input_shape="1,8", calibration=tmp_path / "calib.npz", formats=["onnx"],
                  time_on_host=False)
    budgeted = edgeopt.convert(f"{nets_path}:regressor", output_dir=tmp_path / "a", max_accuracy_drop=1.0, **common)
    for artifact in budgeted["artifacts"]:
        (output,) = artifact["accuracy"]["outputs"]
        # A Linear makes its 3 continuous values (issue 36): a regression head, judged against FP32's spread.
        assert output["kind"] == "regression" and output["kind_source"] == "inferred"
        assert "a Gemm makes 3 continuous values per sample" in output["kind_why"]
        assert output["verdict"] == "ok" and "spread" in output["reason"] and "rank" in output["reason"]
        assert "top1_agreement" not in output
    manifest = edgeopt.convert(f"{nets_path}:regressor", output_dir=tmp_path / "b", min_cosine=0.9, **common)
    assert all(a["accuracy"]["drop_points"] is None for a in manifest["artifacts"])
    gated = edgeopt.convert(f"{nets_path}:regressor", output_dir=tmp_path / "c", min_cosine=0.99999999, **common)
    assert any(f["key"] == "onnx-int8" and "cosine similarity" in f["cause"] for f in gated["failed_artifacts"])
    with pytest.raises(UserError, match="onnx-int8 cosine similarity"):
        edgeopt.convert(f"{nets_path}:regressor", output_dir=tmp_path / "d", min_cosine=0.99999999, strict=True,
                        **common)


def test_typed_onnx_inputs_keep_their_dtype_with_an_input_shape(tmp_path):
    table = np.random.default_rng(3).standard_normal((50, 4)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["vectors"]), helper.make_node("ReduceMean", ["vectors"], ["mean"], axes=[1])],
        "embed", [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", "T"])],
        [helper.make_tensor_value_info("mean", TensorProto.FLOAT, ["N", 4])], [numpy_helper.from_array(table, "table")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, str(tmp_path / "embed.onnx"))
    manifest = edgeopt.convert(str(tmp_path / "embed.onnx"), device="x86-64", output_dir=tmp_path / "out",
                               input_shape="1,6", precisions=["fp32"], time_on_host=False)
    assert manifest["model"]["inputs"] == [{"name": "ids", "shape": [1, 6], "dtype": "int64", "declared_shape": [-1, -1]}]


def test_a_rerun_replaces_the_manifest_and_removes_what_only_the_old_one_listed(tmp_path, nets_path, image_data):
    calibration, evaluation = image_data
    out = tmp_path / "out"
    common = dict(device="x86-64", output_dir=out, input_shape="1,3,16,16", calibration=calibration,
                  eval_data=evaluation, time_on_host=False)
    edgeopt.convert(f"{nets_path}:small_cnn", **common)
    assert (out / "model.int8.tflite").exists()
    (out / "notes.txt").write_text("the user's own file")
    manifest = edgeopt.convert(f"{nets_path}:small_cnn", formats="onnx", **common)
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "model.fp32.onnx", "model.int8.onnx", "notes.txt"]
    assert json.loads((out / "manifest.json").read_text()) == manifest
    assert (out / "manifest.json").stat().st_mode & 0o044, "the manifest is readable like the artifacts"


def test_gpu_boards_and_untimed_runs_are_predictions():
    x86 = load_profile("x86-64")
    assert _measured_on_host(x86, True) == (True, "")
    measured, why = _measured_on_host(x86, False)
    assert not measured and "--no-timing" in why
    jetson = load_profile("jetson-orin-nano")
    same_arch_jetson = replace(jetson, cpu=replace(jetson.cpu, arch="x86_64"))
    measured, why = _measured_on_host(same_arch_jetson, True)
    assert not measured and "GPU" in why


def test_cosine_counts_an_all_zero_output_as_a_mismatch():
    reference = [np.array([[1.0, 2.0], [0.0, 0.0]])]
    zeros = [np.zeros((2, 2))]
    assert compare(reference, zeros).cosine_similarity == pytest.approx(0.5)  # one zero-vs-signal, one zero-vs-zero
    assert compare(zeros, zeros).cosine_similarity == 1.0
