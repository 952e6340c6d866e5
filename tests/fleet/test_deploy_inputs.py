"""A deployed model benchmarks on the board with no input options, whatever its inputs: the job
carries the manifest's input description (shapes of dynamic dims, constants, the model's names)."""
from __future__ import annotations

import threading

import numpy as np
import pytest
from deploy_harness import deploy_agent
from harness import QUICK_BENCH, wait_until
from mqtt_broker import MqttBroker

import model_files
from edgeopt.deploy import deploy
from edgeopt.deploy.api import broker_settings
from edgeopt.fleet.collector import Collector
from edgeopt.fleet.store import open_store

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    """A broker, the collector and one agent (rpi4 profile, unsigned artifacts accepted)."""
    workdir = tmp_path_factory.mktemp("board")
    broker = MqttBroker(workdir / "broker").start()
    store = open_store(f"sqlite:///{workdir / 'fleet.db'}")
    collector = Collector(store, broker_settings(broker.address), client_id="deploy-inputs-collector")
    stop = threading.Event()
    thread = threading.Thread(target=collector.run, args=(stop,), daemon=True)
    agent = deploy_agent(broker, workdir, "lab-pi4", "rpi4")
    try:
        thread.start()
        agent.start()
        wait_until(lambda: [d for d in store.devices() if d["state"] == "online"], "the agent online")
        broker.store = store  # for the tests that read what the collector filed
        yield broker
    finally:
        stop.set()
        thread.join(20)
        agent.close()
        store.close()
        broker.stop()


def convert_case(case, tmp_path):
    pytest.importorskip("torch", reason="converting needs the convert extra (torch)")
    import edgeopt

    if case == "stateful-onnx":
        model = model_files.save_stateful_vad_onnx(tmp_path / "vad.onnx")
        options = dict(input_shape={"input": (1, 64)}, input_value={"sr": 16000})
    elif case == "stateful-tflite":
        model = f"{model_files.NETS}:stateful_vad"
        options = dict(input_shape={"x": (1, 64), "state": (2, 1, 8)}, input_value={"sr": 16000},
                       formats=["tflite"])
    else:
        rng = np.random.default_rng(0)
        np.savez(tmp_path / "calib.npz", input_ids=rng.integers(0, 50, (8, 12)),
                 attention_mask=np.ones((8, 12), np.int64))
        model = model_files.save_token_encoder_onnx(tmp_path / "encoder.onnx")
        options = dict(calibration=tmp_path / "calib.npz")
    outdir = tmp_path / "out"
    return outdir, edgeopt.convert(model, device="rpi4", output_dir=outdir, time_on_host=False, **options)


@pytest.mark.parametrize("case", ["stateful-onnx", "stateful-tflite", "dynamic-seq"])
def test_a_deployed_model_benchmarks_with_no_input_options(case, board, tmp_path):
    outdir, manifest = convert_case(case, tmp_path)
    keys = [a["key"] for a in manifest["artifacts"] if a["precision"] == "fp32"]
    [row] = deploy(outdir, device="lab-pi4", artifact=keys[0], unsigned=True, wait=True, timeout_s=60,
                   broker=board.address, bench=QUICK_BENCH, chunk_size=64 * 1024)
    assert row["state"] == "answered" and row["ok"] is True, row["error"]
    fed = {i["name"]: i["shape"] for i in row["result"]["inputs"]}
    entry = next(a for a in manifest["artifacts"] if a["key"] == keys[0])
    assert set(fed) == {i["name"] for i in entry["inputs"]}
    assert row["result"]["latency_ms"]["p50"] > 0
    check = row["result"]["output_check"]  # the board reproduced the host's FP32 outputs on the signed reference
    assert check["ok"] is True and row["result"]["valid"] is True, check
    assert all(o["cosine"] > 0.9999 for o in check["outputs"])
    described = {d["name"]: d for d in row["result"]["spec"]["inputs"]}  # what the job told the board
    assert {n: d["shape"] for n, d in described.items()} == {i["name"]: i["example_shape"] for i in entry["inputs"]}
    if case == "stateful-onnx":
        assert described["sr"]["value"] == 16000
    if case == "stateful-tflite":
        assert sorted(d["alias"] for d in described.values()) == ["state", "x"]


def test_a_deployed_artifact_whose_outputs_are_wrong_is_filed_invalid_with_the_figures(board, tmp_path):
    import hashlib
    import json

    from edgeopt.fleet.views import RESULTS, cells

    outdir = tmp_path / "out"
    outdir.mkdir()
    model_files.save_matmul_relu(outdir / "model.fp32.onnx", "N")
    # What a broken INT8 kernel looks like from outside: a model that runs and computes something else.
    model_files.save_matmul_relu(outdir / "model.int8.onnx", "N", weights=-model_files.MATMUL_WEIGHTS)
    entries = []
    for key, name in (("onnx-fp32", "model.fp32.onnx"), ("onnx-int8", "model.int8.onnx")):
        data = (outdir / name).read_bytes()
        entries.append({"key": key, "path": name, "format": "onnx", "precision": key.split("-")[1],
                        "sha256": hashlib.sha256(data).hexdigest(), "size_bytes": len(data),
                        "inputs": [{"name": "x", "shape": ["N", 16], "example_shape": [1, 16], "dtype": "float32"}],
                        "outputs": [{"name": "y"}],
                        "accuracy": {"outputs": [{"name": "y", "kind": "embedding", "worst_cosine": 0.999}]}})
    manifest = {"model": {"source": "wrong-kernel.onnx"}, "created": "2026-11-24T07:00:00+00:00",
                "artifacts": entries, "recommended": "onnx-int8"}
    (outdir / "manifest.json").write_text(json.dumps(manifest))

    [row] = deploy(outdir, device="lab-pi4", unsigned=True, wait=True, timeout_s=60,
                   broker=board.address, bench=QUICK_BENCH, chunk_size=64 * 1024)

    assert row["ok"] is True and row["result"]["valid"] is False
    [figures] = row["result"]["output_check"]["outputs"]
    assert figures["ok"] is False and figures["cosine"] < 0.5
    stored = wait_until(lambda: [r for r in board.store.results(model="wrong-kernel.onnx")], "the result filed")
    assert stored[0]["valid"] is False and stored[0]["invalid_reasons"][0].startswith("output_mismatch: y (cosine")
    headers, table = cells(RESULTS, stored)
    assert table[0][headers.index("valid")].startswith("invalid: output_mismatch: y (cosine")
