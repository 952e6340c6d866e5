"""Start a child process walled off from the user's machine: no network, one private folder as the
only writable place, and limits on CPU time, memory and file size.

Linux has the parts; Debian ships them. With bubblewrap (`bwrap`) the child sees the file system
read-only, with the places that hold sockets and secrets (/tmp, /run, home folders) replaced by
empty ones but for the Python installation it needs, and its private folder as the only writable
place; it has no network and no capabilities, gets a new session, and dies with its parent. Its
environment holds only what Python and the numeric libraries read, never the user's tokens or
agent sockets. Without bubblewrap, `unshare` still takes the network away (a new network
namespace) and kills the child with its parent, but the child can read and write what the user
can. Without either, only the limits hold. `Isolation.caveat` says in one line what is missing.
"""
from __future__ import annotations

import functools
import os
import resource
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import edgeopt_converters
from edgeopt_agent import errors

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


# Folders that hold sockets (a session bus, docker, ssh-agent, databases) or the user's secrets:
# the child sees them empty.
HIDDEN = ("/tmp", "/var/tmp", "/run", "/home", "/root")


def _bubblewrap_prefix(private: Path) -> Tuple[str, ...]:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return ()
    hidden = [h for h in dict.fromkeys((*HIDDEN, os.path.expanduser("~"))) if os.path.isdir(h) and not os.path.islink(h)]
    options = ["--die-with-parent", "--new-session", "--unshare-all", "--cap-drop", "ALL",
               "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for folder in hidden:
        options += ["--tmpfs", folder]
    for needed in _needed_inside(hidden):
        options += ["--ro-bind", needed, needed]
    folder = str(private)
    return (bwrap, *options, "--bind", folder, folder, "--chdir", folder, "--")


def _needed_inside(hidden: Sequence[str]) -> List[str]:
    """The folders Python needs (its installation, the virtual environment, every import path, the
    folders edgeopt's own packages live in) that lie under a hidden folder: bound back read-only,
    outermost first."""
    packages = [os.path.dirname(os.path.dirname(os.path.abspath(m.__file__))) for m in (edgeopt_converters, errors)]
    wanted = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path, *packages)
              if p and os.path.isdir(p)}
    under = sorted((p for p in wanted if any(p == h or p.startswith(h.rstrip("/") + "/") for h in hidden)),
                   key=len)
    kept: List[str] = []
    for path in under:
        if not any(path == k or path.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(path)
    return kept


def _unshare_prefix() -> Tuple[str, ...]:
    unshare = shutil.which("unshare")
    if unshare is None:
        return ()
    if os.geteuid() == 0:
        return (unshare, "--net", "--pid", "--fork", "--kill-child", "--")
    return (unshare, "--user", "--map-root-user", "--net", "--pid", "--fork", "--kill-child", "--")


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


# What the child may inherit: what Python, the numeric libraries and the exporters read; never
# tokens, passwords or agent and bus sockets.
_INHERITED = ("PATH", "LANG", "LANGUAGE", "TZ", "PYTHONPATH", "PYTHONHASHSEED", "VIRTUAL_ENV", "SOURCE_DATE_EPOCH")
_INHERITED_PREFIXES = ("LC_", "OMP_", "MKL_", "OPENBLAS_", "KMP_", "TF_CPP_", "LITERT_", "TORCH_", "PYTORCH_")


def child_environment(private: Path) -> Dict[str, str]:
    """The parent's harmless variables, with every home, cache and temporary folder at `private`."""
    env = {k: v for k, v in os.environ.items() if k in _INHERITED or k.startswith(_INHERITED_PREFIXES)}
    for name in ("HOME", "TMPDIR", "TEMP", "TMP", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "TORCHINDUCTOR_CACHE_DIR",
                 "TRITON_CACHE_DIR", "MPLCONFIGDIR", "TORCH_HOME"):
        env[name] = str(private)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
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
                            start_new_session=isolated.level != "bubblewrap", pass_fds=tuple(pass_fds), close_fds=True)


def stop(process: subprocess.Popen, isolated: Isolation) -> None:
    """Kill the child and whatever it started (bubblewrap does that itself; otherwise its session,
    also when the child itself already exited and left processes behind)."""
    if isolated.level != "bubblewrap":
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except OSError:
            pass
    if process.poll() is None:
        process.kill()
        process.wait()
