"""CPU load, memory and disk use, from psutil (the agent extra)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Optional

from ..errors import MissingExtraError, require
from .base import RunCommand, Sensor, SensorError

MB = 1024 * 1024
GB = 1024 * MB


class SystemSensor(Sensor):
    name = "system"

    def __init__(self, psutil: Any, disk_path: str = "/"):
        self._psutil = psutil
        self._disk_path = disk_path
        # psutil measures CPU load between calls; the first call only starts the clock.
        psutil.cpu_percent(percpu=True)

    @classmethod
    def probe(cls, sysfs_root: Path, run_command: RunCommand) -> Optional["SystemSensor"]:
        try:
            psutil = require("psutil", "agent", "CPU load, memory and disk telemetry")
        except MissingExtraError as exc:
            raise SensorError(str(exc)) from None
        return cls(psutil)

    def read(self) -> Dict[str, Dict[str, Any]]:
        ps = self._psutil
        memory = ps.virtual_memory()
        swap = ps.swap_memory()
        disk = ps.disk_usage(self._disk_path)
        cpu: Dict[str, Any] = {"load_pct": ps.cpu_percent(percpu=True)}
        if hasattr(os, "getloadavg"):
            cpu["load_avg"] = [round(x, 2) for x in os.getloadavg()]
        return {
            "cpu": cpu,
            "memory": {
                "total_mb": round(memory.total / MB, 1),
                "available_mb": round(memory.available / MB, 1),
                "used_pct": memory.percent,
                "swap_used_mb": round(swap.used / MB, 1),
            },
            "disk": {
                "path": self._disk_path,
                "total_gb": round(disk.total / GB, 2),
                "free_gb": round(disk.free / GB, 2),
                "used_pct": disk.percent,
            },
        }
