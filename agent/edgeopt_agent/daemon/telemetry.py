"""The body of a telemetry message: the sensor snapshot plus what the fleet needs to interpret it."""
from __future__ import annotations

import os
import platform
import time
from typing import Any, Dict, Mapping, Optional

from .. import runtimes

# Distributions whose versions matter when comparing boards; looked up in package metadata,
# so reporting them does not import (and load into memory) the runtimes themselves.
_DISTRIBUTIONS = ("edgeopt", "paho-mqtt", "psutil") + runtimes.DISTRIBUTIONS


def versions() -> Dict[str, Optional[str]]:
    from importlib import metadata

    found: Dict[str, Optional[str]] = {}
    for name in _DISTRIBUTIONS:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    found["python"] = platform.python_version()
    found["os"] = platform.platform()
    found["machine"] = platform.machine()
    return found


class Telemetry:
    def __init__(self, sensors: Any, profile: Optional[str]):
        self._sensors = sensors
        self._profile = profile
        self._versions = versions()
        self._started = time.time()

    @property
    def agent_version(self) -> Optional[str]:
        return self._versions["edgeopt"]

    def body(self, agent_state: Mapping[str, Any]) -> Dict[str, Any]:
        body = dict(self._sensors.snapshot())  # its "throttle" section holds the health flags
        body["profile"] = self._profile
        body["versions"] = self._versions
        body["agent"] = {"pid": os.getpid(), "uptime_s": round(time.time() - self._started, 1), **agent_state}
        return body
