"""An artifact that cannot be built or run is listed as failed with its cause; the others go on.

The standard Silero VAD ONNX (a real model from its PyPI wheel, with `If` branches) is the case:
onnxruntime refuses its static QDQ INT8 at load (`Node (If_0) ... TypeInferenceError`). Before,
that one artifact killed the whole conversion with nothing written.
"""
import json

import pytest

from edgeopt.cli.main import main

from realbench.corpus import CorpusMissing, corpus_file

VAD_INPUTS = ["--input-shape", "input=1,512", "--input-shape", "state=2,1,128", "--input-value", "sr=16000"]


@pytest.fixture(scope="module")
def vad():
    try:
        return corpus_file("silero-vad", "vad_full")
    except CorpusMissing as exc:
        pytest.skip(str(exc))


def test_a_refused_int8_is_listed_failed_repaired_where_it_can_be_and_the_rest_is_written(vad, tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["convert", str(vad), "--device", "x86-64", "-o", str(out), "--no-timing", *VAD_INPUTS])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    manifest = json.loads((out / "manifest.json").read_text())
    [failed] = manifest["failed_artifacts"]
    assert failed["key"] == "onnx-int8" and "If_0" in failed["cause"]
    keys = {a["key"] for a in manifest["artifacts"]}
    assert "onnx-fp32" in keys and "onnx-int8" not in keys
    assert not (out / "model.int8.onnx").exists()
    # repairs tried: the node the runtime named kept in float, then another mode (dynamic INT8)
    assert any("built again with If_0 kept in float" in n for n in manifest["notes"])
    assert "onnx-int8-dynamic" in keys
    assert manifest["recommendation"]["key"] != "onnx-int8"
    assert "onnx-int8: failed:" in captured.out and "failed" in captured.out


def test_strict_stops_at_the_first_failed_artifact_with_one_line(vad, tmp_path, capsys):
    code = main(["convert", str(vad), "--device", "x86-64", "-o", str(tmp_path / "out"), "--no-timing", "--strict",
                 *VAD_INPUTS])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "onnx-int8 failed" in errors[0] and "--strict" in errors[0]
    assert "Traceback" not in err


def test_a_tflite_int8_that_kept_its_weights_in_float_is_called_so(tmp_path, nets_path):
    """litert-torch leaves an LSTM's weights in float: its "INT8" file is about FP32's size."""
    import numpy as np

    import edgeopt

    rng = np.random.default_rng(0)
    np.savez(tmp_path / "calib.npz", x=rng.standard_normal((16, 12, 8)).astype(np.float32))
    manifest = edgeopt.convert(f"{nets_path}:lstm", device="x86-64", output_dir=tmp_path / "out",
                               input_shape="1,12,8", calibration=tmp_path / "calib.npz", formats=["tflite"],
                               time_on_host=False)
    entry = next(a for a in manifest["artifacts"] if a["key"] == "tflite-int8")
    assert entry["weights"]["ratio"] > 0.6 and entry["not_quantized"] is True
    assert any(w.startswith("tflite-int8 is not really quantized") for w in manifest["warnings"])
