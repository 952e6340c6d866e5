"""`edgeopt analyze` and `edgeopt profile` on a conversion's output, with and without fleet results."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import model_files

from edgeopt.analysis import analyze
from edgeopt.cli.main import main
from fleet_simulator import SimulatedDevice
from edgeopt.fleet.store import open_store
from edgeopt.profiling import compare, profile, profile_artifact

SHA = "ab" * 32


@pytest.fixture()
def outdir(tmp_path):
    return model_files.save_conv_outdir(tmp_path / "out", SHA)


def _fleet(tmp_path, measured):
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    device = SimulatedDevice("pi-1", profile="rpi5", seed=1)
    with open_store(url) as store:
        store.ingest(*_message(device.status()))
        for key, p50 in measured.items():
            meta = {"model": "net", "model_sha256": SHA, "artifact_key": key, "format": "onnx",
                    "precision": key.split("-")[1]}
            store.ingest(*_message(device.result(f"job-{key}", p50_ms=p50, meta=meta)))
    return url


def _message(published):
    return published.topic, published.payload


def test_without_fleet_data_the_prediction_says_what_calibrates_it(outdir):
    result = analyze(outdir, "rpi5")
    by_key = {a["key"]: a for a in result["artifacts"]}
    fp32, int8 = by_key["onnx-fp32"], by_key["onnx-int8"]
    assert fp32["precision"] == "fp32" and int8["precision"] == "int8"
    assert fp32["macs"] == int8["macs"] == 16 * 64 * 64 * 8 * 9
    conv_bytes = {a["key"]: next(n["bytes"] for n in a["prediction"]["nodes"] if n["name"] == "conv")
                  for a in (fp32, int8)}
    assert conv_bytes["onnx-int8"] < conv_bytes["onnx-fp32"] / 3  # INT8 weights and activations
    assert int8["prediction"]["roofline_ms"] < fp32["prediction"]["roofline_ms"]  # rpi5 has SDOT
    # ONNX Runtime FP32 on a Pi 5 has published measurements: the profile's priors calibrate it, and say how far.
    assert fp32["prediction"]["calibrated"]
    assert any("efficiency priors for onnxruntime fp32: predicted with priors fitted on" in n
               for n in fp32["prediction"]["notes"])
    # ONNX Runtime INT8 on a Pi 5 has one published measurement (Arm's Inception V3): calibrated, saying on how little.
    assert int8["prediction"]["calibrated"]
    assert any("efficiency priors for onnxruntime int8: predicted with priors fitted on 1 published measurements" in n
               for n in int8["prediction"]["notes"])
    # On a Pi 4 it has none: uncalibrated, and it says so.
    pi4_int8 = next(a for a in analyze(outdir, "rpi4")["artifacts"] if a["key"] == "onnx-int8")
    assert not pi4_int8["prediction"]["calibrated"]
    assert any("uncalibrated" in n for n in pi4_int8["prediction"]["notes"])
    conv = next(n for n in fp32["prediction"]["nodes"] if n["name"] == "conv")
    assert conv["bound"] in ("compute", "memory") and conv["predicted_ms"] > 0
    assert fp32["roofline_points"] and result["fleet"] == []


def test_fleet_measurements_are_compared_stored_and_calibrate_the_board(outdir, tmp_path):
    predicted = {a["key"]: a["prediction"]["roofline_ms"] for a in analyze(outdir, "rpi5")["artifacts"]}
    # The board ran both 3x and 3.3x slower than the roofline says.
    measured = {"onnx-fp32": predicted["onnx-fp32"] * 3.0, "onnx-int8": predicted["onnx-int8"] * 3.3}
    url = _fleet(tmp_path, measured)
    result = analyze(outdir, "rpi5", db=url)
    rows = {r["artifact"]: r for r in result["fleet"]}
    assert set(rows) == {"onnx-fp32", "onnx-int8"} and all(r["profile"] == "rpi5" for r in rows.values())
    fp32 = rows["onnx-fp32"]
    assert fp32["error_pct"] == pytest.approx((1 / 3.0 - 1) * 100, abs=0.1)
    # Calibrated by the other artifact only (left out of its own fit): 3.3 / 3.0 - 1 = +10 %.
    assert fp32["efficiency"] == pytest.approx(3.3, rel=1e-3) and fp32["efficiency_samples"] == 1
    assert fp32["calibrated_error_pct"] == pytest.approx(10.0, abs=0.1)
    with open_store(url) as store:
        assert {(f["artifact_key"], f["precision"]) for f in store.roofline_fits("rpi5")} == {
            ("onnx-fp32", "fp32"), ("onnx-int8", "int8")}
    # Later predictions for rpi5 are calibrated by its stored factor at their precision.
    by_key = {a["key"]: a["prediction"] for a in result["artifacts"]}
    assert by_key["onnx-fp32"]["calibrated"] and by_key["onnx-fp32"]["efficiency"] == pytest.approx(3.0, rel=1e-3)
    assert by_key["onnx-int8"]["predicted_ms"] == pytest.approx(measured["onnx-int8"], rel=1e-3)
    # Another board has no fleet fit: its published priors calibrate it, and its notes say so.
    other = analyze(outdir, "rpi4", db=url)["artifacts"][0]["prediction"]
    assert other["calibrated"] and any("rpi4's efficiency priors" in n for n in other["notes"])


def test_the_cli_prints_tables_and_json(outdir, tmp_path, capsys):
    url = _fleet(tmp_path, {"onnx-fp32": 50.0})
    assert main(["analyze", str(outdir), "--device", "rpi5", "--db", url]) == 0
    shown = capsys.readouterr().out
    assert "slowest nodes" in shown and "predicted against the fleet" in shown and "calibrated by rpi5" in shown
    assert main(["analyze", str(outdir / "model.fp32.onnx"), "--device", "jetson-orin-nano", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["machine"]["peak_gops"]["fp32"] == pytest.approx(1280.0)
    assert main(["analyze", str(outdir), "--device", "no-such-board"]) == 2


def test_host_peaks_are_measured(outdir):
    result = analyze(outdir / "model.fp32.onnx", "host", threads=1)
    machine = result["machine"]
    assert machine["source"].startswith("measured on this")
    assert machine["peak_gops"]["fp32"] > 0 and machine["peak_gops"]["int8"] > 0 and machine["bandwidth_gbps"] > 0


def test_profile_sets_fp32_against_int8_by_op_family(outdir, capsys):
    result = profile(outdir, threads=1, runs=3, warmup=1)
    assert [a["key"] for a in result["artifacts"]] == ["onnx-fp32", "onnx-int8"]
    int8 = result["artifacts"][1]["profile"]
    assert int8["profiler"] == "onnxruntime" and int8["node_count"] >= 1
    (comparison,) = result["comparisons"]
    families = {r["family"]: r for r in comparison["families"]}
    assert families["convolution"]["fp32_ms"] > 0 and families["convolution"]["int8_ms"] > 0
    assert comparison["speedup"] > 0 and 0 <= comparison["qdq_share"] <= 1
    assert main(["profile", str(outdir), "--runs", "2", "--threads", "1"]) == 0
    assert "against onnx-int8" in capsys.readouterr().out


def test_a_model_with_a_free_size_names_profiles_own_option_and_profiles_once_given(tmp_path, capsys):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, "width"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = tmp_path / "free.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(model))
    assert main(["profile", str(model), "--runs", "2", "--threads", "1"]) != 0
    err = capsys.readouterr().err
    assert "input 'x' has a free size on axis 2" in err and "edgeopt profile --input-shape" in err
    assert main(["profile", str(model), "--runs", "2", "--threads", "1", "--input-shape", "1,8,32"]) == 0


def _free_width_outdir(tmp_path):
    """A conversion's output whose artifact has a free width, fed at 48 wide (its manifest says so)."""
    w = numpy_helper.from_array(np.ones((4, 8, 1, 1), np.float32), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], name="conv")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 2, "width"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    out = tmp_path / "out"
    out.mkdir()
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(out / "model.onnx"))
    inputs = [{"name": "x", "dtype": "float32", "shape": [1, 8, 2, -1], "example_shape": [1, 8, 2, 48]}]
    artifacts = [{"key": "onnx-fp32", "path": "model.onnx", "format": "onnx", "precision": "fp32", "inputs": inputs}]
    (out / "manifest.json").write_text(json.dumps({"schema": "edgeopt.manifest/1", "model": {"sha256": SHA},
                                                   "artifacts": artifacts}))
    return out


