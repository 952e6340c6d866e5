"""Run the benchmark process and bring back what it said, however it ended.

The child is a fresh interpreter (`python -m edgeopt_agent.bench.child`), so a segfault, a hang
or an out-of-memory in a runtime takes down only the child; the caller's threads (MQTT in the
daemon) are never forked. POSIX only: the child reports on an inherited pipe.

The child leads its own process group, so ending it ends whatever it started, and it dies with
this process (parent_watch.py). A ChildRecord set for the calling thread (`recording_children`)
notes the running child on disk so that an agent started after a crash can end a survivor.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional

from .leftovers import ChildRecord
from .spec import BenchmarkSpec

ProgressTextCallback = Callable[[str], None]
_LOG_TAIL_BYTES = 16384
_LOG_TAIL_LINES = 6
_thread_state = threading.local()


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


@contextmanager
def recording_children(record: Optional[ChildRecord]) -> Iterator[None]:
    """Within this block, children started by `run_child` on this thread are noted in `record`."""
    previous = getattr(_thread_state, "record", None)
    _thread_state.record = record
    try:
        yield
    finally:
        _thread_state.record = previous


def run_child(spec: BenchmarkSpec, progress: Optional[ProgressTextCallback] = None) -> ChildOutcome:
    """Run `spec` in a child process, within `spec.timeout_s` from start to exit."""
    outcome = ChildOutcome()
    deadline = time.monotonic() + spec.timeout_s
    record: Optional[ChildRecord] = getattr(_thread_state, "record", None)
    read_fd, write_fd = os.pipe()
    watch_read, watch_write = os.pipe()  # never written: it closes when this process ends
    try:
        with tempfile.TemporaryFile() as log:
            try:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "edgeopt_agent.bench.child", str(write_fd), str(watch_read), str(os.getpid())],
                    stdin=subprocess.PIPE,
                    stdout=log,
                    stderr=log,
                    pass_fds=(write_fd, watch_read),
                    start_new_session=True,
                )
            finally:
                os.close(write_fd)
                os.close(watch_read)
            try:
                if record is not None:
                    record.started(proc.pid)
                _send_spec(proc, spec)
                _collect(read_fd, deadline, outcome, progress)
                if not outcome.timed_out:
                    try:
                        proc.wait(timeout=max(deadline - time.monotonic(), 0.0))
                    except subprocess.TimeoutExpired:
                        outcome.timed_out = True
            finally:  # also on KeyboardInterrupt: never leave a child behind
                if proc.poll() is None:
                    _kill_group(proc)
                outcome.returncode = proc.wait()
                if record is not None:
                    record.ended()
            outcome.log_tail = _tail(log)
    finally:
        os.close(read_fd)
        os.close(watch_write)
    return outcome


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill the child and every process in its group (it leads one; it is not reaped yet)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    except PermissionError:  # not our group after all (cannot happen while unreaped): the child only
        proc.kill()


def _send_spec(proc: subprocess.Popen, spec: BenchmarkSpec) -> None:
    try:
        proc.stdin.write(json.dumps(spec.to_dict()).encode("utf-8"))
        proc.stdin.close()
    except BrokenPipeError:
        pass  # the child died at once: its exit status says why


def _collect(read_fd: int, deadline: float, outcome: ChildOutcome, progress: Optional[ProgressTextCallback]) -> None:
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


def _is_import_machinery(frame: str) -> bool:
    """A faulthandler frame inside importlib, which says only that a crash happened during an import."""
    return "<frozen importlib." in frame or "/importlib/" in frame.replace("\\", "/")


def _tail(log) -> str:
    """The lines of the child's output that say why it died, joined into one line."""
    log.seek(0, os.SEEK_END)
    size = log.tell()
    log.seek(max(0, size - _LOG_TAIL_BYTES))
    lines = [line.strip() for line in log.read().decode("utf-8", errors="replace").splitlines() if line.strip()]
    fatal = next((i for i, line in enumerate(lines) if line.startswith("Fatal Python error")), None)
    if fatal is not None:  # faulthandler: the error, then the innermost frame that is not importlib's
        frames = [line for line in lines[fatal + 1:] if line.startswith("File ") and not _is_import_machinery(line)]
        return " | ".join(lines[fatal:fatal + 1] + frames[:1])
    return " | ".join(lines[-_LOG_TAIL_LINES:])
