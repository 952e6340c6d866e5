"""Real data: INT8 artifacts of a CNN trained on scikit-learn's digits keep top-1 within 1 point."""
from pathlib import Path

import numpy as np
import pytest

import edgeopt
from edgeopt_converters.source.examples import digits_splits

pytestmark = pytest.mark.slow


def test_int8_artifacts_keep_top1_within_one_point_of_fp32(tmp_path):
    splits = digits_splits()
    np.savez(tmp_path / "calib.npz", input=splits["calibration"][0])
    np.savez(tmp_path / "eval.npz", input=splits["eval"][0], labels=splits["eval"][1])
    factory = Path(__file__).with_name("digits_model.py")
    manifest = edgeopt.convert(f"{factory}:trained_cnn", device="rpi4", output_dir=tmp_path / "out",
                               input_shape="1,1,8,8", calibration=tmp_path / "calib.npz",
                               eval_data=tmp_path / "eval.npz", max_accuracy_drop=1.0, time_on_host=False)
    by_key = {a["key"]: a["accuracy"] for a in manifest["artifacts"]}
    assert set(by_key) == {"onnx-fp32", "onnx-int8", "tflite-fp32", "tflite-int8", "ncnn-fp32", "pte-fp32", "pte-int8"}
    reference = by_key["onnx-fp32"]["reference_top1_accuracy"]
    assert reference > 90.0, "the CNN did not learn the digits; the comparison would mean nothing"
    for key in ("onnx-int8", "tflite-int8", "pte-int8"):
        assert by_key[key]["samples"] == len(splits["eval"][0])
        assert by_key[key]["top1_accuracy"] >= reference - 1.0, (key, by_key[key])
    assert manifest["evaluation"]["labels"] is True and manifest["calibration"]["random"] is False