def test_a_conversions_free_sizes_are_profiled_and_analysed_as_the_conversion_fed_them(tmp_path):
    out = _free_width_outdir(tmp_path)
    profiled = profile(out, runs=2, threads=1)["artifacts"][0]["profile"]
    assert profiled["profiler"] and profiled["node_count"] >= 1
    conv = analyze(out, "rpi5")["artifacts"][0]
    assert conv["ops"] == 2 * 4 * 8 * 2 * 48, "costed at the manifest's width of 48"
    assert not any("costed at 1" in n for n in conv["notes"])


def test_analysing_a_free_size_without_its_shape_says_it_was_costed_at_1(tmp_path):
    model = _free_width_outdir(tmp_path) / "model.onnx"
    conv = analyze(model, "rpi5")["artifacts"][0]
    assert conv["ops"] == 2 * 4 * 8 * 2
    assert any("free size costed at 1: 'x' axis 3" in n and "--input-shape" in n for n in conv["notes"]), conv["notes"]
    assert analyze(model, "rpi5", [[1, 8, 2, 48]])["artifacts"][0]["ops"] == 2 * 4 * 8 * 2 * 48


def test_family_comparison_verdicts():
    fp32 = {"op_types": [{"op_type": "Conv", "ms": 4.0}, {"op_type": "Transpose", "ms": 0.1}], "run_ms": 4.2,
            "node_ms": 4.1}
    int8 = {"op_types": [{"op_type": "QLinearConv", "ms": 1.0}, {"op_type": "Transpose", "ms": 0.5},
                         {"op_type": "DequantizeLinear", "ms": 0.5}], "run_ms": 2.1, "node_ms": 2.0}
    families = {r["family"]: r for r in compare(fp32, int8)["families"]}
    assert families["convolution"]["speedup"] == 4.0 and families["convolution"]["verdict"] == "faster"
    assert families["layout"]["verdict"] == "slower"
    assert families["quantize / dequantize"]["verdict"] == "only in INT8"
    assert compare(fp32, int8)["qdq_share"] == 0.25


