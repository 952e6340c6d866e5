"""Import onnxruntime with its telemetry off: edgeopt never lets it write or send usage events.

onnxruntime 1.2x+ wheels for Linux and macOS carry 1DS telemetry: importing the package creates
a device id and an event database under ~/.cache/Microsoft/DeveloperTools/.onnxruntime (or
$XDG_CACHE_HOME). `disable_telemetry_events()` stops later events only, after that file already
exists; the environment variable, read once when the runtime initialises, keeps it from starting.
So the variable is set before the first import, and the call is made as well for builds that
only know the call. Every place edgeopt imports onnxruntime goes through here.
"""
from __future__ import annotations

import os
import sys
from types import ModuleType

from ...errors import require

# Read by onnxruntime's non-Windows telemetry provider at initialisation: the first is the name
# 1.32 reads; upstream later documented the second as the full opt-out, so both are set.
TELEMETRY_OFF = {"ORT_DISABLE_TELEMETRY": "1", "ORT_TELEMETRY_DISABLED": "1"}


def import_onnxruntime(extra: str, purpose: str = "") -> ModuleType:
    """`require("onnxruntime", ...)` with telemetry switched off first."""
    if "onnxruntime" not in sys.modules:
        os.environ.update(TELEMETRY_OFF)
    ort = require("onnxruntime", extra, purpose)
    disable = getattr(ort, "disable_telemetry_events", None)
    if disable is not None:
        disable()
    return ort
