"""What every sensor plug-in shares: the probe/read interface, issues, and sysfs/command helpers.

A sensor class answers three questions: is it on this board (`probe`, once, at discovery), what
does it read now (`read`), and is anything wrong now (`issues`). `probe` returns an instance, or
None when the hardware is simply absent, or raises when it is there but unusable: the suite then
lists it as disabled with the exception's message as the reason.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Dict, List, NamedTuple, Optional, Sequence, Tuple

RunCommand = Callable[[Sequence[str]], str]

COMMAND_TIMEOUT_S = 5.0


class SensorError(Exception):
    """A sensor is present but cannot be used; the message is the reason shown to the user."""


class CommandError(SensorError):
    """A helper command (vcgencmd, ...) ran but failed."""

    def __init__(self, argv: Sequence[str], returncode: Optional[int], output: str):
        self.argv = list(argv)
        self.returncode = returncode
        self.output = output.strip()
        status = "timed out" if returncode is None else f"exited with {returncode}"
        detail = f": {self.output.splitlines()[0]}" if self.output else ""
        super().__init__(f"'{' '.join(self.argv)}' {status}{detail}")


def run_command(argv: Sequence[str]) -> str:
    """Run a short helper command and return its stdout.

    Raises FileNotFoundError when the program is not installed (the sensor is absent) and
    CommandError when it runs but fails.
    """
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise CommandError(argv, None, _text(exc.stdout) + _text(exc.stderr)) from exc
    if done.returncode != 0:
        raise CommandError(argv, done.returncode, done.stdout + done.stderr)
    return done.stdout


def _text(data: Any) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else str(data)


@dataclass(frozen=True)
class Issue:
    """A condition that makes a measurement taken while it holds untrustworthy."""

    kind: str  # "throttled" | "under_voltage"
    reason: str


def summarize(issues: Sequence[Issue]) -> Dict[str, Any]:
    """Whether any of `issues` is throttling or under-voltage, and their reasons once each."""
    return {
        "throttled": any(i.kind == "throttled" for i in issues),
        "under_voltage": any(i.kind == "under_voltage" for i in issues),
        "reasons": list(dict.fromkeys(i.reason for i in issues)),
    }


class Sensor:
    """Base of every sensor plug-in."""

    name: ClassVar[str] = ""

    @classmethod
    def probe(cls, sysfs_root: Path, run_command: RunCommand) -> Optional["Sensor"]:
        raise NotImplementedError

    def read(self) -> Dict[str, Dict[str, Any]]:
        """Telemetry as {section: {key: value}}; the suite merges sections from all sensors."""
        return {}

    def issues(self, throttle_c: Optional[float]) -> List[Issue]:
        return []

    def latched(self) -> List[Issue]:
        """Conditions the hardware latched since boot (reason: the condition's name), so a short
        event between two checks is still seen: one that appears during a run happened in it."""
        return []

    def unreadable_parts(self) -> Dict[str, str]:
        """Parts (a zone, a rail) that failed their last read while the rest still work."""
        return {}

    def close(self) -> None:
        """Release what the sensor holds (processes, library handles)."""


class PowerMeasurement(NamedTuple):
    watts: float
    rails: Dict[str, float]  # per-rail watts, for telemetry


class PowerSensor(Sensor):
    """A sensor that measures power, either as instantaneous watts or as an energy counter.

    `family` is the profile's name for this kind of sensor (DeviceProfile.power_sensor).
    `source` says what the figure covers: "board_total" (the whole board's input) or
    "measured_rail" (one or more rails inside it). `rail` names what was measured.
    """

    family: ClassVar[str] = ""
    is_counter: ClassVar[bool] = False
    # Sensors that cost a process spawn per read must not be polled fast during a benchmark.
    min_interval_s: ClassVar[float] = 0.0
    source: str = "measured_rail"
    rail: str = ""

    def measure(self) -> PowerMeasurement:
        """Instantaneous power now; only for sensors with is_counter False."""
        raise NotImplementedError

    def joules(self) -> float:
        """Energy since discovery, monotonic (wrap-around already undone); counters only."""
        raise NotImplementedError


def read_text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace").strip()


def read_int(path: Path) -> int:
    text = read_text(path)
    try:
        # Some drivers append a unit ("32760 ma"); the number comes first.
        return int(text.split()[0])
    except (ValueError, IndexError):
        raise SensorError(f"{path} holds {text!r}, not an integer") from None


def must_read_int(path: Path) -> int:
    """read_int for a file the sensor cannot work without: any failure is a SensorError."""
    try:
        return read_int(path)
    except OSError as exc:
        raise SensorError(describe_os_error(path, exc)) from None


def sys_path(sysfs_root: Path, relative: str) -> Path:
    return Path(sysfs_root) / relative.lstrip("/")


def thermal_class_entries(
    sysfs_root: Path, prefix: str, required_file: str, wanted: Callable[[str], bool], type_optional: bool = False
) -> List[Tuple[str, Path]]:
    """The folders PREFIX<N> in /sys/class/thermal that hold `required_file` and whose type is
    `wanted`, as (name, folder) in the order of N. A name is the folder's type, with _N added when
    two folders share a type. Without `type_optional` an unreadable type file is a SensorError;
    with it, a missing one names the entry by its folder.
    """
    base = sys_path(sysfs_root, "sys/class/thermal")
    if not base.is_dir():
        return []
    pattern = re.compile(rf"^{re.escape(prefix)}(\d+)$")
    found = []
    for entry in base.iterdir():
        match = pattern.match(entry.name)
        if not match or not (entry / required_file).is_file():
            continue
        try:
            kind = entry.name if type_optional and not (entry / "type").is_file() else read_text(entry / "type")
        except OSError as exc:
            raise SensorError(describe_os_error(entry / "type", exc)) from None
        if wanted(kind):
            found.append((int(match.group(1)), kind, entry))
    found.sort()
    kinds = [kind for _, kind, _ in found]
    return [(kind if kinds.count(kind) == 1 else f"{kind}_{index}", entry) for index, kind, entry in found]


def describe_os_error(path: Path, exc: OSError) -> str:
    if isinstance(exc, PermissionError):
        return f"permission denied reading {path}"
    return f"cannot read {path}: {exc.strerror or exc}"
