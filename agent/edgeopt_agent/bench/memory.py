"""The benchmark process's own memory: current and peak RSS, and its address-space limit."""
from __future__ import annotations

import sys
from typing import Dict, Optional

_MB = 1024 * 1024


def _proc_status() -> Dict[str, float]:
    """VmRSS/VmHWM/VmSize from /proc/self/status, in MB (empty where /proc does not exist)."""
    values = {}
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "VmHWM", "VmSize"):
                    values[key] = int(rest.split()[0]) / 1024.0  # reported in kB
    except OSError:
        pass
    return values


def current_rss_mb() -> Optional[float]:
    status = _proc_status()
    if "VmRSS" in status:
        return status["VmRSS"]
    try:
        import psutil
    except ImportError:
        return None
    return psutil.Process().memory_info().rss / _MB


def peak_rss_mb() -> Optional[float]:
    status = _proc_status()
    if "VmHWM" in status:
        return status["VmHWM"]
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / _MB if sys.platform == "darwin" else peak / 1024.0  # bytes on macOS, kB elsewhere


def limit_address_space(limit_mb: int) -> Optional[str]:
    """Cap this process's address space (RLIMIT_AS) at `limit_mb`.

    Returns None when the limit is in force, or a note saying why it could not be applied.
    Raises MemoryError when the process already maps more than the limit.
    """
    try:
        import resource
    except ImportError:
        return "memory limit not enforced: this platform has no RLIMIT_AS"
    mapped = _proc_status().get("VmSize")
    if mapped is not None and mapped >= limit_mb:
        raise MemoryError(
            f"the memory limit of {limit_mb} MB is below the {mapped:.0f} MB of address space the runtime "
            "maps before loading the model; raise the limit"
        )
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    soft = limit_mb * _MB
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    try:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    except (ValueError, OSError) as exc:
        return f"memory limit not enforced: setrlimit(RLIMIT_AS) failed: {exc}"
    return None
