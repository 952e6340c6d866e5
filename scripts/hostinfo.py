"""What machine the host is, in words for benchmark records (the scripts in scripts/ use it)."""
from __future__ import annotations

import platform
from pathlib import Path

from edgeopt_agent.cpu_check import cpu_flags

# The flags that decide which INT8 kernels onnxruntime runs (and so what a benchmark measured).
INT8_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8")


def cpu_model() -> str:
    """The CPU's marketing name (from /proc/cpuinfo on Linux), else what platform knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def int8_flags() -> str:
    """Each of INT8_FLAGS with yes or no, as this CPU reports them."""
    flags = cpu_flags()
    return ", ".join(f"{flag} {'yes' if flag in flags else 'no'}" for flag in INT8_FLAGS)
