"""Raspberry Pi firmware sensors, read through `vcgencmd`.

get_throttled: a bit mask; bits 0-3 are the state now, bits 16-19 the same conditions latched
since boot. pmic_read_adc (Pi 5 only): the PMIC's ADC, one line per channel, for example
`   VDD_CORE_A current(7)=0.70277760A` and `   VDD_CORE_V volt(15)=0.89115000V`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from .base import CommandError, Issue, PowerMeasurement, PowerSensor, RunCommand, Sensor, SensorError

GET_THROTTLED = ("vcgencmd", "get_throttled")
PMIC_READ_ADC = ("vcgencmd", "pmic_read_adc")

# bit -> (issue kind, what it means)
THROTTLE_BITS = {
    0: ("under_voltage", "under-voltage"),
    1: ("throttled", "ARM frequency capped"),
    2: ("throttled", "throttled"),
    3: ("throttled", "soft temperature limit"),
}
_SINCE_BOOT_SHIFT = 16

_THROTTLED = re.compile(r"throttled=(0x[0-9a-fA-F]+)")
_ADC_LINE = re.compile(r"^\s*(\S+)_([AV])\s+(?:current|volt)\(\d+\)=([-+0-9.eE]+)[AV]\s*$")


def parse_throttled(text: str) -> int:
    match = _THROTTLED.search(text)
    if not match:
        raise SensorError(f"unexpected 'vcgencmd get_throttled' output: {text.strip()!r}")
    return int(match.group(1), 16)


def describe_throttled(flags: int) -> Tuple[List[str], List[str]]:
    """Names of the conditions active now and of those latched since boot."""
    now = [what for bit, (_, what) in THROTTLE_BITS.items() if flags & (1 << bit)]
    since_boot = [
        what for bit, (_, what) in THROTTLE_BITS.items() if flags & (1 << (bit + _SINCE_BOOT_SHIFT))
    ]
    return now, since_boot


def parse_pmic_adc(text: str) -> Dict[str, Tuple[float, float]]:
    """{rail: (volts, amps)} for every rail with both a voltage and a current channel.

    Voltage-only channels (EXT5V_V, the USB-C input; BATT_V, the RTC battery) carry no current,
    so they are not rails whose power can be computed.
    """
    volts: Dict[str, float] = {}
    amps: Dict[str, float] = {}
    for line in text.splitlines():
        match = _ADC_LINE.match(line)
        if match:
            rail, unit, value = match.groups()
            (amps if unit == "A" else volts)[rail] = float(value)
    return {rail: (volts[rail], amps[rail]) for rail in amps if rail in volts}


class RpiThrottleSensor(Sensor):
    name = "rpi-throttle"

    def __init__(self, run_command: RunCommand):
        self._run = run_command

    @classmethod
    def probe(cls, sysfs_root: Path, run_command: RunCommand) -> Optional["RpiThrottleSensor"]:
        try:
            parse_throttled(run_command(list(GET_THROTTLED)))
        except FileNotFoundError:
            return None
        return cls(run_command)

    def flags(self) -> int:
        return parse_throttled(self._run(list(GET_THROTTLED)))

    def read(self) -> Dict[str, Dict[str, Any]]:
        flags = self.flags()
        now, since_boot = describe_throttled(flags)
        return {"throttle": {"rpi_flags": hex(flags), "rpi_now": now, "rpi_since_boot": since_boot}}

    def issues(self, throttle_c: Optional[float]) -> List[Issue]:
        flags = self.flags()
        return [
            Issue(kind, f"{what} now (vcgencmd get_throttled: {hex(flags)})")
            for bit, (kind, what) in THROTTLE_BITS.items()
            if flags & (1 << bit)
        ]

    def latched(self) -> List[Issue]:
        flags = self.flags()
        return [
            Issue(kind, what)
            for bit, (kind, what) in THROTTLE_BITS.items()
            if flags & (1 << (bit + _SINCE_BOOT_SHIFT))
        ]


class RpiPmicSensor(PowerSensor):
    """Raspberry Pi 5 PMIC rails: the sum of V x I over the rails the PMIC supplies.

    The PMIC does not see the 5 V input itself, so USB devices, the fan and the PMIC's own
    conversion losses are not in the figure: it is a sum of measured rails, not board input.
    """

    name = "rpi-pmic"
    family = "rpi-pmic"
    min_interval_s = 0.2

    def __init__(self, run_command: RunCommand, rails: Dict[str, Tuple[float, float]]):
        self._run = run_command
        self.source = "measured_rail"
        self.rail = f"sum of {len(rails)} PMIC rails, excluding 5V input consumers (USB, fan)"

    @classmethod
    def probe(cls, sysfs_root: Path, run_command: RunCommand) -> Optional["RpiPmicSensor"]:
        try:
            output = run_command(list(PMIC_READ_ADC))
        except FileNotFoundError:
            return None
        except CommandError as exc:
            # Firmware without a PMIC ADC (every Pi before the 5) answers "error=... error_msg=...".
            if "error=" in exc.output:
                return None
            raise
        rails = parse_pmic_adc(output)
        if not rails:
            if "error=" in output or not output.strip():
                return None
            raise SensorError(f"'vcgencmd pmic_read_adc' printed no rails: {output.strip()[:200]!r}")
        return cls(run_command, rails)

    def measure(self) -> PowerMeasurement:
        output = self._run(list(PMIC_READ_ADC))
        rails = parse_pmic_adc(output)
        if not rails:
            raise SensorError(f"'vcgencmd pmic_read_adc' printed no rails: {output.strip()[:200]!r}")
        per_rail = {rail: volts * amps for rail, (volts, amps) in rails.items()}
        return PowerMeasurement(sum(per_rail.values()), per_rail)
