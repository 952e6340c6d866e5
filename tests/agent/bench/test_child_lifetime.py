"""The benchmark child dies with whoever started it, and a survivor is ended by the next agent.

Real processes throughout: an agent-like parent running a long benchmark is killed with SIGKILL,
and the child (and what it started) must be gone within two seconds.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edgeopt_agent.bench.leftovers import ChildRecord
from edgeopt_agent.processes import process_cmdline, process_start

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to see processes end")

GONE_WITHIN_S = 2.0

# Like the agent: the benchmark runs on a worker thread that notes its child, the main thread idles.
AGENT_LIKE = """
import sys, threading, time
from pathlib import Path
from edgeopt_agent.bench import BenchmarkSpec, run_benchmark
from edgeopt_agent.bench.isolation import recording_children
from edgeopt_agent.bench.leftovers import ChildRecord

spec = BenchmarkSpec(artifact=sys.argv[1], runs=10**9, duration_s=600, max_duration_s=600, warmup_runs=1,
                     warmup_s=0, idle_s=0, timeout_s=600, threads=1)

def work():
    with recording_children(ChildRecord(Path(sys.argv[2]))):
        run_benchmark(spec, progress=lambda text: print(text, flush=True))

threading.Thread(target=work, name="edgeopt-jobs", daemon=True).start()
time.sleep(600)
"""

# A parent that starts GUARDED with only one of the two guards and reports its pids.
MIDDLE = """
import os, subprocess, sys, time
read_end, write_end = os.pipe()
subprocess.Popen([sys.executable, "-c", sys.argv[1], str(os.getpid()), str(read_end), sys.argv[2]],
                 pass_fds=(read_end,), start_new_session=True)
os.close(read_end)
time.sleep(600)
"""
GUARDED = """
import subprocess, sys, time
from edgeopt_agent.bench import parent_watch
parent_pid, watch_fd, guard = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
if guard == "pipe":
    parent_watch._set_parent_death_signal = lambda: False
