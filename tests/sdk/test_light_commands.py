"""Commands that do not convert never import torch, onnx or the runtimes, so they start at once
(`python -X importtime -m edgeopt.cli.main devices`: start-up figures in docs/BENCHMARKS.md): each runs in
a fresh interpreter and reports which heavy packages it imported."""
import hashlib
import json
import subprocess
import sys

import pytest

from fleet_simulator import SimulatedDevice
from edgeopt.fleet.store import open_store

HEAVY = ("torch", "onnx", "onnxruntime", "onnxscript", "tensorflow", "litert_torch", "ai_edge_litert", "executorch",
         "sklearn", "scipy", "pnnx", "ncnn")

PROBE = f"""
import json, sys
from edgeopt.cli.main import main
code = main(sys.argv[1:])
print(json.dumps({{"code": code, "heavy": sorted(n for n in {HEAVY!r} if n in sys.modules)}}), file=sys.stderr)
"""


def _heavy_imports(*argv, cwd):
    run = subprocess.run([sys.executable, "-c", PROBE, *map(str, argv)], capture_output=True, text=True, cwd=cwd,
                         timeout=120)
    said = json.loads(run.stderr.strip().splitlines()[-1])
    return said["code"], said["heavy"], run.stderr


@pytest.fixture
def fleet(tmp_path):
    url = f"sqlite:///{tmp_path}/fleet.db"
    board = SimulatedDevice("lab-a", profile="x86-64")
    meta = {"model": "digits", "artifact_key": "onnx-int8", "format": "onnx", "precision": "int8",
            "accuracy_drop_points": 0.1}
    with open_store(url) as store:
        for message in (board.status(), board.telemetry(temperature_c=50.0), board.result("j1", meta=meta)):
            store.ingest(message.topic, message.payload)
    out = tmp_path / "out"
    out.mkdir()
    (out / "onnx-int8.onnx").write_bytes(b"int8 model")
    (out / "manifest.json").write_text(json.dumps({
        "schema": "edgeopt.manifest/1", "model": {"source": "digits.py:build", "sha256": "a" * 64},
        "recommended": "onnx-int8", "artifacts": [{"key": "onnx-int8", "path": "onnx-int8.onnx", "format": "onnx",
                                                   "precision": "int8", "sha256": hashlib.sha256(b"int8 model").hexdigest(),
                                                   "size_bytes": 10}]}))
    return url, out


@pytest.mark.parametrize("command", [
    ["devices"], ["devices", "rpi4"], ["fleet", "devices", "--db", "{db}"], ["fleet", "results", "--db", "{db}"],
    ["fleet", "telemetry", "--db", "{db}"], ["report", "--db", "{db}", "{out}", "-o", "report.html"],
], ids=lambda c: " ".join(c[:2]))
def test_a_command_that_converts_nothing_imports_no_heavy_package(command, fleet, tmp_path):
    db, out = fleet
    code, heavy, err = _heavy_imports(*(part.format(db=db, out=out) for part in command), cwd=tmp_path)
    assert code == 0, err
    assert heavy == [], f"{' '.join(command)} imported {heavy}"


def test_deploy_imports_no_heavy_package(fleet, tmp_path, mqtt_broker):
    _, out = fleet
    code, heavy, err = _heavy_imports("deploy", out, "--all", "--broker", mqtt_broker.address, "--unsigned",
                                      "--timeout", "3", cwd=tmp_path)
    assert code == 2 and "online" in err, err  # no board is online: deploy says so; what it imported is the point
    assert heavy == [], f"deploy imported {heavy}"
