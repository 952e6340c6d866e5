"""Facts about processes from /proc (Linux): when one started, its command line, its state, and which
boot this is. Without /proc each says it does not know (None or empty)."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

PROC = Path("/proc")


def process_start(pid: int) -> Optional[int]:
    """When `pid` started, in clock ticks since boot (field 22 of /proc/PID/stat); None if unknown."""
    try:
        return int(stat_fields(pid)[19])
    except (IndexError, ValueError):
        return None


def process_cmdline(pid: int) -> List[str]:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def boot_id() -> Optional[str]:
    try:
        return (PROC / "sys" / "kernel" / "random" / "boot_id").read_text().strip()
    except OSError:
        return None


def stat_fields(pid: int) -> List[bytes]:
    """/proc/PID/stat from field 3 (state) on; [] if there is no such process."""
    try:
        stat = (PROC / str(pid) / "stat").read_bytes()
    except OSError:
        return []
    # The name (field 2) is in parentheses and may itself hold spaces and parentheses.
    return stat[stat.rfind(b")") + 2:].split()
