"""x86 RAPL package energy counters through powercap.

/sys/class/powercap/intel-rapl:N is one top-level domain (name "package-N", or "psys" for the
platform on some laptops); energy_uj counts microjoules and wraps to zero after
max_energy_range_uj. AMD Zen CPUs appear under the same intel-rapl names. Only package domains
are summed: they cover cores, caches and the uncore, not DRAM or the rest of the board.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from .base import (
    PowerSensor,
    RunCommand,
    SensorError,
    describe_os_error,
    must_read_int,
    read_int,
    read_text,
    sys_path,
)

_TOP_LEVEL_ZONE = re.compile(r"^intel-rapl:\d+$")


class _Counter:
    """One wrapping counter turned into a monotonic total."""

    def __init__(self, path: Path, max_range_uj: int, start_uj: int):
        self.path = path
        self.max_range_uj = max_range_uj
        self.last_uj = start_uj
        self.total_uj = 0

    def advance(self) -> None:
        now = must_read_int(self.path)
        if now >= self.last_uj:
            self.total_uj += now - self.last_uj
        else:
            self.total_uj += self.max_range_uj - self.last_uj + now
        self.last_uj = now


class RaplSensor(PowerSensor):
    name = "rapl"
    family = "rapl"
    is_counter = True

    def __init__(self, counters: Dict[str, _Counter]):
        self._counters = counters
        self._lock = threading.Lock()
        self.source = "measured_rail"
        self.rail = "+".join(counters) + " (CPU package)"

    @classmethod
    def probe(cls, sysfs_root: Path, run_command: RunCommand) -> Optional["RaplSensor"]:
        base = sys_path(sysfs_root, "sys/class/powercap")
        if not base.is_dir():
            return None
        packages: List[Tuple[str, Path]] = []
        for zone in sorted(base.iterdir(), key=lambda p: p.name):
            if not _TOP_LEVEL_ZONE.match(zone.name) or not (zone / "energy_uj").exists():
                continue
            try:
                name = read_text(zone / "name")
            except OSError as exc:
                raise SensorError(describe_os_error(zone / "name", exc)) from None
            if name.startswith("package"):
                packages.append((name, zone))
        if not packages:
            return None
        counters = {}
        for name, zone in packages:
            energy = zone / "energy_uj"
            try:
                counters[name] = _Counter(energy, read_int(zone / "max_energy_range_uj"), read_int(energy))
            except PermissionError:
                raise SensorError(
                    f"permission denied reading {energy} (RAPL counters are root-only on current"
                    " kernels: run the agent as root or grant it read access)"
                ) from None
            except OSError as exc:
                raise SensorError(describe_os_error(energy, exc)) from None
        return cls(counters)

    def joules(self) -> float:
        with self._lock:
            for counter in self._counters.values():
                counter.advance()
            return sum(c.total_uj for c in self._counters.values()) / 1e6