def test_tflite_artifacts_say_why_they_are_not_profiled(tmp_path):
    result = profile_artifact(tmp_path / "model.tflite")
    assert result["profiler"] is None and "per-op profiler" in result["unavailable"]


def test_the_report_shows_the_profile_and_the_roofline_plot(outdir, tmp_path):
    url = _fleet(tmp_path, {"onnx-fp32": 40.0, "onnx-int8": 20.0})
    page = tmp_path / "report.html"
    assert main(["report", str(outdir), "--db", url, "--profile", "--roofline", "rpi5", "-o", str(page)]) == 0
    html = page.read_text()
    assert 'id="profile"' in html and "against onnx-int8" in html
    assert 'id="roofline"' in html and "roofline of onnx-fp32 on rpi5" in html and "roofline of onnx-int8 on rpi5" in html
    assert "<polyline" in html and "bound node" in html  # the roofs, and nodes as points by bound
    assert "Predicted against the fleet" in html
    assert main(["report", "--db", url, "--profile", "-o", str(page)]) == 2  # needs OUTDIR


def test_a_node_whose_kernel_pads_its_work_shows_by_how_much():
    from edgeopt.cli.analyze import _ops

    assert _ops({"ops": 1000.0, "padded_ops": 4000.0}) == "1.00 kop (x4.0)"
    assert _ops({"ops": 1000.0, "padded_ops": 0.0}) == "1.00 kop"
