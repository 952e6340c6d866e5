"""The benchmark child ends when the process that started it ends, however that one ended.

A child left running after the agent was killed would go on loading the CPU and skew the run
the restarted agent makes of the same job. Two independent guards, set up first thing in the child:

- Linux: PR_SET_PDEATHSIG, so the kernel sends SIGKILL when the parent goes. The kernel ties it
  to the *thread* that forked the child; `run_child` forks and then waits on the same thread until
  the child is reaped, so that thread outlives the child unless the whole process dies.
- Everywhere: a thread that blocks on a pipe only the parent holds the write end of. The pipe
  closes when the parent dies, by any signal; the thread then kills the child's process group
  (the child leads its own, so helpers a runtime started go with it). It also polls the parent
  pid, in case the write end leaked into a process that outlived the parent.
"""
from __future__ import annotations

import os
import select
import signal
import sys
import threading
from typing import Optional

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
POLL_S = 1.0


def die_with_parent(parent_pid: int, watch_fd: Optional[int]) -> None:
    """Make this process end when `parent_pid` does; returns at once."""
    _set_parent_death_signal()
    if watch_fd is not None:
        thread = threading.Thread(target=_watch, args=(parent_pid, watch_fd), name="edgeopt-parent-watch", daemon=True)
        thread.start()
    if os.getppid() != parent_pid:  # the parent was gone before the guards were up
        _end_group()


def _set_parent_death_signal() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):  # no libc symbol: the pipe watch still guards
        return False


def _watch(parent_pid: int, watch_fd: int) -> None:
    while True:
        try:
            ready, _, _ = select.select([watch_fd], [], [], POLL_S)
            if ready and not os.read(watch_fd, 1):  # end of file: the parent's end is closed
                break
        except OSError:
            break
        if os.getppid() != parent_pid:
            break
    _end_group()


def _end_group() -> None:
    """Kill this process's group when it leads one, else just this process."""
    try:
        if os.getpgrp() == os.getpid():
            os.killpg(os.getpid(), signal.SIGKILL)
    finally:
        os._exit(1)  # not reached when the group kill took this process with it
