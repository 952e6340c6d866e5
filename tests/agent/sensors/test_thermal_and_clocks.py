"""Thermal zones, cooling devices and cpufreq ceilings, and the health they report."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from edgeopt_agent.profiles import load_profile
from edgeopt_agent.sensors import discover
from edgeopt_agent.sensors.cooling import CoolingSensor
from edgeopt_agent.sensors.cpufreq import CpuFreqSensor
from edgeopt_agent.sensors.thermal import ThermalSensor

FIXTURES = Path(__file__).parent / "fixtures"


def test_zones_named_by_type_with_duplicates_numbered(tmp_path, commands):
    for index, kind in enumerate(["acpitz", "acpitz", "x86_pkg_temp"]):
        zone = tmp_path / f"sys/class/thermal/thermal_zone{index}"
        zone.mkdir(parents=True)
        (zone / "type").write_text(kind + "\n")
        (zone / "temp").write_text(f"{40000 + index * 1000}\n")
    sensor = ThermalSensor.probe(tmp_path, commands("none"))

    assert sensor.temperatures() == {"acpitz_0": 40.0, "acpitz_1": 41.0, "x86_pkg_temp": 42.0}


def test_an_unreadable_zone_is_reported_and_the_others_still_read(board, commands):
    root = board("jetson-nano-jp4")
    suite = discover(root, run_command=commands("none"))
    temp = root / "sys/class/thermal/thermal_zone1/temp"
    temp.unlink()
    temp.mkdir()  # reading a directory fails like a zone whose device went away

    snap = suite.snapshot()

    assert "CPU-therm" not in snap["thermal"]
    assert snap["thermal"]["GPU-therm"] == pytest.approx(33.0)
    assert snap["sensors"]["disabled"]["thermal/CPU-therm"].startswith("cannot read ")
    assert "thermal" in snap["sensors"]["active"]


def test_temperature_at_the_profile_throttle_point_is_throttling(board, rewrite, commands):
    root = board("rpi4")
    suite = discover(root, profile=load_profile("rpi4"), run_command=commands("rpi4"))
    rewrite(root / "sys/class/thermal/thermal_zone0/temp", "81500")

    health = suite.health()

    assert health["throttled"] is True
    assert health["reasons"] == ["thermal zone cpu-thermal at 81.5 C, at or above the 80 C throttle point"]


def test_without_a_profile_temperature_alone_is_not_judged(board, rewrite, commands):
    root = board("rpi4")
    suite = discover(root, run_command=commands("rpi4"))
    rewrite(root / "sys/class/thermal/thermal_zone0/temp", "81500")

    assert suite.health()["throttled"] is False


def test_active_clock_cooling_device_is_throttling_but_a_fan_is_not(board, rewrite, commands):
    root = board("jetson-orin-nano-jp6")
    sensor = CoolingSensor.probe(root, commands("none"))
    assert sensor.issues(None) == []  # the fan is at state 2 of 10, which slows nothing

    rewrite(root / "sys/class/thermal/cooling_device1/cur_state", "3")

    assert [i.reason for i in sensor.issues(None)] == [
        "thermal cooling device cpufreq-cpu0 is limiting clocks (state 3 of 12)"
    ]


def test_acpi_processor_cooling_counts_as_clock_limiting(board, rewrite, commands):
    root = board("x86-64-rapl")
    sensor = CoolingSensor.probe(root, commands("none"))
    rewrite(root / "sys/class/thermal/cooling_device1/cur_state", "1")

    assert [i.kind for i in sensor.issues(None)] == ["throttled"]


def test_cpufreq_reads_mhz_per_core(commands):
    sensor = CpuFreqSensor.probe(FIXTURES / "jetson-orin-nano-jp6", commands("none"))
    cpu = sensor.read()["cpu"]

    assert cpu["freq_mhz"] == [1510, 729, 729, 729, 729, 729]
    assert cpu["max_freq_mhz"] == [1510] * 6
    assert cpu["hw_max_freq_mhz"] == [1510] * 6


def test_a_lower_power_mode_at_start_is_the_baseline_but_a_drop_later_is_throttling(board, rewrite, commands):
    root = board("rpi5")
    cpus = [root / f"sys/devices/system/cpu/cpu{i}/cpufreq/scaling_max_freq" for i in range(4)]
    for path in cpus:
        rewrite(path, "1500000")  # the user's power mode, set before the agent started
    sensor = CpuFreqSensor.probe(root, commands("none"))
    assert sensor.issues(None) == []

    for path in cpus:
        rewrite(path, "1000000")

    assert [i.reason for i in sensor.issues(None)] == [
        "cpu 0,1,2,3 clock ceiling lowered to 1000 MHz (was 1500 MHz at start)"
    ]


def test_an_offline_core_reads_as_none(board, commands):
    root = board("x86-64-rapl")
    sensor = CpuFreqSensor.probe(root, commands("none"))
    shutil.rmtree(root / "sys/devices/system/cpu/cpu1/cpufreq")

    assert sensor.read()["cpu"]["freq_mhz"] == [2900, None]
    assert sensor.issues(None) == []
