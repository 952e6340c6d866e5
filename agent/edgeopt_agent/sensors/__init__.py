"""Board sensors, found once at start: telemetry, health (throttling, under-voltage) and power.

suite = discover(profile=load_profile("rpi5"))
suite.snapshot()                      # JSON-able telemetry
suite.health()                        # {"throttled", "under_voltage", "reasons"}
with suite.power_monitor() as mon:    # background power sampling
    reading = mon.window(t0, t1)      # EnergyReading for a time.time() window
"""

from __future__ import annotations

from .energy import EnergyReading, energy_fields
from .monitor import PowerMonitor
from .suite import SensorSuite, discover
from .tegrastats import parse_tegrastats_line

__all__ = [
    "EnergyReading",
    "PowerMonitor",
    "SensorSuite",
    "discover",
    "energy_fields",
    "parse_tegrastats_line",
]
