"""Jetson `tegrastats`: a line parser, and a power sensor for boards whose INA3221 sysfs files
the agent cannot read (a container without /sys access, a restricted kernel).

Line formats (one line per interval):
  JetPack 4:   RAM 2448/3956MB (lfb 1x2MB) ... CPU [30%@1036,off,...] ... CPU@60.5C ...
               POM_5V_IN 2906/2906 POM_5V_GPU 0/0 POM_5V_CPU 1078/1205
  JetPack 5/6: 04-27-2026 15:00:54 RAM 779/7620MB ... GR3D_FREQ 0% cpu@50.125C ...
               VDD_IN 6626mW/6625mW VDD_CPU_GPU_CV 1228mW/1230mW VDD_SOC 2380mW/2380mW
Rails read "now/average", in milliwatts in both formats.
"""

from __future__ import annotations

import atexit
import re
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from .base import PowerMeasurement, PowerSensor, RunCommand, SensorError
from .ina3221 import combine_rails, describe_rails

_RAM = re.compile(r"\bRAM (\d+)/(\d+)MB")
_CPUS = re.compile(r"\bCPU \[(.*?)\](?:@(\d+))?")
_CPU_ENTRY = re.compile(r"^(\d+)%(?:@(\d+))?$")
_GPU = re.compile(r"\bGR3D_FREQ (\d+)%(?:@\[?(\d+))?")
_TEMP = re.compile(r"\b(\w+)@(-?\d+(?:\.\d+)?)C\b")
_RAIL = re.compile(r"\b([A-Z][A-Z0-9_]*) (\d+)(?:mW)?/(\d+)(?:mW)?(?!\w)")
_NOT_RAILS = ("RAM", "SWAP", "IRAM", "NC")


@dataclass(frozen=True)
class TegrastatsLine:
    ram_used_mb: Optional[int] = None
    ram_total_mb: Optional[int] = None
    # Per core: (load %, MHz or None); None for a core that is off.
    cpus: Tuple[Optional[Tuple[int, Optional[int]]], ...] = ()
    gpu_load_pct: Optional[int] = None
    gpu_freq_mhz: Optional[int] = None
    temps_c: Dict[str, float] = field(default_factory=dict)
    rails_mw: Dict[str, Tuple[int, int]] = field(default_factory=dict)  # rail -> (now, average)


def parse_tegrastats_line(line: str) -> TegrastatsLine:
    ram = _RAM.search(line)
    gpu = _GPU.search(line)
    return TegrastatsLine(
        ram_used_mb=int(ram.group(1)) if ram else None,
        ram_total_mb=int(ram.group(2)) if ram else None,
        cpus=_parse_cpus(line),
        gpu_load_pct=int(gpu.group(1)) if gpu else None,
        gpu_freq_mhz=int(gpu.group(2)) if gpu and gpu.group(2) else None,
        temps_c={name: float(value) for name, value in _TEMP.findall(line)},
        rails_mw={
            name: (int(now), int(avg)) for name, now, avg in _RAIL.findall(line) if name not in _NOT_RAILS
        },
    )


def _parse_cpus(line: str) -> Tuple[Optional[Tuple[int, Optional[int]]], ...]:
    match = _CPUS.search(line)
    if not match:
        return ()
    shared_mhz = int(match.group(2)) if match.group(2) else None
    cpus: List[Optional[Tuple[int, Optional[int]]]] = []
    for entry in match.group(1).split(","):
        core = _CPU_ENTRY.match(entry.strip())
        if core:
            cpus.append((int(core.group(1)), int(core.group(2)) if core.group(2) else shared_mhz))
        else:
            cpus.append(None)
    return tuple(cpus)


class TegrastatsStream:
    """A running `tegrastats --interval MS`, keeping the latest parsed line."""

    def __init__(self, argv: Sequence[str]):
        self._process = subprocess.Popen(
            list(argv), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1
        )
        self._cond = threading.Condition()
        self._latest: Optional[Tuple[float, TegrastatsLine]] = None
        self._reader = threading.Thread(target=self._read_lines, name="tegrastats-reader", daemon=True)
        self._reader.start()
        atexit.register(self.stop)

    def _read_lines(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            parsed = parse_tegrastats_line(line)
            with self._cond:
                self._latest = (time.monotonic(), parsed)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def latest(self, max_age_s: float) -> TegrastatsLine:
        """The newest line, waiting up to max_age_s for one that is at most that old."""
        deadline = time.monotonic() + max_age_s
        with self._cond:
            while True:
                now = time.monotonic()
                if self._latest is not None and now - self._latest[0] <= max_age_s:
                    return self._latest[1]
                if self._process.poll() is not None:
                    raise SensorError(f"tegrastats exited with {self._process.returncode}")
                if now >= deadline:
                    raise SensorError(f"tegrastats printed nothing for {max_age_s:g} s")
                self._cond.wait(deadline - now)

    def stop(self) -> None:
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        atexit.unregister(self.stop)


class TegrastatsSensor(PowerSensor):
    name = "tegrastats"
    family = "ina3221"
    INTERVAL_MS = 100

    def __init__(self, stream: TegrastatsStream, rails: List[str]):
        self._stream = stream
        self.source, self.rail = describe_rails(rails)
        self.rail += " (tegrastats)"

    @classmethod
    def probe(cls, sysfs_root: Path, run_command: RunCommand) -> Optional["TegrastatsSensor"]:
        program = shutil.which("tegrastats")
        if program is None:
            return None
        stream = TegrastatsStream([program, "--interval", str(cls.INTERVAL_MS)])
        try:
            rails = list(stream.latest(max_age_s=3.0).rails_mw)
        except SensorError:
            stream.stop()
            raise
        if not rails:
            stream.stop()
            raise SensorError("tegrastats reports no power rails on this board")
        return cls(stream, rails)

    def measure(self) -> PowerMeasurement:
        line = self._stream.latest(max_age_s=max(2.0, 5 * self.INTERVAL_MS / 1000.0))
        rails = {name: now / 1000.0 for name, (now, _) in line.rails_mw.items()}
        if not rails:
            raise SensorError("tegrastats stopped reporting power rails")
        watts, _, _ = combine_rails(rails)
        return PowerMeasurement(watts, rails)

    def close(self) -> None:
        self._stream.stop()
