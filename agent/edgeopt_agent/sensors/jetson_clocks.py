"""Jetson GPU and memory (EMC) clocks and the nvpmodel power mode, and whether the clocks dropped.

GPU:  devfreq, /sys/class/devfreq/<gpu>/{cur,min,max}_freq in Hz. The GPU is the devfreq device
      whose device-tree node is named gpu (Nano, Orin on JetPack 6), gp10b (TX2), gv11b
      (Xavier) or ga10b (Orin on JetPack 5).
EMC:  debugfs, readable by root only: the BPMP clock on Xavier and Orin
      (/sys/kernel/debug/bpmp/debug/clk/emc/{rate,min_rate,max_rate}), the clock framework's
      on Nano (/sys/kernel/debug/clk/emc/clk_rate, limits in /sys/kernel/debug/tegra_bwmgr).
      Where the agent cannot read it, EMC is listed as unreadable and the rest carries on.
Mode: `nvpmodel -q` prints "NV Power Mode: <name>" and the mode's number on the next line,
      after a fan-mode line on some releases ("NV Fan Mode:quiet", "NVPM WARN: fan mode is not set!").

A clock dropped when its ceiling (max) is below what it was at discovery, or when it runs below
its floor (min): jetson_clocks sets min = max, so with locked clocks any drop shows. Choosing
another power mode is deliberate: when the mode changes, the ceilings seen then become the baseline.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from .base import (
    CommandError,
    Issue,
    RunCommand,
    Sensor,
    SensorError,
    describe_os_error,
    read_int,
    read_text,
    sys_path,
)

NVPMODEL_QUERY = ("nvpmodel", "-q")
GPU_NODE_NAMES = ("gpu", "gp10b", "gv11b", "ga10b")
_POWER_MODE = re.compile(r"NV Power Mode:\s*(\S.*?)\s*$")


@dataclass(frozen=True)
class PowerMode:
    name: str
    id: Optional[int]


def parse_nvpmodel(text: str) -> PowerMode:
    lines = [line.strip() for line in text.splitlines()]
    for index, line in enumerate(lines):
        match = _POWER_MODE.search(line)
        if match:
            following = lines[index + 1] if index + 1 < len(lines) else ""
            return PowerMode(match.group(1), int(following) if following.isdigit() else None)
    raise SensorError(f"unexpected 'nvpmodel -q' output: {text.strip()[:200]!r}")


@dataclass(frozen=True)
class ClockReading:
    cur_hz: int
    min_hz: Optional[int]
    max_hz: Optional[int]

    def to_mhz(self) -> Dict[str, Optional[int]]:
        return {"cur_mhz": _mhz(self.cur_hz), "min_mhz": _mhz(self.min_hz), "max_mhz": _mhz(self.max_hz)}


@dataclass(frozen=True)
class ClockDomain:
    """One clock: where its current rate and its limits are read (limits may be absent)."""

    name: str  # "gpu" | "emc"
    cur: Path
    min: Optional[Path]
    max: Optional[Path]

    def read(self) -> ClockReading:
        return ClockReading(
            read_int(self.cur),
            read_int(self.min) if self.min is not None and self.min.is_file() else None,
            read_int(self.max) if self.max is not None and self.max.is_file() else None,
        )


def find_gpu_devfreq(sysfs_root: Path) -> Optional[ClockDomain]:
    base = sys_path(sysfs_root, "sys/class/devfreq")
    if not base.is_dir():
        return None
    for entry in sorted(base.iterdir()):
        node = entry / "device" / "of_node" / "name"
        try:
            name = read_text(node).strip("\x00 \n") if node.is_file() else entry.name.rsplit(".", 1)[-1]
        except OSError as exc:
            raise SensorError(describe_os_error(node, exc)) from None
        if name in GPU_NODE_NAMES and (entry / "cur_freq").is_file():
            return ClockDomain("gpu", entry / "cur_freq", entry / "min_freq", entry / "max_freq")
    return None


def find_emc(sysfs_root: Path) -> Tuple[Optional[ClockDomain], Optional[str]]:
    """The EMC clock, or None with the reason it cannot be read (None, None: no EMC clock found)."""
    debug = sys_path(sysfs_root, "sys/kernel/debug")
    bpmp = debug / "bpmp/debug/clk/emc"
    if (bpmp / "rate").is_file():
        return ClockDomain("emc", bpmp / "rate", bpmp / "min_rate", bpmp / "max_rate"), None
    clk = debug / "clk/emc"
    if (clk / "clk_rate").is_file():
        bwmgr = debug / "tegra_bwmgr"
        return ClockDomain("emc", clk / "clk_rate", bwmgr / "emc_min_rate", bwmgr / "emc_max_rate"), None
    if debug.is_dir() and not _listable(debug):
        return None, f"{debug} (debugfs) is readable by root only: the EMC clock is not recorded"
    return None, None


def _listable(folder: Path) -> bool:
    try:
        next(iter(folder.iterdir()), None)
    except OSError:
        return False
    return True


class JetsonClocksSensor(Sensor):
    name = "jetson-clocks"

    def __init__(self, domains: List[ClockDomain], run_command: RunCommand, unreadable: Dict[str, str]):
        self._domains = domains
        self._run = run_command
        self._lock = threading.Lock()
        self._unreadable = dict(unreadable)
        self._mode, self._mode_reason = self._query_mode()
        self._baseline = self._ceilings()

    @classmethod
    def probe(cls, sysfs_root: Path, run_command: RunCommand) -> Optional["JetsonClocksSensor"]:
        gpu = find_gpu_devfreq(Path(sysfs_root))
        if gpu is None:
            return None
        try:
            gpu.read()
        except (OSError, SensorError) as exc:
            raise SensorError(_describe(gpu.cur, exc)) from None
        emc, emc_reason = find_emc(Path(sysfs_root))
        domains = [gpu] + ([emc] if emc is not None else [])
        return cls(domains, run_command, {"emc": emc_reason} if emc_reason else {})

    # -- reading -------------------------------------------------------------------------------
    def _readings(self) -> Dict[str, ClockReading]:
        readings = {}
        for domain in self._domains:
            try:
                readings[domain.name] = domain.read()
            except (OSError, SensorError) as exc:
                with self._lock:
                    self._unreadable[domain.name] = _describe(domain.cur, exc)
                continue
            with self._lock:
                self._unreadable.pop(domain.name, None)
        return readings

    def _ceilings(self) -> Dict[str, int]:
        return {name: r.max_hz for name, r in self._readings().items() if r.max_hz is not None}

    def _query_mode(self) -> Tuple[Optional[PowerMode], Optional[str]]:
        try:
            return parse_nvpmodel(self._run(list(NVPMODEL_QUERY))), None
        except FileNotFoundError:
            return None, "nvpmodel is not installed"
        except (CommandError, SensorError) as exc:
            return None, str(exc)

    def read(self) -> Dict[str, Dict[str, Any]]:
        mode, reason = self._query_mode()
        if mode is not None and self._mode is not None and mode != self._mode:
            self._baseline = self._ceilings()  # a new power mode sets new ceilings on purpose
        self._mode, self._mode_reason = mode, reason
        clocks = {name: reading.to_mhz() for name, reading in self._readings().items()}
        nvpmodel = {"mode": mode.name, "id": mode.id} if mode is not None else {"mode": None, "reason": reason}
        return {"clocks": clocks, "nvpmodel": nvpmodel}

    def unreadable_parts(self) -> Dict[str, str]:
        with self._lock:
            return dict(self._unreadable)

    # -- health --------------------------------------------------------------------------------
    def issues(self, throttle_c: Optional[float]) -> List[Issue]:
        found = []
        baseline = self._baseline
        for name, reading in self._readings().items():
            label = name.upper()
            was = baseline.get(name)
            if was is not None and reading.max_hz is not None and reading.max_hz < was:
                found.append(
                    Issue("throttled", f"{label} clock ceiling lowered to {_mhz(reading.max_hz)} MHz (was {_mhz(was)} MHz at start)")
                )
            if reading.min_hz is not None and reading.cur_hz < reading.min_hz:
                found.append(
                    Issue("throttled", f"{label} clock at {_mhz(reading.cur_hz)} MHz, below its floor of {_mhz(reading.min_hz)} MHz")
                )
        return found


def _mhz(hz: Optional[int]) -> Optional[int]:
    return None if hz is None else int(round(hz / 1_000_000))


def _describe(path: Path, exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return describe_os_error(Path(exc.filename) if exc.filename else path, exc)
    return str(exc)
