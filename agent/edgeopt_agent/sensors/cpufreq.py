"""CPU clocks per core from cpufreq, and whether their ceiling dropped since the agent started.

scaling_max_freq is the policy's ceiling: the user's power mode (nvpmodel, governors) sets it,
and thermal or power capping lowers it further. The ceiling seen at discovery is the baseline,
so a deliberate low-power mode is not reported as throttling but a drop during a run is.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict, List, Optional

from .base import Issue, RunCommand, Sensor, SensorError, read_int, sys_path

_CPU_DIR = re.compile(r"^cpu(\d+)$")


class CpuFreqSensor(Sensor):
    name = "cpufreq"

    def __init__(self, cores: Dict[int, Path]):
        self._cores = cores
        self._count = max(cores) + 1
        self._baseline_max = {cpu: self._khz(path / "scaling_max_freq") for cpu, path in cores.items()}

    @classmethod
    def probe(cls, sysfs_root: Path, run_command: RunCommand) -> Optional["CpuFreqSensor"]:
        base = sys_path(sysfs_root, "sys/devices/system/cpu")
        if not base.is_dir():
            return None
        cores = {}
        for entry in base.iterdir():
            match = _CPU_DIR.match(entry.name)
            if match and (entry / "cpufreq" / "scaling_cur_freq").is_file():
                cores[int(match.group(1))] = entry / "cpufreq"
        if not cores:
            return None
        try:
            return cls(dict(sorted(cores.items())))
        except OSError as exc:
            raise SensorError(f"cannot read cpufreq: {exc.strerror or exc}") from None

    @staticmethod
    def _khz(path: Path) -> Optional[int]:
        return read_int(path) if path.is_file() else None

    def _per_core(self, filename: str) -> List[Optional[int]]:
        values: List[Optional[int]] = [None] * self._count
        for cpu, path in self._cores.items():
            try:
                khz = self._khz(path / filename)
            except OSError:
                # A core taken offline loses its cpufreq files; it reads as None, not an error.
                khz = None
            values[cpu] = None if khz is None else khz // 1000
        return values

    def read(self) -> Dict[str, Dict[str, Any]]:
        return {
            "cpu": {
                "freq_mhz": self._per_core("scaling_cur_freq"),
                "max_freq_mhz": self._per_core("scaling_max_freq"),
                "hw_max_freq_mhz": self._per_core("cpuinfo_max_freq"),
            }
        }

    def issues(self, throttle_c: Optional[float]) -> List[Issue]:
        lowered: Dict[tuple, List[int]] = {}
        ceilings = self._per_core("scaling_max_freq")
        for cpu, baseline_khz in self._baseline_max.items():
            now_mhz = ceilings[cpu]
            if baseline_khz is not None and now_mhz is not None and now_mhz < baseline_khz // 1000:
                lowered.setdefault((now_mhz, baseline_khz // 1000), []).append(cpu)
        return [
            Issue(
                "throttled",
                f"cpu {','.join(map(str, cpus))} clock ceiling lowered to {now} MHz (was {was} MHz at start)",
            )
            for (now, was), cpus in lowered.items()
        ]
