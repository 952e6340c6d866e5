"""`edgeopt convert` judges every output by what it means, and recommends only what holds."""
import json

import numpy as np
import pytest

import edgeopt
from edgeopt.cli.main import main
from edgeopt_agent.errors import UserError


@pytest.fixture(scope="module")
def detector_data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("det")
    rng = np.random.default_rng(0)
    np.savez(folder / "calib.npz", x=rng.standard_normal((32, 3, 16, 16)).astype(np.float32))
    return folder / "calib.npz"


def by_key(manifest):
    return {a["key"]: a for a in manifest["artifacts"]}


def test_int8_detector_with_zeroed_scores_fails_and_is_not_recommended(tmp_path, nets_path, detector_data):
    """Boxes (0-640) and scores (0-1) share one INT8 scale: every score rounds to zero, cosine stays 0.9999."""
    manifest = edgeopt.convert(f"{nets_path}:tiny_detector", device="x86-64", output_dir=tmp_path / "out",
                               input_shape="1,3,16,16", calibration=detector_data, formats=["onnx"],
                               mixed_precision=False)
    artifacts = by_key(manifest)
    int8 = artifacts["onnx-int8"]["accuracy"]
    assert int8["cosine_similarity"] > 0.999, "the old first-output cosine would have passed it"
    (output,) = int8["outputs"]
    assert output["kind"] == "detection" and output["kind_source"] == "inferred"
    assert int8["verdict"] == "failed" and output["found_detections"] == 0 < output["reference_detections"]
    assert artifacts["onnx-fp32"]["accuracy"]["verdict"] == "ok"
    assert manifest["recommended"] == "onnx-fp32"
    assert "onnx-int8 failed" in manifest["recommendation"]["reason"]


def test_budget_gate_leaves_out_and_lists_what_fails_it(tmp_path, nets_path, detector_data):
    """--max-accuracy-drop leaves out the artifact that fails it, names it and the output in the manifest,
    and keeps the rest: the conversion fails only when nothing usable is left (or at once, with --strict)."""
    manifest = edgeopt.convert(f"{nets_path}:tiny_detector", device="x86-64", output_dir=tmp_path / "out",
                               input_shape="1,3,16,16", calibration=detector_data, formats=["onnx"],
                               max_accuracy_drop=1.0, time_on_host=False, mixed_precision=False)
    assert "onnx-int8" not in by_key(manifest) and "onnx-fp32" in by_key(manifest)
    (failed,) = [f for f in manifest["failed_artifacts"] if f["key"] == "onnx-int8"]
    assert failed["cause"].startswith("fails --max-accuracy-drop 1: lost 100.00 points (")
    assert "detection" in failed["cause"] and "missed" in failed["cause"]
    assert not (tmp_path / "out" / "model.int8.onnx").exists()
    assert any(w.startswith("onnx-int8 is left out: it fails --max-accuracy-drop 1") for w in manifest["warnings"])

    with pytest.raises(UserError, match=r"onnx-int8 lost 100\.00 points \(.*detection.*missed") as err:
        edgeopt.convert(f"{nets_path}:tiny_detector", device="x86-64", output_dir=tmp_path / "strict",
                        input_shape="1,3,16,16", calibration=detector_data, formats=["onnx"],
                        max_accuracy_drop=1.0, time_on_host=False, mixed_precision=False, strict=True)
    assert "--max-accuracy-drop 1" in str(err.value) and "--strict" in str(err.value)
    assert not (tmp_path / "strict").exists()


def test_embeddings_are_judged_by_cosine_and_kinds_can_be_given(tmp_path, nets_path, capsys):
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "calib.npz", x=rng.standard_normal((64, 32)).astype(np.float32))
    out = tmp_path / "out"
    code = main(["convert", f"{nets_path}:embedder", "--device", "x86-64", "-o", str(out), "--input-shape", "1,32",
                 "--calibration", str(tmp_path / "calib.npz"), "--format", "onnx", "--no-timing", "--json"])
    assert code == 0
    manifest = json.loads(capsys.readouterr().out)
    for artifact in manifest["artifacts"]:
        (output,) = artifact["accuracy"]["outputs"]
        assert output["kind"] == "embedding" and "top1_agreement" not in output
        assert artifact["accuracy"]["top1_agreement"] is None
    name = manifest["artifacts"][0]["accuracy"]["outputs"][0]["name"]
    code = main(["convert", f"{nets_path}:embedder", "--device", "x86-64", "-o", str(tmp_path / "again"),
                 "--input-shape", "1,32", "--calibration", str(tmp_path / "calib.npz"), "--format", "onnx",
                 "--no-timing", "--json", "--output-kind", f"{name}=regression"])
    assert code == 0
    again = json.loads(capsys.readouterr().out)
    assert all(a["accuracy"]["outputs"][0]["kind_source"] == "given" for a in again["artifacts"])
    assert again["options"]["output_kinds"] == {name: "regression"}


