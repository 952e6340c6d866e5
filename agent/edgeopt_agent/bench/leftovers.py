"""A note on disk of the benchmark child now running, so the next agent can end one left behind.

The child normally dies with the agent (parent_watch.py). Should one survive anyway, the agent
started next reads the note and kills the process only when it is provably the same one: same
boot, same start time (from /proc, so a reused pid never matches) and the benchmark child's
command line. Without /proc nothing is recorded and nothing is killed.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import time
from pathlib import Path
from typing import List, Optional

from ..files import write_atomically
from ..processes import PROC, boot_id, process_cmdline, process_start, stat_fields

CHILD_MODULE = "edgeopt_agent.bench.child"
RECORD_FILE = "bench-child.json"
log = logging.getLogger(__name__)
_GONE_WAIT_S = 2.0


def is_benchmark_child(pid: int, start: int, boot: Optional[str]) -> bool:
    """Whether `pid` is still the benchmark child that started at `start` ticks in boot `boot`."""
    if boot is None or boot != boot_id() or process_start(pid) != start:
        return False
    command = process_cmdline(pid)
    return any(part == CHILD_MODULE for part in command)


class ChildRecord:
    """The file naming the benchmark child this agent is running, if any."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def started(self, pid: int) -> None:
        start = process_start(pid)
        if start is None:  # no /proc: nothing to prove identity with later
            return
        note = {"pid": pid, "start": start, "boot_id": boot_id(), "recorded_at": round(time.time(), 3)}
        try:
            write_atomically(self.path, json.dumps(note))
        except OSError as exc:  # the benchmark still runs; only the clean-up after a crash is lost
            log.warning("could not note the benchmark child in %s: %s", self.path, exc)

    def ended(self) -> None:
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("could not remove %s: %s", self.path, exc)

    def reap(self) -> Optional[str]:
        """Kill the recorded child, and what it started, if still running; say what was done.

        None: nothing of it was left. The child leads its own session (sid = its pid), so a helper
        it started is found by that sid even once the child itself is gone: while any member is
        alive, no new session can take that number.
        """
        try:
            note = json.loads(self.path.read_text())
            pid, start, boot = int(note["pid"]), int(note["start"]), note.get("boot_id")
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self.ended()
            return f"ignored an unreadable note of a benchmark child ({exc})"
        if boot is None or boot != boot_id():  # rebooted since: nothing of it can be running
            self.ended()
            return None
        leader = is_benchmark_child(pid, start, boot)
        if not leader and process_start(pid) is not None and not _is_zombie(pid):
            self.ended()  # the number belongs to another process now, and so would its session
            return None
        left = ([pid] if leader else []) + [p for p in session_members(pid, start) if p != pid]
        for each in left:
            _kill(each)
        gone = all(_wait_gone(each) for each in left)
        self.ended()
        if not left:
            return None
        recorded = note.get("recorded_at")
        since = f", started {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(recorded))} UTC" if recorded else ""
        state = "was still running" if leader else "had ended, but processes it started were still running"
        outcome = "killed" if gone else "sent SIGKILL to, but could not yet see the end of,"
        return (f"a benchmark child left by an earlier agent (pid {pid}{since}) {state}; "
                f"{outcome} pid(s) {', '.join(map(str, left))}")


def session_members(sid: int, not_before: int) -> List[int]:
    """Live processes in session `sid` that started no earlier than `not_before` ticks."""
    members = []
    try:
        entries = list(PROC.iterdir())
    except OSError:
        return members
    for entry in entries:
        if not entry.name.isdigit():
            continue
        fields = stat_fields(int(entry.name))
        try:
            if fields and fields[0] != b"Z" and int(fields[3]) == sid and int(fields[19]) >= not_before:
                members.append(int(entry.name))
        except (IndexError, ValueError):
            continue
    return sorted(members)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _wait_gone(pid: int) -> bool:
    """Until the process is gone or a zombie (its parent, if any, reaps it)."""
    deadline = time.monotonic() + _GONE_WAIT_S
    while time.monotonic() < deadline:
        if _is_zombie(pid):
            return True
        time.sleep(0.02)
    return False


def _is_zombie(pid: int) -> bool:
    """True also when there is no such process."""
    fields = stat_fields(pid)
    return not fields or fields[0] == b"Z"
