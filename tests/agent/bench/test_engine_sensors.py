"""run_benchmark with real sensor objects reading fake sysfs trees: energy and validity."""
from __future__ import annotations

import os
import threading
import time

import pytest

from edgeopt_agent.bench import BenchmarkSpec, run_benchmark
from edgeopt_agent.profiles import load_profile

sensors = pytest.importorskip("edgeopt_agent.sensors", reason="the sensors package is not installed")
psutil = pytest.importorskip("psutil", reason="the fake power meter watches for the child with psutil")

IDLE_W, BUSY_W = 2.0, 7.0


def quick(artifact, **options) -> BenchmarkSpec:
    values = dict(runs=20, duration_s=0.0, warmup_runs=2, warmup_s=0.0, threads=1, idle_s=0, timeout_s=60)
    values.update(options)
    return BenchmarkSpec(artifact=str(artifact), **values)


def is_benchmark_child(process) -> bool:
    try:
        return "edgeopt_agent.bench.child" in " ".join(process.cmdline())
    except psutil.NoSuchProcess:  # exited (or a zombie) between listing and asking
        return False


def write_atomically(path, text):
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class FakeRaplMeter:
    """A powercap RAPL counter that draws IDLE_W, or BUSY_W while a benchmark child is alive."""

    def __init__(self, root):
        self.zone = root / "sys/class/powercap/intel-rapl:0"
        self.zone.mkdir(parents=True)
        (self.zone / "name").write_text("package-0\n")
        (self.zone / "max_energy_range_uj").write_text("262143328850\n")
        self.energy_uj = 1_000_000.0
        write_atomically(self.zone / "energy_uj", f"{int(self.energy_uj)}\n")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        me, last = psutil.Process(), time.time()
        while not self._stop.is_set():
            busy = any(is_benchmark_child(p) for p in me.children())
            now = time.time()
            self.energy_uj += (BUSY_W if busy else IDLE_W) * (now - last) * 1e6
            last = now
            write_atomically(self.zone / "energy_uj", f"{int(self.energy_uj)}\n")
            time.sleep(0.005)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def test_energy_per_inference_from_a_rapl_counter(dynamic_onnx, tmp_path):
    with FakeRaplMeter(tmp_path):
        suite = sensors.discover(sysfs_root=tmp_path)
        result = run_benchmark(quick(dynamic_onnx, idle_s=0.5, duration_s=0.5), sensors=suite)
    assert result["ok"] is True, result
    assert result["power_source"] == "measured_rail" and "package-0" in result["power_rail"]
    # Generous bounds: the fake meter updates every few ms and the monitor samples every 50 ms.
    assert IDLE_W * 0.5 < result["idle_power_w"] < IDLE_W * 1.5
    assert BUSY_W * 0.5 < result["avg_power_w"] < BUSY_W * 1.5
    expected_mj = (BUSY_W - IDLE_W) * result["measured_s"] / result["runs"] * 1000
    assert result["energy_per_inference_mj"] == pytest.approx(expected_mj, rel=0.5)


def test_no_idle_baseline_gives_null_energy_with_a_reason(dynamic_onnx, tmp_path):
    with FakeRaplMeter(tmp_path):
        result = run_benchmark(quick(dynamic_onnx, idle_s=0), sensors=sensors.discover(sysfs_root=tmp_path))
    assert result["ok"] is True
    assert result["energy_per_inference_mj"] is None and "idle baseline" in result["power_reason"]


def test_throttling_marks_the_result_invalid(dynamic_onnx, tmp_path):
    zone = tmp_path / "sys/class/thermal/thermal_zone0"
    zone.mkdir(parents=True)
    (zone / "type").write_text("cpu-thermal\n")
    (zone / "temp").write_text("86000\n")  # above the rpi4 profile's 80 C throttle point
    suite = sensors.discover(sysfs_root=tmp_path, profile=load_profile("rpi4"))
    result = run_benchmark(quick(dynamic_onnx), sensors=suite)
    assert result["ok"] is True and result["valid"] is False
    assert any(r.startswith("before the run: thermal zone cpu-thermal at 86.0 C") for r in result["invalid_reasons"])
    assert result["health"]["after"]["throttled"] is True
    assert result["thermal"] == {"before_c": 86.0, "after_c": 86.0, "throttled": True}


def test_without_a_sensor_the_reason_comes_from_the_suite(dynamic_onnx, tmp_path):
    suite = sensors.discover(sysfs_root=tmp_path)  # an empty tree: no sensor of any kind
    result = run_benchmark(quick(dynamic_onnx), sensors=suite)
    assert result["ok"] is True and result["valid"] is True
    assert result["energy_per_inference_mj"] is None and result["avg_power_w"] is None
    assert result["power_reason"] and result["power_reason"] != "no sensors given"