helper = subprocess.Popen(["sleep", "600"])  # as a runtime's helper process would be: same group
parent_watch.die_with_parent(parent_pid, watch_fd if guard == "pipe" else None)
print(f"{__import__('os').getpid()} {helper.pid}", flush=True)
time.sleep(600)
"""


def gone(pid: int, start: int) -> bool:
    """No such process any more (or only its zombie, before init reaps it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return True
    if process_start(pid) != start:
        return True
    return state[state.rfind(b")") + 2:].split()[0] == b"Z"


def seconds_until_gone(pids_and_starts, limit: float = 10.0) -> float:
    began = time.monotonic()
    while time.monotonic() - began < limit:
        if all(gone(pid, start) for pid, start in pids_and_starts):
            return time.monotonic() - began
        time.sleep(0.02)
    return float("inf")


def read_line(proc: subprocess.Popen, predicate, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if predicate(line):
            return line
    raise AssertionError("the parent never reported what the test waits for")


def kill_leftovers(*pids: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_benchmark_child_dies_within_two_seconds_of_a_killed_agent(dynamic_onnx, tmp_path):
    record = tmp_path / "bench-child.json"
    parent = subprocess.Popen([sys.executable, "-c", AGENT_LIKE, str(dynamic_onnx), str(record)],
                              stdout=subprocess.PIPE, text=True)
    note = None
    try:
        read_line(parent, lambda line: line.startswith("measuring"))  # the child is in its long job
        note = json.loads(record.read_text())
        assert not gone(note["pid"], note["start"])
        assert os.getpgid(note["pid"]) == note["pid"]  # it leads its own process group
        parent.kill()
        parent.wait(10)
        assert seconds_until_gone([(note["pid"], note["start"])]) < GONE_WITHIN_S
    finally:
        parent.kill()
        parent.wait(10)
        if note:
            kill_leftovers(note["pid"])


@pytest.mark.parametrize("guard", ["pipe", "pdeathsig"])
def test_each_guard_alone_ends_the_child(guard):
    """The pipe watch (the portable fallback) takes the child's whole group; PDEATHSIG the child."""
    middle = subprocess.Popen([sys.executable, "-c", MIDDLE, GUARDED, guard], stdout=subprocess.PIPE, text=True)
    child_pid = helper_pid = None
    try:
        child_pid, helper_pid = map(int, read_line(middle, lambda line: line.strip()).split())
        child, helper = (child_pid, process_start(child_pid)), (helper_pid, process_start(helper_pid))
        middle.kill()
        middle.wait(10)
        assert seconds_until_gone([child]) < GONE_WITHIN_S
        if guard == "pipe":  # the watch thread kills the group the child leads, helper included
            assert seconds_until_gone([helper]) < GONE_WITHIN_S
        else:  # SIGKILL from the kernel takes the child only; the next agent's reap ends the helper
            assert not gone(*helper)
    finally:
        middle.kill()
        middle.wait(10)
        kill_leftovers(*(pid for pid in (child_pid, helper_pid) if pid))


def test_a_child_whose_parent_died_before_it_started_ends_at_once():
    """The parent pid it was given is not its parent any more: it must not run the job at all."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    child = subprocess.Popen([sys.executable, "-m", "edgeopt_agent.bench.child", "1", "0", str(dead.pid)],
                             stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        assert child.wait(10) == -signal.SIGKILL
    finally:
        child.kill()
        child.wait()


# --- reaping what an earlier agent left -------------------------------------------------------


def start_waiting_child() -> subprocess.Popen:
    """A real benchmark child, as run_child starts it, without guards: it waits for its spec."""
    child = subprocess.Popen([sys.executable, "-m", "edgeopt_agent.bench.child", "1"], stdin=subprocess.PIPE,
                             stdout=subprocess.DEVNULL, start_new_session=True)
    # Popen returns once exec has begun; the kernel shows the new command line a moment later.
    deadline = time.monotonic() + 10
    while not process_cmdline(child.pid) and time.monotonic() < deadline:
        time.sleep(0.005)
    return child


def test_reap_kills_a_recorded_child_that_is_still_running(tmp_path):
    record = ChildRecord(tmp_path / "bench-child.json")
    child = start_waiting_child()
    try:
        record.started(child.pid)
        assert record.path.exists()
        said = ChildRecord(record.path).reap()
        assert said is not None and f"pid {child.pid}" in said and "killed" in said
        assert child.wait(5) == -signal.SIGKILL
        assert not record.path.exists()
        assert ChildRecord(record.path).reap() is None  # nothing left to do
    finally:
        child.kill()
        child.wait()


def test_reap_never_kills_a_process_that_is_not_the_recorded_child(tmp_path):
    path = tmp_path / "bench-child.json"
    child = start_waiting_child()
    stranger = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        ChildRecord(path).started(child.pid)
        note = json.loads(path.read_text())
        # The same pid, started at another time: the number was reused.
        path.write_text(json.dumps({**note, "start": note["start"] - 1}))
        assert ChildRecord(path).reap() is None and child.poll() is None
        # Another boot: ticks since boot prove nothing.
        path.write_text(json.dumps({**note, "boot_id": "another-boot"}))
        assert ChildRecord(path).reap() is None and child.poll() is None
        # A live process with the right start time that is not a benchmark child.
        path.write_text(json.dumps({**note, "pid": stranger.pid, "start": process_start(stranger.pid)}))
        assert ChildRecord(path).reap() is None and stranger.poll() is None
        # An unreadable note is dropped, not acted on.
        path.write_text("{not json")
        assert "unreadable" in ChildRecord(path).reap() and not path.exists()
        assert child.poll() is None and stranger.poll() is None
    finally:
        for proc in (child, stranger):
            proc.kill()
            proc.wait()


def test_reap_ends_helpers_of_a_child_that_is_already_gone(tmp_path):
    """What PDEATHSIG leaves: the child was killed, a process it started lives on in its session."""
    leader = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys, os; p = subprocess.Popen(['sleep', '600']); "
                               "print(p.pid, flush=True); sys.stdin.readline(); os._exit(0)"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)
    helper_pid = int(leader.stdout.readline())
    record = ChildRecord(tmp_path / "bench-child.json")
    try:
        record.started(leader.pid)
        leader.stdin.write("\n")
        leader.stdin.flush()
        leader.wait(10)
        helper = (helper_pid, process_start(helper_pid))
        assert not gone(*helper)
        said = record.reap()
        assert said is not None and str(helper_pid) in said and "had ended" in said
        assert seconds_until_gone([helper]) < GONE_WITHIN_S
    finally:
        kill_leftovers(helper_pid)
        leader.kill()
        leader.wait()


def test_the_agent_reaps_a_leftover_when_it_starts(tmp_path):
    from edgeopt_agent.daemon.agent import Agent
    from edgeopt_agent.daemon.config import build_config

    data_dir = tmp_path / "data"
    data_dir.mkdir()
    child = start_waiting_child()
    try:
        ChildRecord(data_dir / "bench-child.json").started(child.pid)
        agent = Agent(build_config({"device_id": "reaper", "data_dir": str(data_dir), "profile": "x86-64"}))
        try:
            assert agent.reaped_child is not None and f"pid {child.pid}" in agent.reaped_child
            assert child.wait(5) == -signal.SIGKILL
        finally:
            agent.store.close()
            agent._lock.close()
    finally:
        child.kill()
        child.wait()
