"""Energy over a window from samples, and energy per inference net of the idle baseline."""

from __future__ import annotations

import pytest

from edgeopt_agent.sensors import EnergyReading, energy_fields
from edgeopt_agent.sensors.energy import WindowNotCovered, counter_energy, inside, integrate_power, value_at

POWER = [(10.0, 2.0), (11.0, 4.0), (12.0, 4.0), (13.0, 2.0)]  # (time, watts)
COUNTER = [(10.0, 100.0), (11.0, 103.0), (12.0, 107.0)]  # (time, cumulative joules)


def test_value_at_interpolates_between_samples():
    assert value_at(POWER, 10.0) == 2.0
    assert value_at(POWER, 10.25) == pytest.approx(2.5)
    assert value_at(POWER, 13.0) == 2.0


def test_value_outside_the_samples_is_not_guessed():
    with pytest.raises(WindowNotCovered):
        value_at(POWER, 9.9)
    with pytest.raises(WindowNotCovered):
        value_at(POWER, 13.1)
    with pytest.raises(WindowNotCovered):
        value_at([], 1.0)


def test_trapezoid_over_whole_samples():
    # 1 s ramp 2->4 W (3 J) + 1 s at 4 W (4 J) + 1 s ramp 4->2 W (3 J)
    assert integrate_power(POWER, 10.0, 13.0) == pytest.approx(10.0)


def test_trapezoid_with_edges_between_samples():
    # 10.5..11: ramp 3->4 W (1.75 J); 11..12: 4 J; 12..12.5: ramp 4->3 W (1.75 J)
    assert integrate_power(POWER, 10.5, 12.5) == pytest.approx(7.5)
    assert inside(POWER, 10.5, 12.5) == 2


def test_window_inside_one_sample_interval():
    assert integrate_power(POWER, 11.25, 11.75) == pytest.approx(2.0)
    assert inside(POWER, 11.25, 11.75) == 0


def test_counter_energy_is_the_difference_of_interpolated_totals():
    assert counter_energy(COUNTER, 10.0, 12.0) == pytest.approx(7.0)
    assert counter_energy(COUNTER, 10.5, 11.5) == pytest.approx(105.0 - 101.5)


def test_an_empty_or_reversed_window_is_an_error():
    with pytest.raises(ValueError):
        integrate_power(POWER, 12.0, 12.0)
    with pytest.raises(ValueError):
        counter_energy(COUNTER, 12.0, 11.0)


def reading(joules, watts, duration, source="board_total", rail="VDD_IN", reason=None):
    return EnergyReading(joules, watts, source, rail, 10, reason, duration)


def test_energy_per_inference_subtracts_idle_power_over_the_measured_duration():
    measured = reading(joules=30.0, watts=6.0, duration=5.0)
    idle = reading(joules=8.0, watts=4.0, duration=2.0)

    fields = energy_fields(measured, idle, inferences=500)

    # (30 J - 4 W x 5 s) / 500 = 0.02 J = 20 mJ
    assert fields == {
        "energy_per_inference_mj": pytest.approx(20.0),
        "avg_power_w": 6.0,
        "idle_power_w": 4.0,
        "power_source": "board_total",
        "power_rail": "VDD_IN",
        "power_reason": None,
    }


def test_duration_falls_back_to_energy_over_mean_power():
    measured = EnergyReading(30.0, 6.0, "measured_rail", "package-0", 10, None)
    idle = EnergyReading(8.0, 4.0, "measured_rail", "package-0", 10, None)

    assert energy_fields(measured, idle, 500)["energy_per_inference_mj"] == pytest.approx(20.0)


def test_no_sensor_gives_null_with_the_reason():
    none = EnergyReading(None, None, None, None, 0, "no power sensor found (rpi4 has none)", 5.0)

    fields = energy_fields(none, none, inferences=100)

    assert fields["energy_per_inference_mj"] is None
    assert fields["avg_power_w"] is None
    assert fields["power_source"] is None
    assert fields["power_reason"] == "no power sensor found (rpi4 has none)"


def test_no_idle_baseline_gives_null_but_keeps_the_average_power():
    measured = reading(joules=30.0, watts=6.0, duration=5.0)
    idle = reading(None, None, 2.0, reason="power sensor ina3221-hwmon failed: boom")

    fields = energy_fields(measured, idle, 100)

    assert fields["energy_per_inference_mj"] is None
    assert fields["avg_power_w"] == 6.0
    assert fields["power_reason"].startswith("no idle baseline (power sensor ina3221-hwmon failed: boom)")


def test_power_not_above_idle_is_not_turned_into_a_number():
    measured = reading(joules=19.5, watts=3.9, duration=5.0)
    idle = reading(joules=8.0, watts=4.0, duration=2.0)

    fields = energy_fields(measured, idle, 100)

    assert fields["energy_per_inference_mj"] is None
    assert "not above the idle 4.000 W" in fields["power_reason"]


def test_baseline_from_another_sensor_is_refused():
    measured = reading(joules=30.0, watts=6.0, duration=5.0)
    idle = reading(joules=8.0, watts=4.0, duration=2.0, source="measured_rail", rail="package-0")

    assert energy_fields(measured, idle, 100)["energy_per_inference_mj"] is None


def test_inferences_must_be_positive():
    measured = reading(joules=30.0, watts=6.0, duration=5.0)
    with pytest.raises(ValueError):
        energy_fields(measured, measured, 0)
