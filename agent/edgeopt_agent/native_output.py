"""What native libraries write straight to file descriptors 1 and 2: kept off the terminal, logged.

Runtimes log from C++ (LiteRT prints "INFO: Created TensorFlow Lite XNNPACK delegate for CPU." on
every interpreter it sets up), which Python's logging and `sys.stderr` never see.
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
from typing import Iterator, Sequence


@contextlib.contextmanager
def fds_redirected(target_fd: int, fds: Sequence[int] = (1, 2)) -> Iterator[None]:
    """Point file descriptors `fds` (1: stdout, 2: stderr) at `target_fd` for the block."""
    saved = []
    try:
        for fd in fds:
            (sys.stdout if fd == 1 else sys.stderr).flush()
            saved.append((fd, os.dup(fd)))
            os.dup2(target_fd, fd)
        yield
    finally:
        for fd, copy in saved:
            (sys.stdout if fd == 1 else sys.stderr).flush()
            os.dup2(copy, fd)
            os.close(copy)


@contextlib.contextmanager
def native_stderr_logged(log: logging.Logger, what: str) -> Iterator[None]:
    """Capture what native code writes to stderr during the block and log it on `log`.

    At DEBUG (`edgeopt -v`) nothing is captured: the text reaches stderr as the library wrote it.
    Otherwise it is logged at DEBUG, or at WARNING when the block raised, so a failure keeps the
    library's own words. Keep the block short: fd 2 is the whole process's.
    """
    if log.isEnabledFor(logging.DEBUG):
        yield
        return
    with tempfile.TemporaryFile() as captured:
        failed = False
        try:
            with fds_redirected(captured.fileno(), fds=(2,)):
                yield
        except BaseException:
            failed = True
            raise
        finally:
            captured.seek(0)
            text = captured.read().decode("utf-8", errors="replace").strip()
            if text:
                log.log(logging.WARNING if failed else logging.DEBUG, "%s wrote:\n%s", what, text)
