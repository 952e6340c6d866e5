"""Start a child process walled off from the user's machine: no network, one private folder as the
only writable place, and limits on CPU time, memory and file size.

Linux has the parts; Debian ships them. With bubblewrap (`bwrap`) the child sees the whole file
system read-only but its private folder, has no network and no capabilities, gets a new session,
and dies with its parent. Without bubblewrap, `unshare` still takes the network away (a new
network namespace), but the child can write wherever the user can. Without either, only the
limits hold. `Isolation.caveat` says in one line what is missing and how to get it.
"""
from __future__ import annotations

import functools
import os
import resource
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

GIB = 1 << 30


@dataclass(frozen=True)
class Limits:
    cpu_seconds: int = 4 * 3600
    memory_bytes: Optional[int] = None  # None: three quarters of this machine's memory
    file_bytes: int = 16 * GIB

    def resolved_memory(self) -> int:
        if self.memory_bytes is not None:
            return self.memory_bytes
        try:
            physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError):
            physical = 16 * GIB
        return max(4 * GIB, physical * 3 // 4)


@dataclass(frozen=True)
class Isolation:
    level: str  # "bubblewrap" | "network namespace" | "limits only"
    prefix: Tuple[str, ...]
    caveat: str  # "" when every wall holds


BUBBLEWRAP_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap)"


def isolation(private: Path) -> Isolation:
    """The strongest isolation this machine offers, for a child whose only writable place is `private`."""
    if _works(_bubblewrap_prefix(Path("/"))):
        return Isolation("bubblewrap", _bubblewrap_prefix(private), "")
    if _works(_unshare_prefix()):
        return Isolation("network namespace", _unshare_prefix(),
                         f"bubblewrap is not available: the child has no network and runs under limits, but it "
                         f"can write where you can; {BUBBLEWRAP_HINT}")
    return Isolation("limits only", (),
                     f"neither bubblewrap nor network namespaces are available: the child runs only under CPU and "
                     f"memory limits, with your network and files; {BUBBLEWRAP_HINT}")


def _bubblewrap_prefix(private: Path) -> Tuple[str, ...]:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return ()
    folder = str(private)
    return (bwrap, "--die-with-parent", "--new-session", "--unshare-all", "--cap-drop", "ALL",
            "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--bind", folder, folder, "--chdir", folder, "--")


def _unshare_prefix() -> Tuple[str, ...]:
    unshare = shutil.which("unshare")
    if unshare is None:
        return ()
    if os.geteuid() == 0:
        return (unshare, "--net", "--")
    return (unshare, "--user", "--map-root-user", "--net", "--")


@functools.lru_cache(maxsize=None)
def _works(prefix: Tuple[str, ...]) -> bool:
    """Whether the wrapper starts a command here (containers may forbid namespaces)."""
    if not prefix:
        return False
    true = shutil.which("true") or "/bin/true"
    try:
        return subprocess.run([*prefix, true], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def child_environment(private: Path) -> Dict[str, str]:
    """The parent's environment with every home, cache and temporary folder pointed at `private`."""
    env = dict(os.environ)
    for name in ("HOME", "TMPDIR", "TEMP", "TMP", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "TORCHINDUCTOR_CACHE_DIR",
                 "TRITON_CACHE_DIR", "MPLCONFIGDIR"):
        env[name] = str(private)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        env.pop(name, None)
    return env


def start(argv: Sequence[str], private: Path, limits: Limits, isolated: Isolation, stderr,
          pass_fds: Sequence[int] = ()) -> subprocess.Popen:
    """`argv` started in `private` under `isolated`'s wrapper and `limits`; stdin and stdout are pipes."""
    memory = limits.resolved_memory()

    def apply_limits() -> None:  # runs in the child between fork and exec
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds))
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    command: List[str] = [*isolated.prefix, *argv]
    return subprocess.Popen(command, cwd=str(private), env=child_environment(private), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=stderr, preexec_fn=apply_limits,
                            start_new_session=not isolated.prefix, pass_fds=tuple(pass_fds), close_fds=True)
