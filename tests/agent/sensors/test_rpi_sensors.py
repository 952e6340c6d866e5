"""Raspberry Pi: vcgencmd get_throttled flags and the Pi 5 PMIC rails."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgeopt_agent.profiles import load_profile
from edgeopt_agent.sensors import discover
from edgeopt_agent.sensors.base import CommandError, SensorError
from edgeopt_agent.sensors.rpi import (
    RpiPmicSensor,
    RpiThrottleSensor,
    describe_throttled,
    parse_pmic_adc,
    parse_throttled,
)

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize(
    "text, flags",
    [
        ("throttled=0x0\n", 0),
        ("throttled=0x50000\n", 0x50000),
        ("throttled=0x50005", 0x50005),
        ("throttled=0xe0008", 0xE0008),
    ],
)
def test_parse_throttled(text, flags):
    assert parse_throttled(text) == flags


def test_parse_throttled_rejects_an_error_reply():
    with pytest.raises(SensorError, match="unexpected 'vcgencmd get_throttled' output"):
        parse_throttled('error=1 error_msg="Command not registered"')


def test_describe_throttled_separates_now_from_since_boot():
    assert describe_throttled(0x50005) == (["under-voltage", "throttled"], ["under-voltage", "throttled"])
    assert describe_throttled(0x80008) == (["soft temperature limit"], ["soft temperature limit"])
    assert describe_throttled(0x20000) == ([], ["ARM frequency capped"])


def test_under_voltage_now_makes_the_board_unhealthy(commands):
    run = commands("rpi4", vcgencmd_get_throttled="throttled=0x50005\n")
    suite = discover(FIXTURES / "rpi4", profile=load_profile("rpi4"), run_command=run)
    health = suite.health()

    assert health["under_voltage"] is True
    assert health["throttled"] is True
    assert "under-voltage now (vcgencmd get_throttled: 0x50005)" in health["reasons"]
    assert "throttled now (vcgencmd get_throttled: 0x50005)" in health["reasons"]


def test_soft_temperature_limit_counts_as_throttled(commands):
    run = commands("rpi4", vcgencmd_get_throttled="throttled=0x80008\n")
    health = discover(FIXTURES / "rpi4", run_command=run).health()

    assert health == {
        "throttled": True,
        "under_voltage": False,
        "reasons": ["soft temperature limit now (vcgencmd get_throttled: 0x80008)"],
    }


def test_latched_conditions_are_reported_by_name(commands):
    sensor = RpiThrottleSensor.probe(FIXTURES / "rpi4", commands("rpi4"))

    assert [(i.kind, i.reason) for i in sensor.latched()] == [
        ("under_voltage", "under-voltage"),
        ("throttled", "throttled"),
    ]
    assert sensor.issues(None) == []


def test_parse_pmic_adc_pairs_rails_by_name():
    text = (FIXTURES / "rpi5" / "commands" / "vcgencmd_pmic_read_adc.out").read_text()
    rails = parse_pmic_adc(text)

    assert len(rails) == 12
    assert rails["VDD_CORE"] == (pytest.approx(0.8936988), pytest.approx(5.03652))
    assert rails["3V7_WL_SW"] == (pytest.approx(3.610692), pytest.approx(0.0585558))
    # Voltage-only channels have no current, so no power.
    assert "EXT5V" not in rails and "BATT" not in rails


def test_pmic_absent_when_the_firmware_does_not_know_the_command(commands):
    assert RpiPmicSensor.probe(FIXTURES / "rpi4", commands("rpi4")) is None


def test_pmic_absent_without_vcgencmd(commands):
    assert RpiPmicSensor.probe(FIXTURES / "rpi5", commands("none")) is None
    assert RpiThrottleSensor.probe(FIXTURES / "rpi5", commands("none")) is None


def test_vcgencmd_without_permission_disables_the_sensors_with_the_reason(tmp_path):
    (tmp_path / "sys").mkdir()

    def denied(argv):
        raise CommandError(argv, 255, "VCHI initialization failed\n")

    suite = discover(tmp_path, profile=load_profile("rpi5"), run_command=denied)
    disabled = suite.snapshot()["sensors"]["disabled"]

    assert disabled["rpi-throttle"] == "'vcgencmd get_throttled' exited with 255: VCHI initialization failed"
    assert disabled["rpi-pmic"] == "'vcgencmd pmic_read_adc' exited with 255: VCHI initialization failed"
    assert suite.power_reason.startswith("no rpi-pmic power sensor found on this rpi5: rpi-pmic disabled (")


def test_pmic_failing_later_disables_power_and_keeps_the_reason(commands):
    run = commands("rpi5")
    suite = discover(FIXTURES / "rpi5", profile=load_profile("rpi5"), run_command=run)
    assert suite.snapshot()["power"]["watts"] is not None

    run.overrides["vcgencmd_pmic_read_adc"] = "\n"
    snap = suite.snapshot()

    assert snap["power"]["watts"] is None
    assert (
        snap["power"]["reason"]
        == "power sensor rpi-pmic failed: 'vcgencmd pmic_read_adc' printed no rails: ''"
    )
    assert "rpi-pmic" in snap["sensors"]["disabled"]
    assert "rpi-pmic" not in snap["sensors"]["active"]
