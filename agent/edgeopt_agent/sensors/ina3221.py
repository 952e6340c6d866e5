"""Jetson INA3221 power monitors, in both layouts the kernel has exposed them in.

JetPack 4 (ina3221x driver, iio):
    /sys/bus/i2c/drivers/ina3221x/<bus-addr>/iio:deviceN/rail_name_K   e.g. POM_5V_IN
                                                         in_powerK_input (mW)
JetPack 5/6 (mainline ina3221 driver, hwmon; `name` is "ina3221"):
    /sys/class/hwmon/hwmonN/inK_label (e.g. VDD_IN), inK_input (bus mV), currK_input (mA),
    currK_crit_alarm (1 while the channel is over its critical current limit)

When the board has a rail for its whole input (VDD_IN, POM_5V_IN) that rail is the figure, as
"board_total"; otherwise the rails are summed, as "measured_rail".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from .base import (
    Issue,
    PowerMeasurement,
    PowerSensor,
    RunCommand,
    SensorError,
    describe_os_error,
    must_read_int,
    read_int,
    read_text,
    sys_path,
)

BOARD_TOTAL_RAILS = ("VDD_IN", "POM_5V_IN")
# Channels wired to nothing are labelled "NC" on Orin carrier boards.
_UNCONNECTED = "NC"


def combine_rails(rails: Dict[str, float]) -> Tuple[float, str, str]:
    """(watts, source, rail) for a set of per-rail watts: the board-total rail when there is one."""
    for total in BOARD_TOTAL_RAILS:
        if total in rails:
            return rails[total], "board_total", total
    return sum(rails.values()), "measured_rail", "sum of " + "+".join(rails)


def describe_rails(names: List[str]) -> Tuple[str, str]:
    """(source, rail) that combine_rails will report for these rail names."""
    _, source, rail = combine_rails({name: 0.0 for name in names})
    return source, rail


class _Ina3221(PowerSensor):
    family = "ina3221"

    def __init__(self, channels: Dict[str, Any]):
        self._channels = channels
        self.source, self.rail = describe_rails(list(channels))

    def _rail_watts(self, channel: Any) -> float:
        raise NotImplementedError

    def measure(self) -> PowerMeasurement:
        rails = {name: self._rail_watts(channel) for name, channel in self._channels.items()}
        watts, _, _ = combine_rails(rails)
        return PowerMeasurement(watts, rails)


class Ina3221IioSensor(_Ina3221):
    """JetPack 4 layout: one in_powerK_input file (mW) per rail."""

    name = "ina3221-iio"

    @classmethod
    def probe(cls, sysfs_root: Path, run_command: RunCommand) -> Optional["Ina3221IioSensor"]:
        channels: Dict[str, Path] = {}
        pattern = "sys/bus/i2c/drivers/ina3221x/*/iio:device*/rail_name_*"
        for label_file in sorted(Path(sysfs_root).glob(pattern)):
            index = label_file.name[len("rail_name_") :]
            try:
                label = read_text(label_file)
            except OSError as exc:
                raise SensorError(describe_os_error(label_file, exc)) from None
            power_file = label_file.parent / f"in_power{index}_input"
            if label and label != _UNCONNECTED and power_file.is_file():
                channels[label] = power_file
        if not channels:
            return None
        sensor = cls(channels)
        sensor.measure()
        return sensor

    def _rail_watts(self, channel: Path) -> float:
        return must_read_int(channel) / 1000.0


class Ina3221HwmonSensor(_Ina3221):
    """JetPack 5/6 layout: bus voltage (mV) and current (mA) per labelled channel."""

    name = "ina3221-hwmon"

    @classmethod
    def probe(cls, sysfs_root: Path, run_command: RunCommand) -> Optional["Ina3221HwmonSensor"]:
        channels: Dict[str, Tuple[Path, Path, Path]] = {}
        for device in _hwmon_devices(Path(sysfs_root)):
            for label_file in sorted(device.glob("in*_label")):
                index = label_file.name[len("in") : -len("_label")]
                volts, amps = device / f"in{index}_input", device / f"curr{index}_input"
                try:
                    label = read_text(label_file)
                except OSError as exc:
                    raise SensorError(describe_os_error(label_file, exc)) from None
                # The "sum of shunt voltages" channel has a label but no bus voltage/current pair.
                if label and label != _UNCONNECTED and volts.is_file() and amps.is_file():
                    channels[label] = (volts, amps, device / f"curr{index}_crit_alarm")
        if not channels:
            return None
        sensor = cls(channels)
        sensor.measure()
        return sensor

    def _rail_watts(self, channel: Tuple[Path, Path, Path]) -> float:
        volts, amps, _ = channel
        return must_read_int(volts) * must_read_int(amps) / 1e6

    def issues(self, throttle_c: Optional[float]) -> List[Issue]:
        found = []
        for name, (_, _, alarm) in self._channels.items():
            try:
                raised = alarm.is_file() and read_int(alarm) != 0
            except OSError:
                continue
            if raised:
                found.append(
                    Issue("throttled", f"over-current alarm on {name}: the board throttles its clocks")
                )
        return found


def _hwmon_devices(sysfs_root: Path) -> List[Path]:
    candidates = list(sys_path(sysfs_root, "sys/class/hwmon").glob("hwmon*"))
    candidates += list(sys_path(sysfs_root, "sys/bus/i2c/drivers/ina3221").glob("*/hwmon/hwmon*"))
    devices, seen = [], set()
    for path in sorted(candidates):
        name_file = path / "name"
        try:
            is_ina = name_file.is_file() and read_text(name_file) == "ina3221"
        except OSError:
            continue
        real = path.resolve()
        if is_ina and real not in seen:
            seen.add(real)
            devices.append(path)
    return devices
