"""Jetson GPU/EMC clocks and the nvpmodel mode, on fake sysfs trees in each JetPack generation's layout.

fixtures/<board>/sys/...                   devfreq (Hz), device-tree node names, EMC debugfs files
fixtures/<board>/commands/nvpmodel_-q.out  what `nvpmodel -q` prints on that release
The nvpmodel outputs are the formats boards print (published captures): JetPack 4 on Nano warns
about the fan first, JetPack 5 prints the fan mode first, JetPack 6 prints the mode alone.
"""
from __future__ import annotations

import pytest

from edgeopt_agent.sensors.base import SensorError
from edgeopt_agent.sensors.jetson_clocks import JetsonClocksSensor, PowerMode, parse_nvpmodel
from edgeopt_agent.sensors.suite import SensorSuite
from jetson_boards import FIXTURES, Commands, board_copy, gpu_devfreq


@pytest.mark.parametrize(
    "text, mode",
    [
        ((FIXTURES / "jetson-nano-jp4/commands/nvpmodel_-q.out").read_text(), PowerMode("MAXN", 0)),
        ((FIXTURES / "jetson-agx-orin-jp5/commands/nvpmodel_-q.out").read_text(), PowerMode("MAXN", 0)),
        ((FIXTURES / "jetson-orin-nano-jp6/commands/nvpmodel_-q.out").read_text(), PowerMode("25W", 1)),
        ("NV Fan Mode:cool\nNV Power Mode: MODE_30W_4CORE\n5\n", PowerMode("MODE_30W_4CORE", 5)),
        ("NVPM VERB: Config file: /etc/nvpmodel.conf\nNVPM VERB: Current mode: NV Power Mode: MODE_15W_6CORE\n2\n",
         PowerMode("MODE_15W_6CORE", 2)),
        ("NVPM WARN: fan mode is not set!\nNV Power Mode: MAXN\n", PowerMode("MAXN", None)),
    ],
)
def test_nvpmodel_query_output_from_each_release(text, mode):
    assert parse_nvpmodel(text) == mode


def test_nvpmodel_output_without_a_mode_is_an_error():
    with pytest.raises(SensorError, match="unexpected 'nvpmodel -q' output"):
        parse_nvpmodel("NVPM ERROR: failed to read PARAM CPU_ONLINE\n")


@pytest.mark.parametrize(
    "board, gpu, emc, nvpmodel",
    [
        ("jetson-nano-jp4", {"cur_mhz": 77, "min_mhz": 77, "max_mhz": 922},
         {"cur_mhz": 1600, "min_mhz": 204, "max_mhz": 1600}, {"mode": "MAXN", "id": 0}),
        ("jetson-agx-orin-jp5", {"cur_mhz": 1300, "min_mhz": 1300, "max_mhz": 1300},
         {"cur_mhz": 3199, "min_mhz": 204, "max_mhz": 3199}, {"mode": "MAXN", "id": 0}),
        ("jetson-orin-nano-jp6", {"cur_mhz": 306, "min_mhz": 306, "max_mhz": 918}, None, {"mode": "25W", "id": 1}),
    ],
)
def test_clocks_and_power_mode_on_each_jetpack_layout(board, gpu, emc, nvpmodel):
    root = FIXTURES / board
    sensor = JetsonClocksSensor.probe(root, Commands(root / "commands"))
    reading = sensor.read()
    assert reading["clocks"]["gpu"] == gpu  # on the AGX Orin the video engine (vic) is not taken for the GPU
    assert reading["clocks"].get("emc") == emc
    assert reading["nvpmodel"] == nvpmodel
    assert sensor.issues(throttle_c=None) == []
    assert sensor.unreadable_parts() == {}


def test_a_machine_without_a_jetson_gpu_has_no_clock_sensor(tmp_path):
    (tmp_path / "sys/class/devfreq").mkdir(parents=True)
    assert JetsonClocksSensor.probe(tmp_path, Commands(tmp_path)) is None
    assert JetsonClocksSensor.probe(tmp_path / "absent", Commands(tmp_path)) is None


def test_without_nvpmodel_the_mode_is_null_with_the_reason(tmp_path):
    root = FIXTURES / "jetson-orin-nano-jp6"
    sensor = JetsonClocksSensor.probe(root, Commands(tmp_path))  # no recorded nvpmodel here
    assert sensor.read()["nvpmodel"] == {"mode": None, "reason": "nvpmodel is not installed"}


def test_a_lowered_gpu_ceiling_is_throttling_and_suite_health_says_so(tmp_path):
    root = board_copy(tmp_path, "jetson-orin-nano-jp6")
    sensor = JetsonClocksSensor.probe(root, Commands(root / "commands"))
    suite = SensorSuite([sensor], {})
    assert suite.health() == {"throttled": False, "under_voltage": False, "reasons": []}

    (gpu_devfreq(root) / "max_freq").write_text("624750000\n")
    health = suite.health()
    assert health["throttled"] is True
    assert health["reasons"] == ["GPU clock ceiling lowered to 625 MHz (was 918 MHz at start)"]


def test_locked_clocks_that_fall_below_their_floor_are_throttling(tmp_path):
    root = board_copy(tmp_path, "jetson-agx-orin-jp5")  # jetson_clocks: GPU min = max = cur
    sensor = JetsonClocksSensor.probe(root, Commands(root / "commands"))
    (gpu_devfreq(root) / "cur_freq").write_text("930750000\n")
    assert [i.reason for i in sensor.issues(None)] == ["GPU clock at 931 MHz, below its floor of 1300 MHz"]


def test_a_new_power_mode_sets_a_new_baseline(tmp_path):
    root = board_copy(tmp_path, "jetson-orin-nano-jp6")
    sensor = JetsonClocksSensor.probe(root, Commands(root / "commands"))
    (gpu_devfreq(root) / "max_freq").write_text("624750000\n")
    assert sensor.issues(None), "a lower ceiling in the same mode is throttling"

    (root / "commands/nvpmodel_-q.out").write_text("NV Power Mode: 15W\n0\n")  # the user chose 15 W
    assert sensor.read()["nvpmodel"] == {"mode": "15W", "id": 0}
    assert sensor.issues(None) == []
    (gpu_devfreq(root) / "max_freq").write_text("306000000\n")
    assert [i.reason for i in sensor.issues(None)] == ["GPU clock ceiling lowered to 306 MHz (was 625 MHz at start)"]


def test_an_unreadable_emc_clock_is_reported_and_the_gpu_still_read(tmp_path):
    root = board_copy(tmp_path, "jetson-agx-orin-jp5")
    sensor = JetsonClocksSensor.probe(root, Commands(root / "commands"))
    rate = root / "sys/kernel/debug/bpmp/debug/clk/emc/rate"
    rate.unlink()
    rate.mkdir()  # reading it now fails the way an unreadable file does
    reading = sensor.read()
    assert set(reading["clocks"]) == {"gpu"}
    assert "cannot read" in sensor.unreadable_parts()["emc"] and str(rate) in sensor.unreadable_parts()["emc"]
    suite = SensorSuite([sensor], {})
    assert "jetson-clocks/emc" in suite.disabled and "jetson-clocks" in suite.active


def test_a_gpu_clock_that_cannot_be_read_disables_the_sensor_at_discovery(tmp_path):
    root = board_copy(tmp_path, "jetson-orin-nano-jp6")
    (gpu_devfreq(root) / "cur_freq").write_text("busy\n")
    with pytest.raises(SensorError, match="holds 'busy', not an integer"):
        JetsonClocksSensor.probe(root, Commands(root / "commands"))
