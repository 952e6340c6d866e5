"""What convert calls ok is valid when benchmarked, and a changed artifact is not.

Each profile family converts a small CNN calibrated on standard-normal data (inputs far outside
[0, 1), like ImageNet-normalized images), then `edgeopt bench OUTDIR` checks every artifact's
outputs against its FP32 artifact's with the tolerance the conversion recorded for it. A
full-integer TFLite INT8 (int8 input and output) and a QDQ ONNX INT8 are among them.
"""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

import edgeopt
from edgeopt.cli.main import main
from model_files import perturb_onnx_weights

pytestmark = pytest.mark.slow
QUICK = ["--runs", "5", "--duration", "0", "--warmup", "1", "--idle", "0", "--no-sensors", "--json"]


def bench(capsys, outdir, *extra):
    code = main(["bench", str(outdir), *QUICK, *extra])
    return code, {a["manifest_entry"]["key"]: a for a in json.loads(capsys.readouterr().out)["artifacts"]}


@pytest.fixture(scope="module")
def normalized_data(tmp_path_factory):
    """Calibration and (unlabelled) evaluation images standardised like ImageNet inputs: roughly
    [-2.5, 3], enough samples for a 1-point verdict on top-1 agreement with FP32."""
    folder = tmp_path_factory.mktemp("normalized")
    rng = np.random.default_rng(3)
    calibration, evaluation = folder / "calib.npz", folder / "eval.npz"
    np.savez(calibration, input=(rng.standard_normal((64, 3, 16, 16)) * 0.9 + 0.2).astype(np.float32))
    np.savez(evaluation, input=(rng.standard_normal((600, 3, 16, 16)) * 0.9 + 0.2).astype(np.float32))
    return calibration, evaluation


@pytest.fixture(scope="module", params=["x86-64", "rpi4", "jetson-orin-nano"])
def converted(request, tmp_path_factory, nets_path, normalized_data):
    calibration, evaluation = normalized_data
    out = tmp_path_factory.mktemp(request.param) / "out"
    manifest = edgeopt.convert(f"{nets_path}:small_cnn", device=request.param, output_dir=out,
                               input_shape="1,3,16,16", calibration=calibration, eval_data=evaluation,
                               time_on_host=False)
    return out, manifest


def test_every_artifact_convert_called_ok_is_valid_with_the_tolerance_it_earned(converted, capsys):
    out, manifest = converted
    code, results = bench(capsys, out)
    ok = [a["key"] for a in manifest["artifacts"] if a["accuracy"]["verdict"] == "ok"]
    assert ok and any(a["precision"] == "int8" for a in manifest["artifacts"] if a["key"] in ok)
    for key in ok:
        result = results[key]
        assert result["ok"] and result["valid"], (key, result.get("invalid_reasons"))
        entry = next(a for a in manifest["artifacts"] if a["key"] == key)
        if entry["precision"] != "fp32":
            recorded = entry["reference_figures"]["outputs"][0]
            check = result["output_check"]["outputs"][0]
            # the board (here: this host again) computes what the conversion measured on these inputs
            assert check["cosine"] >= recorded["cosine"] - 1e-4
            assert check["tolerance"]["min_cosine"] > 0.5  # earned, not a floor
    assert code == (0 if all(r["valid"] for r in results.values()) else 1)


def test_full_integer_tflite_int8_gets_real_valued_inputs_and_matches_fp32(converted, capsys):
    out, manifest = converted
    entry = next((a for a in manifest["artifacts"] if a["key"] == "tflite-int8"), None)
    if entry is None:
        pytest.skip(f"the {manifest['device']} recipe makes no TFLite INT8")
    assert entry["inputs"][0]["dtype"] == "int8"  # full-integer: the board quantizes the real values itself
    _, results = bench(capsys, out)
    check = results["tflite-int8"]["output_check"]["outputs"][0]
    assert check["ok"] and check["cosine"] > 0.95, check


def test_a_changed_int8_artifact_is_invalid_and_bench_exits_1(converted, capsys, tmp_path):
    out, manifest = converted
    copy = tmp_path / "changed"
    shutil.copytree(out, copy)
    entry = next(a for a in manifest["artifacts"] if a["key"] == "onnx-int8")
    perturb_onnx_weights(copy / entry["path"])

    code, results = bench(capsys, copy)

    assert results["onnx-int8"]["ok"] and results["onnx-int8"]["valid"] is False
    assert results["onnx-int8"]["invalid_reasons"][-1].startswith("output_mismatch")
    assert results["onnx-fp32"]["valid"] is True
    assert code == 1
    code, _ = bench(capsys, copy, "--allow-invalid")
    assert code == 0
