"""Jetson: INA3221 in the JetPack 4 (iio) and 5/6 (hwmon) layouts, and tegrastats lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgeopt_agent.profiles import load_profile
from edgeopt_agent.sensors import discover, parse_tegrastats_line
from edgeopt_agent.sensors.ina3221 import Ina3221HwmonSensor, Ina3221IioSensor, combine_rails
from edgeopt_agent.sensors.base import SensorError
from edgeopt_agent.sensors.tegrastats import TegrastatsStream

FIXTURES = Path(__file__).parent / "fixtures"


def recorded_lines(board):
    return (FIXTURES / board / "commands" / "tegrastats.txt").read_text().splitlines()


def test_combine_rails_prefers_the_board_total():
    assert combine_rails({"VDD_IN": 6.6, "VDD_SOC": 2.4}) == (6.6, "board_total", "VDD_IN")
    assert combine_rails({"POM_5V_IN": 2.9, "POM_5V_CPU": 0.4}) == (2.9, "board_total", "POM_5V_IN")
    assert combine_rails({"A": 1.0, "B": 0.5}) == (1.5, "measured_rail", "sum of A+B")


def test_iio_layout_reads_milliwatts(commands):
    sensor = Ina3221IioSensor.probe(FIXTURES / "jetson-nano-jp4", commands("none"))
    measured = sensor.measure()

    assert measured.watts == pytest.approx(2.906)
    assert measured.rails == {"POM_5V_IN": 2.906, "POM_5V_GPU": 0.0, "POM_5V_CPU": 0.413}
    assert Ina3221HwmonSensor.probe(FIXTURES / "jetson-nano-jp4", commands("none")) is None


def test_hwmon_layout_multiplies_millivolts_by_milliamps(commands):
    sensor = Ina3221HwmonSensor.probe(FIXTURES / "jetson-orin-nano-jp6", commands("none"))
    measured = sensor.measure()

    assert measured.rails["VDD_CPU_GPU_CV"] == pytest.approx(5.064 * 0.152)
    assert measured.watts == pytest.approx(5.072 * 1.136)
    # "sum of shunt voltages" (in7) has a label but no current channel: not a rail.
    assert "sum of shunt voltages" not in measured.rails
    assert Ina3221IioSensor.probe(FIXTURES / "jetson-orin-nano-jp6", commands("none")) is None


def test_hwmon_readings_follow_the_files(board, rewrite, commands):
    root = board("jetson-orin-nano-jp6")
    sensor = Ina3221HwmonSensor.probe(root, commands("none"))
    rewrite(root / "sys/class/hwmon/hwmon1/curr1_input", "2000")

    assert sensor.measure().watts == pytest.approx(5.072 * 2.0)


def test_over_current_alarm_marks_the_board_throttled(board, rewrite, commands):
    root = board("jetson-orin-nano-jp6")
    suite = discover(root, profile=load_profile("jetson-orin-nano"), run_command=commands("none"))
    assert suite.health()["throttled"] is False

    rewrite(root / "sys/class/hwmon/hwmon1/curr1_crit_alarm", "1")
    health = suite.health()

    assert health["throttled"] is True
    assert health["reasons"] == ["over-current alarm on VDD_IN: the board throttles its clocks"]


def test_unreadable_rail_disables_the_power_sensor(board, commands):
    root = board("jetson-nano-jp4")
    suite = discover(root, profile=load_profile("jetson-nano"), run_command=commands("none"))
    (root / "sys/bus/i2c/drivers/ina3221x/6-0040/iio:device0/in_power0_input").unlink()

    snap = suite.snapshot()

    assert snap["power"]["watts"] is None
    assert snap["power"]["reason"].startswith("power sensor ina3221-iio failed: cannot read ")
    assert "ina3221-iio" in snap["sensors"]["disabled"]


def test_tegrastats_jetpack4_line():
    line = parse_tegrastats_line(recorded_lines("jetson-nano-jp4")[0])

    assert (line.ram_used_mb, line.ram_total_mb) == (1180, 3965)
    assert line.cpus == ((30, 1036), (33, 1036), (28, 1036), (26, 1036))
    assert (line.gpu_load_pct, line.gpu_freq_mhz) == (0, 76)
    assert line.rails_mw == {"POM_5V_IN": (4520, 4680), "POM_5V_GPU": (0, 0), "POM_5V_CPU": (1078, 1205)}
    assert line.temps_c["CPU"] == pytest.approx(60.5)
    assert line.temps_c["thermal"] == pytest.approx(59.75)


def test_tegrastats_l4t32_line_with_cores_off_and_no_units():
    line = parse_tegrastats_line(recorded_lines("jetson-xavier-nx-jp4")[0])

    assert line.cpus == ((12, 1190), (8, 1190), (4, 1190), None, None, None)
    assert (line.gpu_load_pct, line.gpu_freq_mhz) == (33, None)
    assert line.rails_mw == {"VDD_IN": (3902, 3611), "VDD_CPU_GPU_CV": (1331, 1180), "VDD_SOC": (997, 941)}


def test_tegrastats_jetpack6_line_with_milliwatt_units():
    line = parse_tegrastats_line(recorded_lines("jetson-orin-nano-jp6")[0])

    assert (line.ram_used_mb, line.ram_total_mb) == (779, 7620)
    assert len(line.cpus) == 6 and line.cpus[0] == (0, 1344)
    assert line.rails_mw == {"VDD_IN": (6626, 6625), "VDD_CPU_GPU_CV": (1228, 1230), "VDD_SOC": (2380, 2380)}
    assert line.temps_c["tj"] == pytest.approx(50.562)
    # RAM/SWAP figures look like "N/M" too but are not rails.
    assert "RAM" not in line.rails_mw and "SWAP" not in line.rails_mw


def test_tegrastats_jetpack5_agx_line_skips_unconnected_rails():
    line = parse_tegrastats_line(recorded_lines("jetson-agx-orin-jp5")[0])

    assert list(line.rails_mw) == ["VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO"]
    assert line.temps_c["CV0"] == -256.0
    assert line.gpu_freq_mhz == 305
    assert line.cpus[-1] is None
    assert combine_rails({k: now / 1000 for k, (now, _) in line.rails_mw.items()})[1] == "measured_rail"


def test_tegrastats_line_without_known_fields_parses_to_nothing():
    line = parse_tegrastats_line("garbage")

    assert line.rails_mw == {} and line.cpus == () and line.ram_used_mb is None


def test_tegrastats_stream_keeps_the_latest_line(fake_tegrastats):
    program = fake_tegrastats("jetson-orin-nano-jp6") / "tegrastats"
    stream = TegrastatsStream([str(program), "--interval", "20"])
    try:
        assert stream.latest(max_age_s=10).rails_mw["VDD_IN"] == (6626, 6625)
    finally:
        stream.stop()


def test_tegrastats_is_the_fallback_when_ina3221_sysfs_is_missing(
    tmp_path, fake_tegrastats, monkeypatch, commands
):
    monkeypatch.setenv("PATH", str(fake_tegrastats("jetson-nano-jp4")))
    (tmp_path / "sys").mkdir()
    suite = discover(tmp_path, profile=load_profile("jetson-nano"), run_command=commands("none"))
    try:
        power = suite.snapshot()["power"]
        assert suite.power.name == "tegrastats"
        assert power["source"] == "board_total"
        assert power["rail"] == "POM_5V_IN (tegrastats)"
        assert power["watts"] in (4.52, 3.478)  # one of the two recorded lines
    finally:
        suite.close()


def test_tegrastats_is_not_started_when_sysfs_works(fake_tegrastats, monkeypatch, commands):
    monkeypatch.setenv("PATH", str(fake_tegrastats("jetson-nano-jp4")))
    suite = discover(FIXTURES / "jetson-nano-jp4", run_command=commands("none"))

    assert "tegrastats" not in suite.active
    assert suite.power.name == "ina3221-iio"


def test_tegrastats_exiting_is_a_sensor_error(tmp_path):
    program = tmp_path / "tegrastats"
    program.write_text("#!/bin/sh\nexit 3\n")
    program.chmod(0o755)
    stream = TegrastatsStream([str(program)])
    try:
        with pytest.raises(SensorError, match="tegrastats exited with 3"):
            stream.latest(max_age_s=10)
    finally:
        stream.stop()
