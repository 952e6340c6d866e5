"""Thermal cooling devices that slow the processor down.

A non-zero cur_state on such a device means the kernel's thermal framework is holding a clock
below its ceiling (cpufreq / devfreq cooling, ACPI "Processor" P-state limits) or injecting
idle time (intel_powerclamp) right now. Fans are cooling devices too, but a spinning fan slows
nothing, so only the devices that limit performance are watched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from .base import Issue, RunCommand, Sensor, must_read_int, thermal_class_entries


def _limits_performance(kind: str) -> bool:
    return "freq" in kind.lower() or kind in ("Processor", "intel_powerclamp")


class CoolingSensor(Sensor):
    name = "cooling"

    def __init__(self, devices: List[Tuple[str, Path]]):
        self._devices = devices

    @classmethod
    def probe(cls, sysfs_root: Path, run_command: RunCommand) -> Optional["CoolingSensor"]:
        devices = thermal_class_entries(sysfs_root, "cooling_device", "cur_state", _limits_performance)
        return cls(devices) if devices else None

    def states(self) -> Dict[str, Tuple[int, int]]:
        return {
            kind: (must_read_int(path / "cur_state"), must_read_int(path / "max_state"))
            for kind, path in self._devices
        }

    def read(self) -> Dict[str, Dict[str, Any]]:
        return {"throttle": {"cooling": {k: f"{cur}/{top}" for k, (cur, top) in self.states().items()}}}

    def issues(self, throttle_c: Optional[float]) -> List[Issue]:
        return [
            Issue("throttled", f"thermal cooling device {kind} is limiting clocks (state {cur} of {top})")
            for kind, (cur, top) in self.states().items()
            if cur > 0
        ]
