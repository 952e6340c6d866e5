"""discover() on each recorded board: which sensors it finds, and what snapshot/health report."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from edgeopt_agent.profiles import load_profile
from edgeopt_agent.sensors import SensorSuite, discover

FIXTURES = Path(__file__).parent / "fixtures"


def test_rpi4_has_throttle_flags_but_no_power_sensor(commands):
    suite = discover(FIXTURES / "rpi4", profile=load_profile("rpi4"), run_command=commands("rpi4"))
    snap = suite.snapshot()

    assert {"system", "cpufreq", "thermal", "rpi-throttle"} <= set(snap["sensors"]["active"])
    assert "rpi-pmic" not in snap["sensors"]["active"]  # the Pi 4 firmware has no PMIC ADC
    assert "rpi-pmic" not in snap["sensors"]["disabled"]
    assert snap["power"]["watts"] is None
    assert snap["power"]["source"] is None
    assert snap["power"]["reason"] == "no power sensor found (rpi4 has none)"
    assert snap["throttle"]["rpi_flags"] == "0x50000"
    assert snap["throttle"]["rpi_since_boot"] == ["under-voltage", "throttled"]
    assert snap["throttle"]["throttled"] is False  # latched since boot, not now
    assert snap["thermal"] == {"cpu-thermal": pytest.approx(47.236)}
    assert snap["cpu"]["freq_mhz"] == [1800, 600, 600, 600]
    assert snap["cpu"]["max_freq_mhz"] == [1800] * 4


def test_rpi5_power_is_the_sum_of_pmic_rails(commands):
    suite = discover(FIXTURES / "rpi5", profile=load_profile("rpi5"), run_command=commands("rpi5"))
    power = suite.snapshot()["power"]

    assert power["source"] == "measured_rail"
    assert power["watts"] == pytest.approx(5.922, abs=1e-3)
    assert "sum of 12 PMIC rails" in power["rail"]
    assert "excluding 5V input" in power["rail"]
    assert power["rails"]["VDD_CORE"] == pytest.approx(5.03652 * 0.8936988, abs=1e-3)
    assert "EXT5V" not in power["rails"] and "BATT" not in power["rails"]
    assert power["reason"] is None


def test_rpi5_fan_is_not_mistaken_for_throttling(commands):
    suite = discover(FIXTURES / "rpi5", profile=load_profile("rpi5"), run_command=commands("rpi5"))

    assert "cooling" not in suite.active  # the only cooling device is the fan
    assert suite.health() == {"throttled": False, "under_voltage": False, "reasons": []}


def test_jetson_nano_jp4_uses_the_board_total_rail(commands):
    suite = discover(
        FIXTURES / "jetson-nano-jp4", profile=load_profile("jetson-nano"), run_command=commands("none")
    )
    snap = suite.snapshot()

    assert "ina3221-iio" in snap["sensors"]["active"]
    assert snap["power"] == {
        "watts": 2.906,
        "source": "board_total",
        "rail": "POM_5V_IN",
        "reason": None,
        "rails": {"POM_5V_IN": 2.906, "POM_5V_GPU": 0.0, "POM_5V_CPU": 0.413},
    }
    # PMIC-Die reads a fixed 100 C placeholder on Tegra: left out, so it cannot fake throttling.
    assert "PMIC-Die" not in snap["thermal"]
    assert snap["thermal"]["CPU-therm"] == pytest.approx(33.5)
    assert snap["throttle"]["throttled"] is False


def test_jetson_orin_nano_jp6_hwmon_board_total(commands):
    suite = discover(
        FIXTURES / "jetson-orin-nano-jp6",
        profile=load_profile("jetson-orin-nano"),
        run_command=commands("none"),
    )
    snap = suite.snapshot()

    assert snap["power"]["source"] == "board_total"
    assert snap["power"]["rail"] == "VDD_IN"
    assert snap["power"]["watts"] == pytest.approx(5.072 * 1.136, abs=1e-3)
    # The same device is reachable through /sys/class/hwmon and /sys/bus/i2c: counted once.
    assert set(snap["power"]["rails"]) == {"VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC"}
    # Orin's CV zones read -256 C while the engines are off: offline, not a temperature.
    assert not any(name.startswith("cv") for name in snap["thermal"])
    assert snap["thermal"]["tj-thermal"] == pytest.approx(47.968)
    assert snap["throttle"]["cooling"] == {"cpufreq-cpu0": "0/12"}


def test_jetson_agx_orin_without_board_total_sums_connected_rails(commands):
    suite = discover(
        FIXTURES / "jetson-agx-orin-jp5",
        profile=load_profile("jetson-agx-orin"),
        run_command=commands("none"),
    )
    power = suite.snapshot()["power"]

    assert power["source"] == "measured_rail"
    assert power["rail"] == "sum of VDD_GPU_SOC+VDD_CPU_CV+VIN_SYS_5V0+VDDQ_VDD2_1V8AO"
    expected = (4984 * 480 + 4984 * 80 + 4992 * 566 + 4992 * 60) / 1e6
    assert power["watts"] == pytest.approx(expected, abs=1e-3)
    assert "NC" not in power["rails"]


def test_x86_rapl_counts_package_domains_only(commands):
    suite = discover(FIXTURES / "x86-64-rapl", profile=load_profile("x86-64"), run_command=commands("none"))

    assert suite.power is not None
    assert suite.power.name == "rapl"
    assert suite.power.source == "measured_rail"
    assert suite.power.rail == "package-0 (CPU package)"  # not psys, not the core/uncore subzones


def test_no_profile_and_no_sensors_gives_null_power_with_reason(tmp_path, commands):
    (tmp_path / "sys").mkdir()
    suite = discover(tmp_path, run_command=commands("none"))
    snap = suite.snapshot()

    assert snap["power"]["watts"] is None
    assert snap["power"]["reason"].startswith("no power sensor found")
    assert snap["thermal"] == {}
    assert "system" in snap["sensors"]["active"]


def test_profile_expecting_a_sensor_says_which_one_is_missing(tmp_path, commands):
    (tmp_path / "sys").mkdir()
    suite = discover(tmp_path, profile=load_profile("jetson-orin-nano"), run_command=commands("none"))

    assert suite.snapshot()["power"]["reason"] == "no ina3221 power sensor found on this jetson-orin-nano"


@pytest.mark.parametrize(
    "name, profile",
    [
        ("rpi4", "rpi4"),
        ("rpi5", "rpi5"),
        ("jetson-nano-jp4", "jetson-nano"),
        ("jetson-orin-nano-jp6", "jetson-orin-nano"),
        ("jetson-agx-orin-jp5", "jetson-agx-orin"),
        ("x86-64-rapl", "x86-64"),
    ],
)
def test_snapshot_is_json_and_has_every_section(name, profile, commands):
    suite = discover(FIXTURES / name, profile=load_profile(profile), run_command=commands(name))
    snap = suite.snapshot()

    assert set(snap) == {"cpu", "memory", "disk", "thermal", "power", "throttle", "sensors"}
    assert set(snap["power"]) >= {"watts", "source", "rail", "reason"}
    assert snap["power"]["source"] in (None, "measured_rail", "board_total", "estimate")
    assert (snap["power"]["watts"] is None) == (snap["power"]["reason"] is not None)
    assert set(snap["throttle"]) >= {"throttled", "under_voltage", "reasons"}
    assert json.loads(json.dumps(snap)) == snap
    assert isinstance(suite, SensorSuite)


def test_nvml_is_accounted_for_whenever_pynvml_is_installed(commands):
    if importlib.util.find_spec("pynvml") is None:
        pytest.skip("pynvml (nvidia-ml-py) is not installed: without it and without an NVIDIA GPU, NVML is left out")
    suite = discover(FIXTURES / "rpi4", run_command=commands("rpi4"))
    snap = suite.snapshot()

    assert "nvml" in snap["sensors"]["active"] or "nvml" in snap["sensors"]["disabled"]
