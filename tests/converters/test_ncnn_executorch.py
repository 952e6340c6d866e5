"""ncnn and ExecuTorch artifacts from a real CNN: converted, judged against FP32 like every other
artifact, and benchmarked by `edgeopt bench` in the agent's benchmark child."""
from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

pytest.importorskip("torch", reason="converting needs the convert extra (torch)")
pytest.importorskip("pnnx", reason="ncnn export needs the ncnn extra (pnnx); scripts/setup.sh installs it")
pytest.importorskip("ncnn", reason="ncnn artifacts run on the ncnn extra; scripts/setup.sh installs it")
pytest.importorskip("executorch", reason="ExecuTorch export needs the executorch extra; scripts/setup.sh installs it")

QUICK = ["--runs", "3", "--duration", "0", "--warmup", "1", "--idle", "0", "--no-sensors", "--json"]


@pytest.fixture(scope="module")
def converted(tmp_path_factory, nets_path):
    import edgeopt

    folder = tmp_path_factory.mktemp("ncnn-pte")
    rng = np.random.default_rng(7)
    np.savez(folder / "calib.npz", input=rng.standard_normal((32, 3, 16, 16)).astype(np.float32))
    np.savez(folder / "eval.npz", input=rng.standard_normal((48, 3, 16, 16)).astype(np.float32))
    out = folder / "out"
    manifest = edgeopt.convert(f"{nets_path}:small_cnn", device="rpi5", output_dir=out, input_shape="1,3,16,16",
                               calibration=folder / "calib.npz", eval_data=folder / "eval.npz",
                               formats=["ncnn", "pte"], time_on_host=False)
    return out, manifest, {a["key"]: a for a in manifest["artifacts"]}


@pytest.mark.slow
def test_rpi5_gets_ncnn_fp32_fp16_and_executorch_fp32_int8_each_judged_against_fp32(converted):
    out, manifest, by_key = converted
    assert set(by_key) == {"onnx-fp32", "ncnn-fp32", "ncnn-fp16", "pte-fp32", "pte-int8"}, manifest["failed_artifacts"]
    for key in ("ncnn-fp32", "ncnn-fp16", "pte-fp32"):
        assert by_key[key]["accuracy"]["verdict"] == "ok", (key, by_key[key]["accuracy"])
    assert by_key["pte-int8"]["accuracy"]["verdict"] in ("ok", "unresolved"), by_key["pte-int8"]["accuracy"]
    assert by_key["ncnn-fp32"]["board"]["runtime"] == "ncnn" and by_key["pte-int8"]["board"]["runtime"] == "executorch"
    assert manifest["recommendation"]["basis"] == "predicted"  # rpi5 is not this host: a prediction, and it says so
    with zipfile.ZipFile(out / by_key["ncnn-fp16"]["path"]) as archive:  # one file; `unzip` gives the two
        assert {"model.param", "model.bin"} <= set(archive.namelist())
        assert json.loads(archive.read("edgeopt.json"))["precision"] == "fp16"
        fp16_weights = archive.getinfo("model.bin").file_size
    with zipfile.ZipFile(out / by_key["ncnn-fp32"]["path"]) as archive:
        assert archive.getinfo("model.bin").file_size > 1.8 * fp16_weights  # pnnx's fp16=0 keeps FP32 weights


@pytest.mark.slow
def test_the_runners_compute_what_onnxruntime_computes(converted):
    from edgeopt_agent.runners import open_runner

    out, _, by_key = converted
    x = np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)
    with open_runner(out / by_key["onnx-fp32"]["path"], threads=1) as onnx_runner:
        name = onnx_runner.inputs()[0].name
        expected = list(onnx_runner.infer({name: x}).values())[0]
    with open_runner(out / by_key["ncnn-fp32"]["path"], threads=1) as ncnn_runner:
        assert [i.name for i in ncnn_runner.inputs()] == [name]  # the ONNX names, not pnnx's in0
        assert ncnn_runner.describe()["fp16"] is False
        np.testing.assert_allclose(list(ncnn_runner.infer({name: x}).values())[0], expected, rtol=1e-4, atol=1e-4)
    with open_runner(out / by_key["ncnn-fp16"]["path"], threads=1) as fp16_runner:
        assert fp16_runner.describe()["fp16"] is True
    with open_runner(out / by_key["pte-fp32"]["path"], threads=1) as pte_runner:
        assert [i.name for i in pte_runner.inputs()] == ["input_0"] and pte_runner.inputs()[0].shape == (1, 3, 16, 16)
        assert "threads=1 not applied" in pte_runner.notes[0]
        np.testing.assert_allclose(pte_runner.infer({"input_0": x[:1]})["output_0"], expected[:1], rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_edgeopt_bench_runs_them_in_the_benchmark_child_and_checks_their_outputs(converted, capsys):
    from edgeopt.cli.main import main

    out, _, _ = converted
    assert main(["bench", str(out), *QUICK]) == 0
    results = {a["manifest_entry"]["key"]: a for a in json.loads(capsys.readouterr().out)["artifacts"]}
    for key, runtime in (("ncnn-fp32", "ncnn"), ("ncnn-fp16", "ncnn"), ("pte-fp32", "executorch"),
                         ("pte-int8", "executorch")):
        result = results[key]
        assert result["ok"] and result["runtime"] == runtime, (key, result.get("error"))
        assert result["output_check"]["ok"], (key, result["output_check"])
