"""An ncnn bundle and ExecuTorch programs deployed to an agent: each travels as one file, in chunks,
is stored by the agent, benchmarked in its child and checked against the host's FP32 outputs."""
from __future__ import annotations

import numpy as np
import pytest

from deploy_harness import deploy_agent
from harness import QUICK_BENCH
from mqtt_broker import MqttBroker

import model_files
from edgeopt.deploy import deploy

pytestmark = pytest.mark.slow
pytest.importorskip("torch", reason="converting needs the convert extra (torch)")
pytest.importorskip("pnnx", reason="ncnn export needs the ncnn extra (pnnx); scripts/setup.sh installs it")
pytest.importorskip("ncnn", reason="ncnn artifacts run on the ncnn extra; scripts/setup.sh installs it")
pytest.importorskip("executorch", reason="ExecuTorch export needs the executorch extra; scripts/setup.sh installs it")


def test_ncnn_and_executorch_artifacts_deploy_in_chunks_and_run_on_the_agent(tmp_path):
    import edgeopt

    rng = np.random.default_rng(1)
    np.savez(tmp_path / "calib.npz", input=rng.standard_normal((16, 3, 16, 16)).astype(np.float32))
    outdir = tmp_path / "out"
    manifest = edgeopt.convert(f"{model_files.NETS}:small_cnn", device="rpi4", output_dir=outdir,
                               input_shape="1,3,16,16", calibration=tmp_path / "calib.npz",
                               formats=["ncnn", "pte"], time_on_host=False)
    keys = [a["key"] for a in manifest["artifacts"] if a["format"] in ("ncnn", "pte")]
    assert all(a["size_bytes"] > 4096 for a in manifest["artifacts"] if a["key"] in keys)  # several chunks each
    assert sorted(keys) == ["ncnn-fp32", "pte-fp32", "pte-int8"], manifest["failed_artifacts"]
    broker = MqttBroker(tmp_path / "broker").start()
    agent = deploy_agent(broker, tmp_path, "lab-pi4", "rpi4")
    try:
        agent.start()
        for key in keys:
            [row] = deploy(outdir, device="lab-pi4", artifact=key, unsigned=True, wait=True, timeout_s=120,
                           broker=broker.address, bench=QUICK_BENCH, chunk_size=4096)
            assert row["state"] == "answered" and row["ok"] is True, (key, row["error"])
            result = row["result"]
            assert result["runtime"] == ("ncnn" if key.startswith("ncnn") else "executorch")
            assert result["output_check"]["ok"] and result["valid"], (key, result["output_check"])
    finally:
        agent.close()
        broker.stop()
