"""`edgeopt bench` as a user runs it: a real process, real models, exit codes and output."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

QUICK = ["--runs", "10", "--duration", "0", "--warmup", "1", "--threads", "1", "--idle", "0"]
LATENCY_KEYS = {"p50", "p90", "p95", "p99", "mean", "std", "min", "max"}


@pytest.fixture(scope="module")
def models(dynamic_onnx, fixed_onnx):
    return {"dynamic": dynamic_onnx, "fixed": fixed_onnx}


def edgeopt(*args, timeout=120):
    env = dict(os.environ, COLUMNS="200")
    return subprocess.run(
        [sys.executable, "-m", "edgeopt.cli.main", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def test_json_has_the_promised_keys(models):
    run = edgeopt("bench", models["dynamic"], *QUICK, "--json")
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["ok"] is True
    assert set(result["latency_ms"]) == LATENCY_KEYS
    for key in ("peak_rss_mb", "load_ms", "first_inference_ms", "threads", "runs", "output_sha256"):
        assert result[key] is not None, key
    for key in ("energy_per_inference_mj", "avg_power_w", "power_source"):
        assert key in result
    assert result["threads"] == 1 and result["runs"] >= 10
    assert result["energy_per_inference_mj"] is None and result["power_reason"]


def test_json_without_sensors_says_so(models):
    run = edgeopt("bench", models["dynamic"], *QUICK, "--no-sensors", "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["power_reason"] == "no sensors given"


def test_table_with_batch_sweep_and_budget(models):
    run = edgeopt("bench", models["dynamic"], *QUICK, "--batch", "1,2,4", "--latency-budget-ms", "60000", "--no-sensors")
    assert run.returncode == 0, run.stderr
    assert "p50 ms" in run.stdout and "dynamic.onnx" in run.stdout
    assert "largest batch with p90 <= 60000 ms: 4" in run.stdout


def test_fixed_batch_failure_is_listed_without_failing_the_run(models):
    run = edgeopt("bench", models["fixed"], *QUICK, "--batch", "1,8", "--no-sensors")
    assert run.returncode == 0, run.stderr
    assert "fixed.onnx batch 8: unsupported: input 'x' has a fixed batch size of 1" in run.stderr


def test_input_file(models, tmp_path):
    np.save(tmp_path / "x.npy", np.ones((3, 16), np.float32))
    run = edgeopt("bench", models["dynamic"], *QUICK, "--input", tmp_path / "x.npy", "--no-sensors", "--json")
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["batch"] == 1 and result["input"]["source"] == "file"  # 3 samples, fed one batch at a time
    run = edgeopt("bench", models["dynamic"], *QUICK, "--input", tmp_path / "x.npy", "--batch", "3", "--no-sensors",
                  "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["batches"][0]["batch"] == 3


def test_output_folder_with_manifest(models, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "model_fp32.onnx").write_bytes(models["dynamic"].read_bytes())
    (out / "model_fixed.onnx").write_bytes(models["fixed"].read_bytes())
    manifest = {
        "artifacts": [
            {"path": "model_fp32.onnx", "format": "onnx", "precision": "fp32"},
            {"path": "model_fixed.onnx", "format": "onnx", "precision": "fp32"},
        ]
    }
    (out / "manifest.json").write_text(json.dumps(manifest))
    run = edgeopt("bench", out, *QUICK, "--no-sensors", "--json")
    assert run.returncode == 0, run.stderr
    results = json.loads(run.stdout)["artifacts"]
    assert [r["manifest_entry"]["path"] for r in results] == ["model_fp32.onnx", "model_fixed.onnx"]
    assert all(r["ok"] and r["manifest_entry"]["precision"] == "fp32" for r in results)


def text_file(folder):
    (folder / "notes.txt").write_text("not a model")
    return folder / "notes.txt"


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda folder: folder / "absent.onnx", "error: artifact not found:"),
        (text_file, "is not a model: expected a .onnx, .tflite"),
        (lambda folder: folder, "is a folder without manifest.json"),
    ],
    ids=["missing", "not-a-model", "folder-without-manifest"],
)
def test_user_errors_are_one_line_and_exit_2(tmp_path, make, message):
    run = edgeopt("bench", make(tmp_path), *QUICK)
    assert run.returncode == 2
    assert message in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "Traceback" not in run.stderr


def test_bad_batch_list_is_a_user_error(models):
    run = edgeopt("bench", models["dynamic"], "--batch", "1,two")
    assert run.returncode == 2 and "--batch takes whole numbers separated by commas" in run.stderr


def test_failed_benchmark_prints_it_and_exits_1(tmp_path):
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(os.urandom(128))
    run = edgeopt("bench", corrupt, *QUICK, "--no-sensors")
    assert run.returncode == 1
    assert "failed: corrupt.onnx: bad_artifact:" in run.stderr

    as_json = edgeopt("bench", corrupt, *QUICK, "--no-sensors", "--json")
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout)["error"]["kind"] == "bad_artifact"
