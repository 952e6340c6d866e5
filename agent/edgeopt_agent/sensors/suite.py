"""Discovery, once at start, and the suite of sensors it found: telemetry, health, power."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Type, Union

from .base import Issue, PowerSensor, RunCommand, Sensor, SensorError, summarize
from .base import run_command as default_run_command
from .cooling import CoolingSensor
from .cpufreq import CpuFreqSensor
from .ina3221 import Ina3221HwmonSensor, Ina3221IioSensor
from .jetson_clocks import JetsonClocksSensor
from .monitor import PowerMonitor
from .nvml import NvmlSensor
from .rapl import RaplSensor
from .rpi import RpiPmicSensor, RpiThrottleSensor
from .system import SystemSensor
from .tegrastats import TegrastatsSensor
from .thermal import ThermalSensor

if TYPE_CHECKING:
    from ..profiles import DeviceProfile

SENSORS: Tuple[Type[Sensor], ...] = (
    SystemSensor,
    CpuFreqSensor,
    ThermalSensor,
    CoolingSensor,
    RpiThrottleSensor,
    JetsonClocksSensor,
)
# In order of preference when the profile does not say which power sensor the board has.
POWER_SENSORS: Tuple[Type[PowerSensor], ...] = (
    Ina3221HwmonSensor,
    Ina3221IioSensor,
    RpiPmicSensor,
    NvmlSensor,
    RaplSensor,
)
# Only probed when no INA3221 sysfs sensor works: it keeps a tegrastats process running.
FALLBACK_POWER_SENSORS: Tuple[Type[PowerSensor], ...] = (TegrastatsSensor,)
# Telemetry watts from an energy counter are averaged over at least this long.
COUNTER_MIN_INTERVAL_S = 0.1


def discover(
    sysfs_root: Union[str, Path] = "/",
    profile: Optional["DeviceProfile"] = None,
    run_command: Optional[RunCommand] = None,
) -> "SensorSuite":
    """Probe every sensor once. Absent sensors are left out; broken ones are listed as disabled."""
    root = Path(sysfs_root)
    run = run_command or default_run_command
    found: List[Sensor] = []
    disabled: Dict[str, str] = {}

    def probe_all(classes: Sequence[Type[Sensor]]) -> None:
        for cls in classes:
            try:
                sensor = cls.probe(root, run)
            except Exception as exc:  # any failure to set a sensor up disables it, never the agent
                disabled[cls.name] = _reason(exc)
                continue
            if sensor is not None:
                found.append(sensor)

    probe_all(SENSORS + POWER_SENSORS)
    if not any(isinstance(s, PowerSensor) and s.family == "ina3221" for s in found):
        probe_all(FALLBACK_POWER_SENSORS)
    return SensorSuite(found, disabled, profile)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, SensorError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


class SensorSuite:
    """The sensors found on this board. Any sensor that fails while reading is disabled."""

    def __init__(
        self, sensors: Sequence[Sensor], disabled: Dict[str, str], profile: Optional["DeviceProfile"] = None
    ):
        self.profile = profile
        self._lock = threading.Lock()
        self._sensors: List[Sensor] = [s for s in sensors if not isinstance(s, PowerSensor)]
        self._power_sensors: List[PowerSensor] = [s for s in sensors if isinstance(s, PowerSensor)]
        self._disabled: Dict[str, str] = dict(disabled)
        self.power: Optional[PowerSensor] = self._choose_power()
        self.power_reason: Optional[str] = None if self.power else self._no_power_reason()
        # For counters, telemetry watts are the average since the previous snapshot.
        self._counter_last: Optional[Tuple[float, float]] = None
        if self.power is not None and self.power.is_counter:
            self._read_counter_watts()

    # -- discovery results ---------------------------------------------------------------

    @property
    def active(self) -> List[str]:
        with self._lock:
            return [s.name for s in self._sensors + self._power_sensors]

    @property
    def disabled(self) -> Dict[str, str]:
        with self._lock:
            found = dict(self._disabled)
            sensors = self._sensors + self._power_sensors
        for sensor in sensors:
            for part, reason in sensor.unreadable_parts().items():
                found[f"{sensor.name}/{part}"] = reason
        return found

    @property
    def throttle_c(self) -> Optional[float]:
        return self.profile.thermal.throttle_c if self.profile is not None else None

    def _choose_power(self) -> Optional[PowerSensor]:
        candidates = self._power_sensors
        expected = self.profile.power_sensor if self.profile is not None else None
        preferred = [s for s in candidates if s.family == expected]
        candidates = preferred or candidates
        board_total = [s for s in candidates if s.source == "board_total"]
        return (board_total or candidates or [None])[0]

    def _no_power_reason(self) -> str:
        expected = self.profile.power_sensor if self.profile is not None else None
        if expected == "none":
            return f"no power sensor found ({self.profile.name} has none)"
        failed = {
            cls.name: self._disabled[cls.name]
            for cls in POWER_SENSORS + FALLBACK_POWER_SENSORS
            if cls.name in self._disabled and (expected is None or cls.family == expected)
        }
        what = (
            f"no {expected} power sensor found on this {self.profile.name}"
            if expected
            else "no power sensor found"
        )
        if failed:
            what += ": " + "; ".join(f"{name} disabled ({reason})" for name, reason in failed.items())
        return what

    def disable(self, sensor: Sensor, reason: str) -> None:
        """Take a sensor that failed out of service, keeping the reason for telemetry."""
        with self._lock:
            if sensor in self._sensors:
                self._sensors.remove(sensor)
            if sensor in self._power_sensors:
                self._power_sensors.remove(sensor)
            self._disabled[sensor.name] = reason
            if sensor is self.power:
                self.power = None
                self.power_reason = f"power sensor {sensor.name} failed: {reason}"
        sensor.close()

    def _call(self, sensor: Sensor, method: str, *args: Any) -> Any:
        try:
            return getattr(sensor, method)(*args)
        except Exception as exc:  # a sensor failing at read time is disabled, never fatal
            self.disable(sensor, _reason(exc))
            return None

    # -- telemetry -----------------------------------------------------------------------

    def snapshot(self) -> Dict[str, Any]:
        """JSON-able telemetry from every active sensor."""
        report: Dict[str, Any] = {"cpu": {}, "memory": {}, "disk": {}, "thermal": {}, "throttle": {}}
        with self._lock:
            sensors = list(self._sensors)
        for sensor in sensors:
            for section, values in (self._call(sensor, "read") or {}).items():
                report.setdefault(section, {}).update(values)
        report["power"] = self._power_now()
        health = self.health()
        report["throttle"].update(health)
        report["sensors"] = {"active": self.active, "disabled": self.disabled}
        return report

    def _power_now(self) -> Dict[str, Any]:
        sensor = self.power
        if sensor is None:
            return {"watts": None, "source": None, "rail": None, "reason": self.power_reason, "rails": {}}
        rails: Dict[str, float] = {}
        if sensor.is_counter:
            watts = self._read_counter_watts()
        else:
            measurement = self._call(sensor, "measure")
            watts = None if measurement is None else measurement.watts
            rails = {} if measurement is None else {k: round(v, 3) for k, v in measurement.rails.items()}
        if self.power is None:  # it failed just now
            return {"watts": None, "source": None, "rail": None, "reason": self.power_reason, "rails": {}}
        return {
            "watts": None if watts is None else round(watts, 3),
            "source": sensor.source,
            "rail": sensor.rail,
            "reason": None,
            "rails": rails,
        }

    def _read_counter_watts(self) -> Optional[float]:
        sensor = self.power
        assert sensor is not None
        with self._lock:
            last = self._counter_last
        if last is not None:
            # Too short an interval gives noise, not a figure: wait until it is long enough.
            time.sleep(max(0.0, last[0] + COUNTER_MIN_INTERVAL_S - time.time()))
        joules = self._call(sensor, "joules")
        if joules is None:
            return None
        now = time.time()
        watts = None if last is None else (joules - last[1]) / (now - last[0])
        with self._lock:
            self._counter_last = (now, joules)
        return watts

    # -- health --------------------------------------------------------------------------

    def issues(self) -> List[Issue]:
        return self._issues_from("issues", self.throttle_c)

    def latched(self) -> List[Issue]:
        return self._issues_from("latched")

    def _issues_from(self, method: str, *args: Any) -> List[Issue]:
        """What `method` of every active sensor reports, in sensor order."""
        with self._lock:
            sensors = self._sensors + self._power_sensors
        found: List[Issue] = []
        for sensor in sensors:
            found.extend(self._call(sensor, method, *args) or [])
        return found

    def health(self) -> Dict[str, Any]:
        """Whether a measurement taken now can be trusted: throttling and under-voltage now."""
        return summarize(self.issues())

    # -- power ---------------------------------------------------------------------------

    def power_monitor(self, interval_s: float = 0.05) -> PowerMonitor:
        return PowerMonitor(self, interval_s=interval_s)

    def close(self) -> None:
        with self._lock:
            sensors = self._sensors + self._power_sensors
        for sensor in sensors:
            sensor.close()
