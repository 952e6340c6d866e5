"""Temperatures from the kernel's thermal zones (millidegrees Celsius in thermal_zone*/temp)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from .base import Issue, RunCommand, Sensor, SensorError, describe_os_error, read_int, thermal_class_entries

# Offline zones report a sentinel such as -256 C (Jetson Orin's CV zones when the engine is off).
_OFFLINE_BELOW_C = -100.0


class ThermalSensor(Sensor):
    name = "thermal"

    def __init__(self, zones: List[Tuple[str, Path]]):
        self._zones = zones
        self._unreadable: Dict[str, str] = {}

    @classmethod
    def probe(cls, sysfs_root: Path, run_command: RunCommand) -> Optional["ThermalSensor"]:
        # Tegra "PMIC-Die" zones report a fixed 100 C placeholder, not a measurement.
        found = thermal_class_entries(sysfs_root, "thermal_zone", "temp", lambda kind: "PMIC" not in kind,
                                      type_optional=True)
        return cls([(name, entry / "temp") for name, entry in found]) if found else None

    def temperatures(self) -> Dict[str, float]:
        temps = {}
        for name, path in self._zones:
            try:
                celsius = read_int(path) / 1000.0
            except (OSError, SensorError) as exc:
                # One zone failing (some return EINVAL while their device sleeps) must not
                # take the other zones down with it.
                self._unreadable[name] = (
                    describe_os_error(path, exc) if isinstance(exc, OSError) else str(exc)
                )
                continue
            self._unreadable.pop(name, None)
            if celsius > _OFFLINE_BELOW_C:
                temps[name] = celsius
        return temps

    def read(self) -> Dict[str, Dict[str, Any]]:
        return {"thermal": self.temperatures()}

    def unreadable_parts(self) -> Dict[str, str]:
        return dict(self._unreadable)

    def issues(self, throttle_c: Optional[float]) -> List[Issue]:
        if throttle_c is None:
            return []
        return [
            Issue(
                "throttled",
                f"thermal zone {name} at {celsius:.1f} C, at or above the {throttle_c:g} C throttle point",
            )
            for name, celsius in self.temperatures().items()
            if celsius >= throttle_c
        ]
