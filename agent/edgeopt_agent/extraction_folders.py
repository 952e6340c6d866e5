"""Folders that hold an artifact's extracted files while a process loads it, under one root folder
(the agent's `<data_dir>/bundles`), and the sweep that removes those whose process is gone.

A benchmark child killed while loading (timeout, out of memory) cannot remove its folder, so each
folder's name says which process made it: `<boot>-<pid>-<start>-<random>`, the boot id's first 8
characters and the process's start time from /proc (so a reused pid never matches; `x` where
there is no /proc, and then a folder counts as its process's while that pid exists). The agent
sweeps when it starts and every extraction sweeps before adding its own, so nothing accumulates.

The sweep lists `root` only: it never follows a link (a `root` that is a link is not swept), and
removes only real folders directly in `root` whose names it wrote.
"""
from __future__ import annotations

import logging
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path
from typing import List, Optional, Union

from .processes import boot_id, process_start

log = logging.getLogger(__name__)
_UNKNOWN = "x"
_NAME = re.compile(r"^(?P<boot>[0-9a-f]{8}|x)-(?P<pid>[0-9]{1,7})-(?P<start>[0-9]{1,20}|x)-[A-Za-z0-9_]{1,32}$")


def owner_prefix(pid: Optional[int] = None) -> str:
    """The name prefix of the folders process `pid` (this one by default) makes."""
    pid = os.getpid() if pid is None else pid
    start = process_start(pid)
    return f"{_boot_tag()}-{pid}-{_UNKNOWN if start is None else start}-"


def new_folder(root: Union[str, Path]) -> Path:
    """A new private folder (mode 0700) in `root`, named for this process, after sweeping `root`."""
    root = Path(root)
    _ensure_root(root)
    sweep(root)
    return Path(tempfile.mkdtemp(prefix=owner_prefix(), dir=root))


def sweep(root: Union[str, Path]) -> List[str]:
    """Remove the folders in `root` whose process no longer runs; the names removed."""
    root = Path(root)
    try:
        if not stat.S_ISDIR(os.lstat(root).st_mode):  # absent, a file, or a link: nothing here is ours
            return []
        entries = list(os.scandir(root))
    except FileNotFoundError:
        return []
    except OSError as exc:  # unreadable: cleaning up is best effort, never a reason to stop
        log.warning("could not list %s to remove stale extractions: %s", root, exc)
        return []
    removed = []
    for entry in entries:
        match = _NAME.match(entry.name)
        if match is None or not entry.is_dir(follow_symlinks=False) or _running(**match.groupdict()):
            continue
        try:
            shutil.rmtree(entry.path)  # unlinks links inside, never follows them
        except OSError as exc:
            log.warning("could not remove the stale extraction %s: %s", entry.path, exc)
            continue
        removed.append(entry.name)
    if removed:
        log.info("removed %d extraction folder(s) left by ended processes in %s", len(removed), root)
    return removed


def _running(boot: str, pid: str, start: str) -> bool:
    here = _boot_tag()
    if boot != _UNKNOWN and here != _UNKNOWN and boot != here:  # made before this boot
        return False
    if boot == _UNKNOWN or start == _UNKNOWN:  # made without /proc: the pid is all there is
        return _pid_exists(int(pid))
    return process_start(int(pid)) == int(start)


def _pid_exists(pid: int) -> bool:
    if pid <= 0:  # kill(0, ...) would signal our own process group
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    except (OSError, OverflowError):
        return False
    return True


def _boot_tag() -> str:
    boot = (boot_id() or "").replace("-", "")[:8].lower()
    return boot if re.fullmatch(r"[0-9a-f]{8}", boot) else _UNKNOWN


def _ensure_root(root: Path) -> None:
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not stat.S_ISDIR(os.lstat(root).st_mode):
        raise OSError(f"{root} must be a folder, not a link or a file, to extract artifacts into")
