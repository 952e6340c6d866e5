"""`edgeopt analyze --db` calibrates a board profile only from devices that are that board: a device whose
agent says its profile does not match its CPU, or whose reported machine is another architecture, is
left out, and analyze says which and why."""
from __future__ import annotations

import json

import pytest

import model_files

from edgeopt.analysis import analyze, mismatched_devices
from edgeopt.cli.main import main
from fleet_simulator import SimulatedDevice
from edgeopt.fleet.store import open_store

SHA = "cd" * 32
MISMATCH = {"ok": False, "machine": "x86_64", "cores": 16, "unchecked": [],
            "mismatch": ["arch: profile rpi5 is aarch64, this CPU is x86_64"]}
MATCH = {"ok": True, "machine": "aarch64", "cores": 4, "mismatch": [], "unchecked": []}


@pytest.fixture()
def outdir(tmp_path):
    return model_files.save_conv_outdir(tmp_path / "out", SHA)


def meta(key):
    return {"model": "net", "model_sha256": SHA, "artifact_key": key, "format": "onnx", "precision": key.split("-")[1]}


def ingest(store, published):
    assert store.ingest(published.topic, published.payload).status == "stored"


@pytest.fixture()
def fleet(outdir, tmp_path):
    """rpi5 boards: a real one, an x86 agent started as rpi5 (its status says so), and an older agent (no
    profile check) whose telemetry reports an x86 machine. The impostors run 10x faster than the board."""
    predicted = {a["key"]: a["prediction"]["roofline_ms"] for a in analyze(outdir, "rpi5")["artifacts"]}
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    real, impostor, old = (SimulatedDevice("real-pi", profile="rpi5", seed=1),
                           SimulatedDevice("x86-as-pi", profile="rpi5", seed=2),
                           SimulatedDevice("old-agent", profile="rpi5", seed=3))
    with open_store(url) as store:
        ingest(store, real.status(profile_check=MATCH))
        ingest(store, real.telemetry(machine="aarch64"))
        ingest(store, impostor.status(profile_check=MISMATCH))
        ingest(store, old.status())
        ingest(store, old.telemetry(machine="x86_64"))
        ingest(store, real.result("r-fp32", p50_ms=predicted["onnx-fp32"] * 3.0, meta=meta("onnx-fp32")))
        for device in (impostor, old):
            for key in ("onnx-fp32", "onnx-int8"):  # only the impostors measured int8
                ingest(store, device.result(f"{device.device_id}-{key}", p50_ms=predicted[key] * 0.3, meta=meta(key)))
        # What an earlier analyze stored from the impostors' int8 results, before they were left out.
        store.save_roofline_fit("rpi5", "int8", SHA, "onnx-int8", predicted["onnx-int8"], predicted["onnx-int8"] * 0.3)
    return url, predicted


def test_mismatched_devices_say_why():
    devices = [{"device_id": "a", "profile": "rpi4", "profile_check": {"ok": False, "mismatch": ["cores: x"]}},
               {"device_id": "b", "profile": "rpi4", "profile_check": {"ok": True}, "versions": {"machine": "aarch64"}},
               {"device_id": "c", "profile": "rpi4", "profile_check": None, "versions": {"machine": "AMD64"}},
               {"device_id": "d", "profile": "x86-64", "profile_check": None, "versions": {"machine": "x86_64"}},
               {"device_id": "e", "profile": "no-such-board", "versions": {"machine": "x86_64"}},
               {"device_id": "f", "profile": "rpi4", "versions": {}}]
    assert mismatched_devices(devices) == {
        "a": "its agent reports that profile rpi4 does not match its CPU (cores: x)",
        "c": "it reports machine AMD64, and profile rpi4 is aarch64",
    }


def test_analyze_calibrates_a_board_only_from_devices_that_are_that_board(fleet, outdir):
    url, predicted = fleet
    result = analyze(outdir, "rpi5", db=url)
    [row] = result["fleet"]
    assert (row["profile"], row["artifact"], row["results"]) == ("rpi5", "onnx-fp32", 1)
    assert row["measured_ms"] == pytest.approx(predicted["onnx-fp32"] * 3.0, rel=1e-6)
    assert {d["device_id"]: (d["profiles"], d["artifacts"]) for d in result["left_out"]} == {
        "x86-as-pi": (["rpi5"], ["onnx-fp32", "onnx-int8"]), "old-agent": (["rpi5"], ["onnx-fp32", "onnx-int8"])}
    notes = "\n".join(result["notes"])
    assert ("left out x86-as-pi's results: they do not calibrate rpi5 because its agent reports that profile rpi5 "
            "does not match its CPU (arch: profile rpi5 is aarch64, this CPU is x86_64)") in notes
    assert "left out old-agent's results: they do not calibrate rpi5 because it reports machine x86_64" in notes
    assert "forgot the stored rpi5 fit of onnx-int8: only left-out devices measured it" in notes
    with open_store(url) as store:
        fits = store.roofline_fits("rpi5")
    assert [(f["artifact_key"], f["measured_ms"]) for f in fits] == [("onnx-fp32", pytest.approx(row["measured_ms"]))]
    # rpi5 is calibrated by the real board alone: 3x slower than the roofline, not 0.3x.
    by_key = {a["key"]: a["prediction"] for a in result["artifacts"]}
    assert by_key["onnx-fp32"]["efficiency"] == pytest.approx(3.0, rel=1e-3)
    assert by_key["onnx-int8"]["efficiency"] == pytest.approx(3.0, rel=1e-3)  # no int8 fit: all precisions


def test_the_cli_names_the_devices_it_left_out(fleet, outdir, capsys):
    url, _ = fleet
    assert main(["analyze", str(outdir), "--device", "rpi5", "--db", url]) == 0
    out = capsys.readouterr().out
    assert "left out x86-as-pi's results" in out and "left out old-agent's results" in out
    assert main(["analyze", str(outdir), "--device", "rpi5", "--db", url, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert sorted(d["device_id"] for d in shown["left_out"]) == ["old-agent", "x86-as-pi"]