def test_unknown_output_name_or_kind_is_one_line(tmp_path, nets_path, capsys):
    args = ["convert", f"{nets_path}:embedder", "--device", "x86-64", "-o", str(tmp_path / "o"),
            "--input-shape", "1,32", "--format", "onnx", "--precision", "fp32", "--no-timing"]
    assert main(args + ["--output-kind", "nope=embedding"]) == 2
    assert "--output-kind names nope, but the model's outputs are" in capsys.readouterr().err
    assert main(args + ["--output-kind", "x=vector"]) == 2
    assert "KIND one of classes, detection" in capsys.readouterr().err


def test_stateful_model_is_judged_streamed(tmp_path, nets_path):
    rng = np.random.default_rng(2)
    np.savez(tmp_path / "data.npz", x=rng.standard_normal((64, 8)).astype(np.float32),
             state=(rng.standard_normal((64, 16)) * 0.1).astype(np.float32))
    manifest = edgeopt.convert(f"{nets_path}:gru_step", device="x86-64", output_dir=tmp_path / "out",
                               input_shape=["1,8", "1,16"], calibration=tmp_path / "data.npz", formats=["onnx"],
                               time_on_host=False, stream_steps=40)
    assert any("stateful model" in note and "feeds input state" in note for note in manifest["notes"])
    state_output = next(iter(manifest["options"]["state_pairs"].values()))
    for artifact in manifest["artifacts"]:
        streamed = artifact["accuracy"]["streamed"]
        assert streamed["steps"] == 40
        kinds = {o["name"]: o["kind"] for o in streamed["outputs"]}
        assert kinds[f"{state_output}@stream"] == "state"
    fp32 = by_key(manifest)["onnx-fp32"]["accuracy"]
    assert fp32["verdict"] == "ok"


def test_state_pair_given_by_hand_is_checked(tmp_path, nets_path):
    with pytest.raises(UserError, match="--state names output 'missing'"):
        edgeopt.convert(f"{nets_path}:gru_step", device="x86-64", output_dir=tmp_path / "out",
                        input_shape=["1,8", "1,16"], formats=["onnx"], precisions=["fp32"], time_on_host=False,
                        state={"state": "missing"})


def test_user_metric_gates_the_conversion(tmp_path, nets_path, detector_data):
    plugin = tmp_path / "count.py"
    plugin.write_text("import numpy as np\n"
                      "def confident(reference, candidate, labels):\n"
                      "    (head,) = candidate.values()\n"
                      "    return float((head[:, 4:] > 0.25).sum())\n")
    manifest = edgeopt.convert(f"{nets_path}:tiny_detector", device="x86-64", output_dir=tmp_path / "out",
                               input_shape="1,3,16,16", calibration=detector_data, formats=["onnx"],
                               metric=f"{plugin}:confident", time_on_host=False, mixed_precision=False)
    metric = by_key(manifest)["onnx-int8"]["accuracy"]["metric"]
    assert metric["reference"] > 0 and metric["candidate"] == 0 and metric["verdict"] == "ok"  # no limit given
    gated = edgeopt.convert(f"{nets_path}:tiny_detector", device="x86-64", output_dir=tmp_path / "gated",
                            input_shape="1,3,16,16", calibration=detector_data, formats=["onnx"],
                            metric=f"{plugin}:confident", max_metric_drop=1.0, time_on_host=False,
                            mixed_precision=False)
    assert "onnx-int8" not in by_key(gated)
    assert any(f["key"] == "onnx-int8" and "--max-metric-drop 1" in f["cause"] for f in gated["failed_artifacts"])
    with pytest.raises(UserError, match="--max-metric-drop 1"):
        edgeopt.convert(f"{nets_path}:tiny_detector", device="x86-64", output_dir=tmp_path / "strict",
                        input_shape="1,3,16,16", calibration=detector_data, formats=["onnx"],
                        metric=f"{plugin}:confident", max_metric_drop=1.0, time_on_host=False,
                        mixed_precision=False, strict=True)


@pytest.mark.slow
def test_the_same_command_recommends_the_same_artifact_three_times(tmp_path, nets_path):
    """Seven noisy rounds once recommended int8, fp32, int8 for one command. Paired rounds until each
    speed-up is known within 5 % give one answer, on a model whose candidates differ clearly: at 96x96,
    TFLite INT8 about 1.7x its FP32 and ONNX INT8 about 0.7x its FP32 (AVX-512 VNNI host, 2026-11-24). At
    16x16 a run took 3-4 us, and TFLite INT8 measured 1.06x [1.02, 1.10] in one CI run and 1.18x in another:
    a threshold at 1.05 cannot give one answer there."""
    rng = np.random.default_rng(3)
    np.savez(tmp_path / "calib.npz", x=rng.standard_normal((64, 3, 96, 96)).astype(np.float32))
    runs = [edgeopt.convert(f"{nets_path}:small_cnn", device="x86-64", output_dir=tmp_path / f"run{i}",
                            input_shape="1,3,96,96", calibration=tmp_path / "calib.npz")
            for i in range(3)]
    assert len({m["recommended"] for m in runs}) == 1, [m["recommendation"] for m in runs]
    for manifest in runs:
        for artifact in manifest["artifacts"]:
            speedup = artifact["host_timing"]["speedup"]
            if speedup:
                low, high = speedup["interval"]
                assert low <= speedup["estimate"] <= high
            if artifact["recommended"] and speedup:
                assert low >= 1.05, "a lower precision is recommended only when shown faster"
