"""Outputs checked on the board: a result whose outputs disagree with the FP32 reference is invalid."""
from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from edgeopt_converters.accuracy.board_reference import build_reference
from edgeopt_agent.bench import BenchmarkSpec, run_benchmark
from edgeopt_agent.bench.reference import OUTPUT_MISMATCH, compare, reference_feeds
from edgeopt_agent.errors import UserError
from edgeopt_agent.wire import check_reference
from edgeopt_agent.runners.base import TensorInfo
import model_files

QUICK = dict(runs=5, duration_s=0.0, warmup_runs=1, warmup_s=0.0, threads=1, idle_s=0, timeout_s=60)


def outdir_with(tmp_path, target_weights=None, precision="int8", accuracy=None):
    """A convert output folder: the FP32 model and a second artifact (the same model, or one with other weights)."""
    out = tmp_path / "out"
    out.mkdir()
    model_files.save_matmul_relu(out / "model.fp32.onnx", "N")
    model_files.save_matmul_relu(out / "model.target.onnx", "N", weights=target_weights)
    entry = {"key": f"onnx-{precision}", "path": "model.target.onnx", "format": "onnx", "precision": precision,
             "outputs": [{"name": "y"}], "accuracy": accuracy or {}}
    manifest = {"artifacts": [{"key": "onnx-fp32", "path": "model.fp32.onnx", "format": "onnx", "precision": "fp32"},
                              entry]}
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out, manifest, entry


INPUTS = [{"name": "x", "shape": [2, 16]}]


def test_the_fp32_artifact_matches_its_own_reference_and_the_result_says_so(tmp_path):
    out, manifest, _ = outdir_with(tmp_path)
    fp32 = manifest["artifacts"][0]
    reference = build_reference(out, manifest, fp32, INPUTS)
    assert json.dumps(reference) and check_reference(reference) is reference

    result = run_benchmark(BenchmarkSpec(artifact=str(out / "model.fp32.onnx"), inputs=INPUTS,
                                         reference=reference, **QUICK))

    assert result["ok"] and result["valid"], result.get("invalid_reasons")
    check = result["output_check"]
    assert check["ok"] and check["samples"] == 4
    assert check["outputs"][0]["cosine"] == pytest.approx(1.0) and check["outputs"][0]["max_abs_error"] == 0
    assert result["spec"]["reference"] == {"seed": reference["seed"], "samples": 4, "outputs": ["y"]}


def test_an_artifact_that_computes_something_else_is_invalid_with_the_figures(tmp_path):
    wrong = -model_files.MATMUL_WEIGHTS  # relu of the negation: what a broken kernel might produce
    verdicts = {"outputs": [{"name": "y", "kind": "embedding", "worst_cosine": 0.999, "max_abs_error": 0.05}]}
    out, manifest, entry = outdir_with(tmp_path, target_weights=wrong, accuracy=verdicts)
    reference = build_reference(out, manifest, entry, INPUTS)

    result = run_benchmark(BenchmarkSpec(artifact=str(out / "model.target.onnx"), inputs=INPUTS,
                                         reference=reference, **QUICK))

    assert result["ok"] is True and result["valid"] is False
    assert result["invalid_reasons"][-1].startswith(OUTPUT_MISMATCH + ": y (cosine ")
    figures = result["output_check"]["outputs"][0]
    assert figures["ok"] is False and figures["cosine"] < 0.5 and figures["max_abs_error"] > 0.1
    assert figures["tolerance"]["min_cosine"] >= 0.5


def test_tolerances_come_from_the_verdicts_and_a_small_drift_passes(tmp_path):
    drifted = model_files.MATMUL_WEIGHTS * np.float32(1.001)  # INT8-like: close to FP32, not equal
    verdicts = {"outputs": [{"name": "y", "kind": "embedding", "worst_cosine": 0.998, "max_abs_error": 0.02}]}
    out, manifest, entry = outdir_with(tmp_path, target_weights=drifted, accuracy=verdicts)
    reference = build_reference(out, manifest, entry, INPUTS)
    limits = reference["outputs"][0]["tolerance"]
    assert limits["min_cosine"] == pytest.approx(0.99)  # 1 - max(4 x (1 - 0.998), 0.01)

    result = run_benchmark(BenchmarkSpec(artifact=str(out / "model.target.onnx"), inputs=INPUTS,
                                         reference=reference, **QUICK))

    assert result["valid"], result["invalid_reasons"]
    figures = result["output_check"]["outputs"][0]
    assert figures["ok"] and figures["cosine"] == pytest.approx(1.0) and figures["max_abs_error"] > 0


def test_argmax_agreement_is_checked_for_class_scores():
    reference = {"seed": 1, "samples": 2, "outputs": [{
        "name": "logits", "stride": 1, "values": [[0.1, 0.9, 0.0], [0.8, 0.1, 0.1]], "argmax": [[1], [0]],
        "tolerance": {"min_cosine": 0.0, "max_abs_error": None, "min_argmax_agreement": 0.75}}]}
    swapped = [{"logits": np.array([[0.1, 0.9, 0.0]])}, {"logits": np.array([[0.1, 0.8, 0.1]])}]

    check = compare(reference, swapped, ["logits"])

    assert check["ok"] is False and check["outputs"][0]["argmax_agreement"] == 0.5
    assert "argmax agreement 0.50 < 0.75" in check["reason"]


