"""Whether a device profile describes the CPU the agent runs on.

An agent started with the wrong profile (`--profile rpi4` on an x86 box) reports measurements that
the fleet would file, and `edgeopt analyze --db` would calibrate, as that board's. So the agent
compares its profile with this CPU once at start: the architecture (`platform.machine()`), the
number of cores present (`/sys/devices/system/cpu/present`, which counts cores a power mode took
offline; else the processors of `/proc/cpuinfo`) and the ISA features the profile lists (the
kernel's `flags` on x86, `Features` on ARM, in `/proc/cpuinfo`). It warns once and says what
differs in its retained status (`profile_check`, docs/PROTOCOL.md).

Like the sensors, everything is read under a root folder (`read_cpu(root)`), so tests use fake
trees. What cannot be read is listed as unchecked, never taken as a mismatch.
"""
from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, FrozenSet, List, Optional, Tuple, Union

from .profiles import DeviceProfile

# A profile's ISA feature -> the kernel's names for it (any one will do). The arm64 kernel calls
# NEON "asimd", the dot product "asimddp" and FP16 arithmetic "asimdhp"; a 32-bit ARM kernel says
# "neon". Every other feature (crc32, atomics, sse4_2, avx2, fma, avx512_vnni, avx_vnni...) is
# listed under the profile's own name.
KERNEL_NAMES: Dict[str, Tuple[str, ...]] = {
    "neon": ("asimd", "neon"),
    "dotprod": ("asimddp",),
    "fp16": ("asimdhp",),
}


@dataclass(frozen=True)
class CpuFacts:
    """What the agent found out about its CPU; None where it could not be read."""

    machine: str
    cores: Optional[int]
    features: Optional[FrozenSet[str]]
    cores_from: Optional[str] = None  # the file the core count came from


def read_cpu(root: Union[str, Path] = "/", machine: Optional[str] = None) -> CpuFacts:
    """This CPU's architecture, cores and feature flags, read under `root` (a fake tree in tests)."""
    root = Path(root)
    cpuinfo = _read(root / "proc" / "cpuinfo")
    features = _features(cpuinfo) if cpuinfo is not None else None
    cores = _present_cores(_read(root / "sys" / "devices" / "system" / "cpu" / "present"))
    cores_from: Optional[str] = "/sys/devices/system/cpu/present" if cores is not None else None
    if cores is None and cpuinfo is not None:
        cores = sum(1 for line in cpuinfo.splitlines() if line.split(":", 1)[0].strip() == "processor") or None
        cores_from = "/proc/cpuinfo" if cores is not None else None
    return CpuFacts((machine or platform.machine()).lower(), cores, features, cores_from)


def check_profile(profile: DeviceProfile, cpu: CpuFacts) -> Dict[str, Any]:
    """The status field `profile_check`: `ok` (no difference found), this CPU's `machine` and `cores`,
    `mismatch` (one line per difference) and `unchecked` (what could not be compared, and why)."""
    mismatch: List[str] = []
    unchecked: List[str] = []
    same_arch = profile.matches_host(cpu.machine)
    if not same_arch:
        mismatch.append(f"arch: profile {profile.name} is {profile.cpu.arch}, this CPU is {cpu.machine}")
    if cpu.cores is None:
        unchecked.append("cores: neither /sys/devices/system/cpu/present nor /proc/cpuinfo could be read")
    elif profile.cpu.cores_vary:
        unchecked.append(f"cores: profile {profile.name} is generic (its boards' core counts differ)")
    elif cpu.cores != profile.cpu.cores:
        mismatch.append(f"cores: profile {profile.name} has {profile.cpu.cores}, this CPU has {cpu.cores}")
    if not same_arch:
        unchecked.append("isa_features: not compared across architectures")
    elif cpu.features is None:
        unchecked.append("isa_features: /proc/cpuinfo could not be read or lists no flags")
    else:
        lacking = [f for f in profile.cpu.isa_features if not _has(cpu.features, f)]
        if lacking:
            mismatch.append(f"isa_features: profile {profile.name} relies on {', '.join(lacking)}, "
                            "which this CPU does not list")
    return {"ok": not mismatch, "machine": cpu.machine, "cores": cpu.cores, "mismatch": mismatch,
            "unchecked": unchecked}


def warning(profile: DeviceProfile, check: Dict[str, Any]) -> Optional[str]:
    """The one start-up line for a profile that does not describe this CPU (None when it does)."""
    if check.get("ok"):
        return None
    return (f"PROFILE MISMATCH: profile {profile.name} does not describe this CPU ({'; '.join(check['mismatch'])}); "
            f"its results are filed under {profile.name} but `edgeopt analyze --db` will not calibrate "
            f"{profile.name} from them: start the agent with this board's profile (--profile NAME, "
            "see `edgeopt devices`)")


def _read(path: Path) -> Optional[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> FrozenSet[str]:
    """This machine's first CPU's feature flags as the kernel lists them (empty where there is no
    /proc, or it lists none): what the host's INT8 kernels and its timing evidence depend on."""
    text = _read(cpuinfo)
    return (_features(text) if text is not None else None) or frozenset()


def _features(cpuinfo: str) -> Optional[FrozenSet[str]]:
    """The first CPU's flags (x86 `flags`, ARM `Features`; a big.LITTLE board lists the same for all);
    None where cpuinfo lists none (some virtual and emulated kernels): unchecked, not lacking."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return None


def _present_cores(text: Optional[str]) -> Optional[int]:
    """How many CPUs a kernel cpu list ("0-3", "0-3,6-7", "0") names; None when it is not one."""
    if not text or not text.strip():
        return None
    count = 0
    try:
        for part in text.strip().split(","):
            low, _, high = part.partition("-")
            first, last = int(low), int(high or low)
            if last < first:
                return None
            count += last - first + 1
    except ValueError:
        return None
    return count


def _has(features: FrozenSet[str], feature: str) -> bool:
    return any(name in features for name in KERNEL_NAMES.get(feature, (feature,)))
