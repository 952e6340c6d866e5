"""PowerMonitor on fake boards whose sensor files the test rewrites while it samples."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from edgeopt_agent.profiles import load_profile
from edgeopt_agent.sensors import EnergyReading, discover

FIXTURES = Path(__file__).parent / "fixtures"
RAPL_ENERGY = "sys/class/powercap/intel-rapl:0/energy_uj"
MAX_RANGE_UJ = 262143328850
VDD_IN_AMPS = "sys/class/hwmon/hwmon1/curr1_input"


def wait_for_samples(mon, more_than, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while mon.samples <= more_than:
        assert time.monotonic() < deadline, "the monitor thread took no samples"
        time.sleep(0.005)


def test_counter_energy_across_a_wrap_while_the_thread_samples(board, rewrite, commands):
    root = board("x86-64-rapl")
    energy = root / RAPL_ENERGY
    rewrite(energy, str(MAX_RANGE_UJ - 1_000_000))
    suite = discover(root, profile=load_profile("x86-64"), run_command=commands("none"))

    with suite.power_monitor(interval_s=0.005) as mon:
        wait_for_samples(mon, 2)
        t0 = time.time()
        mon.sample_now()  # pins the counter at t0: nothing changes until after this sample
        rewrite(energy, "500000")  # wrapped: +1.5 J
        wait_for_samples(mon, mon.samples + 2)
        rewrite(energy, "2500000")  # +2 J
        mon.sample_now()
        t1 = time.time()
        wait_for_samples(mon, mon.samples + 2)
        reading = mon.window(t0, t1)

    assert reading.joules == pytest.approx(3.5)
    assert reading.mean_watts == pytest.approx(3.5 / (t1 - t0))
    assert reading.duration_s == pytest.approx(t1 - t0)
    assert reading.source == "measured_rail"
    assert reading.rail == "package-0 (CPU package)"
    assert reading.samples >= 2
    assert reading.reason is None


def test_instantaneous_power_integrated_over_the_window(board, rewrite, commands):
    root = board("jetson-orin-nano-jp6")
    suite = discover(root, profile=load_profile("jetson-orin-nano"), run_command=commands("none"))
    rewrite(root / VDD_IN_AMPS, "1000")  # 5.072 V x 1 A

    with suite.power_monitor(interval_s=0.005) as mon:
        mon.sample_now()
        t0 = time.time()
        wait_for_samples(mon, mon.samples + 3)
        t1 = time.time()
        mon.sample_now()
        steady = mon.window(t0, t1)

        rewrite(root / VDD_IN_AMPS, "2000")  # 10.144 W from here on
        wait_for_samples(mon, mon.samples + 3)
        t2 = time.time()
        wait_for_samples(mon, mon.samples + 3)
        t3 = time.time()
        mixed = mon.window(t0, t3)
        high = mon.window(t2, t3)

    assert steady.source == "board_total" and steady.rail == "VDD_IN"
    assert steady.joules == pytest.approx(5.072 * (t1 - t0))
    assert steady.mean_watts == pytest.approx(5.072)
    assert high.mean_watts == pytest.approx(10.144)
    assert 5.072 < mixed.mean_watts < 10.144


def test_a_window_before_the_monitor_started_is_refused_with_a_reason(commands):
    suite = discover(FIXTURES / "jetson-nano-jp4", run_command=commands("none"))
    t0 = time.time()
    time.sleep(0.01)
    with suite.power_monitor(interval_s=0.01) as mon:
        reading = mon.window(t0, time.time())

    assert reading.joules is None
    assert reading.reason == "the window starts before the power monitor's first sample"
    assert reading.source == "board_total"


def test_window_shorter_than_the_interval_is_interpolated_and_says_so(commands):
    suite = discover(FIXTURES / "jetson-nano-jp4", run_command=commands("none"))
    with suite.power_monitor(interval_s=60) as mon:
        t0 = time.time()
        t1 = t0 + 0.001
        time.sleep(0.002)
        reading = mon.window(t0, t1)

    assert reading.samples == 0
    assert reading.mean_watts == pytest.approx(2.906)
    assert reading.reason.startswith("window shorter than the sampling interval")


def test_no_power_sensor_gives_an_empty_reading_with_the_reason(commands):
    suite = discover(FIXTURES / "rpi4", profile=load_profile("rpi4"), run_command=commands("rpi4"))
    with suite.power_monitor() as mon:
        t0 = time.time()
        time.sleep(0.01)
        reading = mon.window(t0, time.time())

    assert reading == EnergyReading(
        None, None, None, None, 0, "no power sensor found (rpi4 has none)", reading.duration_s
    )
    assert reading.duration_s > 0


def test_sensor_failing_mid_run_disables_it_and_the_window_says_why(board, commands):
    root = board("jetson-orin-nano-jp6")
    suite = discover(root, profile=load_profile("jetson-orin-nano"), run_command=commands("none"))
    with suite.power_monitor(interval_s=0.005) as mon:
        t0 = time.time()
        wait_for_samples(mon, 2)
        (root / VDD_IN_AMPS).unlink()
        time.sleep(0.05)
        reading = mon.window(t0, time.time())

    assert reading.joules is None
    assert reading.reason.startswith(
        "power sensor ina3221-hwmon failed before the window ended: cannot read "
    )
    assert "ina3221-hwmon" in suite.snapshot()["sensors"]["disabled"]
    assert suite.snapshot()["power"]["watts"] is None


def test_health_over_a_window_catches_a_latched_under_voltage(board, commands):
    flags = {"value": "throttled=0x0\n"}

    def run(argv):
        if list(argv) == ["vcgencmd", "get_throttled"]:
            return flags["value"]
        return commands("rpi5")(argv)

    suite = discover(FIXTURES / "rpi5", profile=load_profile("rpi5"), run_command=run)
    with suite.power_monitor(interval_s=0.2) as mon:
        t0 = time.time()
        # A dip that came and went between two polls: only the latched bit (16) shows it.
        flags["value"] = "throttled=0x10000\n"
        t1 = time.time()
        seen = mon.health(t0, t1)

    assert seen["under_voltage"] is True
    assert seen["reasons"] == ["under-voltage occurred during the window (latched by the hardware)"]
    assert suite.health()["under_voltage"] is False  # nothing wrong right now


def test_health_over_a_window_reports_throttling_seen_by_a_poll(board, rewrite, commands):
    root = board("rpi5")
    suite = discover(root, profile=load_profile("rpi5"), run_command=commands("rpi5"))
    with suite.power_monitor(interval_s=0.2) as mon:
        t0 = time.time()
        rewrite(root / "sys/class/thermal/thermal_zone0/temp", "84000")
        t1 = time.time()
        seen = mon.health(t0, t1)
        rewrite(root / "sys/class/thermal/thermal_zone0/temp", "50000")
        later = mon.health(time.time(), time.time() + 0.001)

    assert seen["throttled"] is True
    assert seen["reasons"] == ["thermal zone cpu-thermal at 84.0 C, at or above the 80 C throttle point"]
    assert later["throttled"] is False


def test_pmic_is_not_polled_faster_than_its_floor(commands):
    suite = discover(FIXTURES / "rpi5", profile=load_profile("rpi5"), run_command=commands("rpi5"))
    mon = suite.power_monitor(interval_s=0.01)

    assert mon.interval_s == 0.2


def test_monitor_cannot_start_twice(commands):
    suite = discover(FIXTURES / "jetson-nano-jp4", run_command=commands("none"))
    with suite.power_monitor(interval_s=1) as mon:
        with pytest.raises(RuntimeError):
            mon.start()


def test_a_window_ending_in_the_future_is_refused_with_a_reason(commands):
    suite = discover(FIXTURES / "jetson-nano-jp4", run_command=commands("none"))
    with suite.power_monitor(interval_s=1) as mon:
        t0 = time.time()
        reading = mon.window(t0, t0 + 60)

    assert reading.joules is None
    assert reading.reason == "the window ends after the power monitor's latest sample"
