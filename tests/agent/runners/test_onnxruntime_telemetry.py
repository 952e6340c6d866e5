"""ONNX Runtime never writes its telemetry files (device id, event database) for edgeopt.

onnxruntime's Linux wheels create ~/.cache/Microsoft/DeveloperTools/.onnxruntime/ as soon as the
package is imported; each test points HOME at an empty folder and looks there afterwards.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from edgeopt_agent.bench import BenchmarkSpec, run_benchmark
from edgeopt_agent.runners.onnxruntime.importing import TELEMETRY_OFF

pytest.importorskip("onnxruntime")


def clean_env(home):
    """This process's environment with HOME moved and no telemetry switch inherited from it."""
    env = {k: v for k, v in os.environ.items() if k not in TELEMETRY_OFF and k != "XDG_CACHE_HOME"}
    env["HOME"] = str(home)
    return env


def telemetry_files(home):
    return sorted(str(p.relative_to(home)) for p in (home / ".cache").rglob("*")) if (home / ".cache").exists() else []


def test_plain_onnxruntime_here_does_write_them(tmp_path):
    """The baseline the other tests are measured against: without edgeopt's switch the files appear."""
    subprocess.run([sys.executable, "-c", "import onnxruntime"], env=clean_env(tmp_path), check=True)
    written = telemetry_files(tmp_path)
    if not written:
        pytest.skip("this onnxruntime build writes no telemetry files at all; the other tests still check none appear")
    assert any(".cache/Microsoft" in path for path in written), written


def test_a_benchmark_leaves_no_telemetry_files(dynamic_onnx, tmp_path, monkeypatch):
    for name, value in clean_env(tmp_path).items():
        monkeypatch.setenv(name, value)
    for name in (*TELEMETRY_OFF, "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)  # the child must switch it off itself
    result = run_benchmark(BenchmarkSpec(artifact=str(dynamic_onnx), runs=3, duration_s=0, warmup_runs=1,
                                         warmup_s=0, idle_s=0, threads=1))
    assert result["ok"] is True, result.get("error")
    assert telemetry_files(tmp_path) == []


HOST_SIDE = """
import sys
from pathlib import Path
from edgeopt_agent.runners import open_runner
from edgeopt_converters.passes.base import StepContext
from edgeopt_converters.passes.fp16_onnx import ConvertOnnxFp16
import numpy as np
with open_runner(sys.argv[1], threads=1) as runner:  # in-process, as the host's accuracy checks do
    runner.infer({"x": np.zeros((2, 16), np.float32)})
ConvertOnnxFp16().run(StepContext(None, []), Path(sys.argv[1]), Path(sys.argv[2]))
"""


def test_the_host_leaves_no_telemetry_files(dynamic_onnx, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    subprocess.run([sys.executable, "-c", HOST_SIDE, str(dynamic_onnx), str(tmp_path / "fp16.onnx")],
                   env=clean_env(home), check=True)
    assert (tmp_path / "fp16.onnx").exists()
    assert telemetry_files(home) == []