def test_reference_inputs_of_a_quantized_input_stay_inside_its_range(tmp_path):
    from edgeopt_converters.accuracy.board_reference import input_ranges

    entry = {"inputs": [{"name": "q", "dtype": "int8", "quantization": {"scale": 0.5 / 127, "zero_point": 0}},
                        {"name": "f", "dtype": "float32", "quantization": None}]}
    ranges = input_ranges(entry)
    assert ranges == {"q": [0.0, 0.5]}  # the part of [0, 1) the int8 input can hold
    infos = [TensorInfo("q", (1, 64), "float32"), TensorInfo("f", (1, 64), "float32")]
    feeds = reference_feeds(infos, [{"name": "q", "shape": [1, 64]}, {"name": "f", "shape": [1, 64]}], 3, 0, ranges)
    assert feeds["q"].min() >= 0.0 and feeds["q"].max() < 0.5
    assert feeds["f"].max() > 0.5  # the float input keeps [0, 1)


def test_reference_inputs_do_not_depend_on_the_artifacts_input_order_or_names():
    described = [{"name": "a", "shape": [1, 4]}, {"name": "b", "shape": [1, 3], "alias": "model_b"}]
    onnx_like = [TensorInfo("a", (1, 4), "float32"), TensorInfo("b", (1, 3), "float32")]
    tflite_like = [TensorInfo("serving_b", (1, 3), "float32"), TensorInfo("a", (1, 4), "float32")]
    described[1]["alias"] = "serving_b"

    first = reference_feeds(onnx_like, described, 5, 0)
    second = reference_feeds(tflite_like, described, 5, 0)

    np.testing.assert_array_equal(first["a"], second["a"])
    np.testing.assert_array_equal(first["b"], second["serving_b"])
    assert not np.array_equal(first["a"], reference_feeds(onnx_like, described, 5, 1)["a"])


@pytest.mark.parametrize("change, message", [
    (lambda r: r.update(samples=9), "1-8 samples"),
    (lambda r: r["outputs"][0].update(values=[[1.0]]), "one list of at most"),
    (lambda r: r["outputs"][0].update(stride=0), "stride of at least 1"),
    (lambda r: r["outputs"][0]["tolerance"].update(min_cosine="high"), "each a number or null"),
    (lambda r: r.update(extra=1), "must be an object with seed, samples, outputs and ranges"),
    (lambda r: r.update(ranges={"x": [1.0, 0.0]}), "low < high"),
])
def test_a_malformed_reference_is_refused(change, message):
    reference = {"seed": 0, "samples": 2, "outputs": [
        {"name": "y", "stride": 1, "values": [[1.0], [2.0]], "tolerance": {"min_cosine": 0.9}}]}
    check_reference(copy.deepcopy(reference))
    change(reference)
    with pytest.raises(UserError, match=message):
        check_reference(reference)


def test_a_quantized_input_gets_the_same_real_values_as_the_fp32_artifacts_float_input():
    """A full-integer TFLite lists its image as int8: the board must feed the values the FP32
    artifact got on the host (the runner quantizes them), not integers 0 and 1."""
    from edgeopt_agent.runners.quantization import Quantization

    described = [{"name": "x", "shape": [1, 8], "dtype": "int8"}]
    fp32 = [TensorInfo("x", (1, 8), "float32")]
    quantized = [TensorInfo("x", (1, 8), "int8", quantization=Quantization(1 / 127, 0))]

    host, board = reference_feeds(fp32, described, 7, 0)["x"], reference_feeds(quantized, described, 7, 0)["x"]

    assert host.dtype == board.dtype == np.float32
    np.testing.assert_array_equal(host, board)
    assert 0.0 < board.max() < 1.0 and len(np.unique(board)) == 8


def test_tolerances_come_from_the_figures_the_conversion_recorded_on_these_inputs(tmp_path):
    """With `reference_figures` the tolerance is what the artifact earned on the very reference
    inputs (twice its gap, plus a slack): no fixed floor, and no run of the file under test here."""
    from edgeopt_converters.accuracy.board_reference import record_reference_figures

    drifted = model_files.MATMUL_WEIGHTS * np.float32(1.01)
    out, manifest, entry = outdir_with(tmp_path, target_weights=drifted)
    entry["inputs"] = [{"name": "x", "shape": [2, 16], "dtype": "float32"}]
    record_reference_figures(out, manifest)
    figures = entry["reference_figures"]["outputs"][0]
    assert figures["name"] == "y" and figures["cosine"] > 0.9999 and figures["max_abs_error"] > 0

    reference = build_reference(out, manifest, entry, entry["reference_figures"]["inputs"])
    limits = reference["outputs"][0]["tolerance"]
    gap = 1 - figures["cosine"]
    assert limits["min_cosine"] == pytest.approx(1 - max(2 * gap, gap + 1e-3), abs=1e-6)
    good = run_benchmark(BenchmarkSpec(artifact=str(out / "model.target.onnx"), inputs=entry["inputs"],
                                       reference=reference, **QUICK))
    assert good["valid"], good["invalid_reasons"]

    # the file changes after conversion (a broken kernel would do the same): its own figures are not re-measured
    model_files.save_matmul_relu(out / "model.target.onnx", "N", weights=model_files.MATMUL_WEIGHTS * np.float32(1.3)
                                 + np.float32(0.2))
    changed = build_reference(out, manifest, entry, entry["reference_figures"]["inputs"])
    assert changed["outputs"][0]["tolerance"] == limits
    bad = run_benchmark(BenchmarkSpec(artifact=str(out / "model.target.onnx"), inputs=entry["inputs"],
                                      reference=changed, **QUICK))
    assert bad["ok"] and not bad["valid"] and bad["invalid_reasons"][-1].startswith(OUTPUT_MISMATCH)
