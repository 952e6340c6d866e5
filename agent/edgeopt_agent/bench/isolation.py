"""Run the benchmark process and bring back what it said, however it ended.

The child is a fresh interpreter (`python -m edgeopt_agent.bench.child`), so a segfault, a hang
or an out-of-memory in a runtime takes down only the child; the caller's threads (MQTT in the
daemon) are never forked. POSIX only: the child reports on an inherited pipe.
"""
from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

from .spec import BenchmarkSpec

Progress = Callable[[str], None]
_LOG_TAIL_BYTES = 16384
_LOG_TAIL_LINES = 6


@dataclass
class ChildOutcome:
    messages: List[Dict[str, Any]] = field(default_factory=list)
    returncode: Optional[int] = None
    timed_out: bool = False
    log_tail: str = ""

    def first(self, kind: str) -> Optional[Dict[str, Any]]:
        return next((m for m in self.messages if m.get("type") == kind), None)

    def last(self, kind: str) -> Optional[Dict[str, Any]]:
        return next((m for m in reversed(self.messages) if m.get("type") == kind), None)

    def all(self, kind: str) -> List[Dict[str, Any]]:
        return [m for m in self.messages if m.get("type") == kind]


def run_child(spec: BenchmarkSpec, progress: Optional[Progress] = None) -> ChildOutcome:
    """Run `spec` in a child process, within `spec.timeout_s` from start to exit."""
    outcome = ChildOutcome()
    deadline = time.monotonic() + spec.timeout_s
    read_fd, write_fd = os.pipe()
    try:
        with tempfile.TemporaryFile() as log:
            try:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "edgeopt_agent.bench.child", str(write_fd)],
                    stdin=subprocess.PIPE,
                    stdout=log,
                    stderr=log,
                    pass_fds=(write_fd,),
                )
            finally:
                os.close(write_fd)
            try:
                _send_spec(proc, spec)
                _collect(read_fd, deadline, outcome, progress)
                if not outcome.timed_out:
                    try:
                        proc.wait(timeout=max(deadline - time.monotonic(), 0.0))
                    except subprocess.TimeoutExpired:
                        outcome.timed_out = True
            finally:  # also on KeyboardInterrupt: never leave a child behind
                if proc.poll() is None:
                    proc.kill()
                outcome.returncode = proc.wait()
            outcome.log_tail = _tail(log)
    finally:
        os.close(read_fd)
    return outcome


def _send_spec(proc: subprocess.Popen, spec: BenchmarkSpec) -> None:
    try:
        proc.stdin.write(json.dumps(spec.to_dict()).encode("utf-8"))
        proc.stdin.close()
    except BrokenPipeError:
        pass  # the child died at once: its exit status says why


def _collect(read_fd: int, deadline: float, outcome: ChildOutcome, progress: Optional[Progress]) -> None:
    """Read the child's JSON lines until it closes the pipe or the deadline passes."""
    pending = b""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            outcome.timed_out = True
            return
        ready, _, _ = select.select([read_fd], [], [], remaining)
        if not ready:
            continue
        chunk = os.read(read_fd, 65536)
        if not chunk:
            return
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if not line.strip():
                continue
            message = json.loads(line)
            outcome.messages.append(message)
            if progress is not None and message.get("type") == "phase":
                progress(message["text"])


def _tail(log) -> str:
    """The lines of the child's output that say why it died, joined into one line."""
    log.seek(0, os.SEEK_END)
    size = log.tell()
    log.seek(max(0, size - _LOG_TAIL_BYTES))
    lines = [line.strip() for line in log.read().decode("utf-8", errors="replace").splitlines() if line.strip()]
    fatal = next((i for i, line in enumerate(lines) if line.startswith("Fatal Python error")), None)
    if fatal is not None:  # faulthandler: the error, then the innermost frame
        frames = [line for line in lines[fatal + 1:] if line.startswith("File ")]
        return " | ".join(lines[fatal:fatal + 1] + frames[:1])
    return " | ".join(lines[-_LOG_TAIL_LINES:])
