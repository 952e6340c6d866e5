"""A benchmark on a Jetson records its clocks and power mode, and a run under dropped clocks is invalid.

Real benchmark runs (ONNX Runtime on the CPU, in the child process) with the clock sensor reading
a writable copy of a fake AGX Orin tree; the "drop" is written when the child reports that it
has started measuring.
"""
from __future__ import annotations

import pytest

from edgeopt_agent.bench import BenchmarkSpec, run_benchmark
from edgeopt_agent.sensors.jetson_clocks import JetsonClocksSensor
from edgeopt_agent.sensors.suite import SensorSuite
from jetson_boards import Commands, board_copy, gpu_devfreq


def quick(artifact) -> BenchmarkSpec:
    return BenchmarkSpec(artifact=str(artifact), runs=20, duration_s=0.0, warmup_runs=2, warmup_s=0.0,
                         threads=1, idle_s=0, timeout_s=60)


@pytest.fixture
def orin(tmp_path):
    root = board_copy(tmp_path, "jetson-agx-orin-jp5")
    suite = SensorSuite([JetsonClocksSensor.probe(root, Commands(root / "commands"))], {})
    return root, suite


def when_measuring(action):
    done = []

    def progress(text: str) -> None:
        if text.startswith("measuring") and not done:
            action()
            done.append(text)

    return progress


def test_clocks_and_power_mode_are_recorded_with_the_result(dynamic_onnx, orin):
    _, suite = orin
    result = run_benchmark(quick(dynamic_onnx), sensors=suite)
    assert result["ok"] is True and result["valid"] is True, result["invalid_reasons"]
    gpu = {"cur_mhz": 1300, "min_mhz": 1300, "max_mhz": 1300}
    assert result["clocks"]["before"]["gpu"] == gpu and result["clocks"]["after"]["gpu"] == gpu
    assert result["clocks"]["before"]["emc"]["max_mhz"] == 3199
    assert result["nvpmodel"] == {"mode": "MAXN", "id": 0}


def test_a_run_whose_gpu_clock_dropped_is_invalid(dynamic_onnx, orin):
    root, suite = orin
    gpu = gpu_devfreq(root)

    def throttle():
        (gpu / "max_freq").write_text("624750000\n")
        (gpu / "min_freq").write_text("624750000\n")
        (gpu / "cur_freq").write_text("624750000\n")

    result = run_benchmark(quick(dynamic_onnx), sensors=suite, progress=when_measuring(throttle))
    assert result["ok"] is True and result["valid"] is False
    assert "after the run: GPU clock ceiling lowered to 625 MHz (was 1300 MHz at start)" in result["invalid_reasons"]
    assert result["clocks"]["after"]["gpu"]["cur_mhz"] == 625


def test_a_power_mode_change_during_the_run_is_invalid(dynamic_onnx, orin):
    root, suite = orin

    def switch_mode():
        (root / "commands/nvpmodel_-q.out").write_text("NV Fan Mode:quiet\nNV Power Mode: MODE_30W\n2\n")

    result = run_benchmark(quick(dynamic_onnx), sensors=suite, progress=when_measuring(switch_mode))
    assert result["ok"] is True and result["valid"] is False
    assert result["invalid_reasons"] == ["the nvpmodel power mode changed during the run (MAXN -> MODE_30W)"]
    assert result["nvpmodel"] == {"mode": "MAXN", "id": 0}
