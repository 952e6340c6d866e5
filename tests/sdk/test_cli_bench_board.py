"""`edgeopt bench OUTDIR` runs each artifact as its manifest planned for the board (runtime, threads,
fallbacks) unless --runtime/--threads say otherwise; a manifest without that plan still benchmarks."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from edgeopt_agent.bench.spec import available_cpus
from edgeopt_converters import manifest

NETS = Path(__file__).resolve().parents[1] / "converters" / "nets.py"
QUICK = ["--runs", "3", "--duration", "0", "--warmup", "0", "--idle", "0", "--no-sensors", "--json"]


def edgeopt(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "edgeopt.cli.main", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ, COLUMNS="200"))


@pytest.fixture(scope="module")
def outdir(tmp_path_factory):
    pytest.importorskip("torch", reason="converting needs the convert extra (torch)")
    import edgeopt as api

    folder = tmp_path_factory.mktemp("bench-board")
    api.convert(f"{NETS}:small_cnn", device="x86-64", output_dir=folder, input_shape="1,3,16,16",
                formats=("onnx",), time_on_host=False)
    return folder


def _bench(folder, *extra):
    run = edgeopt("bench", folder, *QUICK, *extra)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)["artifacts"]


def test_each_artifact_runs_on_its_planned_runtime_and_threads(outdir):
    results = _bench(outdir)
    read = manifest.read(outdir)
    assert [Path(r["artifact"]).name for r in results] == [a.path for a in read.artifacts]
    for result, entry in zip(results, read.artifacts):
        board = entry.data["board"]
        assert result["ok"] is True
        assert result["runtime"] == board["runtime"] == "onnxruntime"
        assert result["threads_requested"] == board["threads"]
        assert result["threads"] == min(board["threads"], available_cpus())


def test_threads_on_the_command_line_override_the_manifest(outdir):
    for result in _bench(outdir, "--threads", "1"):
        assert result["ok"] is True and result["threads"] == 1 and result["threads_requested"] == 1


@pytest.mark.skipif(importlib.util.find_spec("tensorrt") is not None,
                    reason="TensorRT is installed here: the planned runtime would run, not fall back")
def test_a_planned_runtime_this_machine_lacks_falls_back_and_says_so(outdir, tmp_path):
    """A Jetson's plan (TensorRT, then onnxruntime) benchmarked on a machine without TensorRT."""
    folder = tmp_path / "jetson-plan"
    shutil.copytree(outdir, folder)
    data = json.loads((folder / manifest.FILE_NAME).read_text())
    for entry in data["artifacts"]:
        entry["board"] = {"runtime": "tensorrt", "precision": entry["precision"], "threads": 1,
                          "fallback_runtimes": ["onnxruntime"],
                          "engine_build": {"step": "build-tensorrt-engine", "precision": entry["precision"]}}
    manifest.write(data, folder / manifest.FILE_NAME)
    for result in _bench(folder):
        assert result["ok"] is True and result["runtime"] == "onnxruntime"
        assert result["fallback"]["from"] == "tensorrt" and "TensorRT is not installed" in result["fallback"]["reason"]
    table = edgeopt("bench", folder, *QUICK[:-1])  # the table's notes say it too
    assert table.returncode == 0, table.stderr
    assert "runtime tensorrt is not available here (TensorRT is not installed" in table.stdout


def test_a_manifest_without_a_board_plan_still_benchmarks(outdir, tmp_path):
    folder = tmp_path / "old"
    shutil.copytree(outdir, folder)
    data = json.loads((folder / manifest.FILE_NAME).read_text())
    for entry in data["artifacts"]:
        del entry["board"]
    manifest.write(data, folder / manifest.FILE_NAME)
    for result in _bench(folder):
        assert result["ok"] is True and result["runtime"] == "onnxruntime"
        assert result["threads_requested"] is None and result["threads"] == available_cpus()
