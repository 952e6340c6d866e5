"""Start a child process that owns nothing: an unprivileged user, no network, one private folder as
the only writable place, and limits on memory, processes, CPU time and file size.

Linux has the parts; Debian ships them. With bubblewrap (`bwrap`) the child sees a file system
made of the system's programs and libraries (/usr), the Python installation, the folders of
edgeopt's own packages and its private folder — nothing else of the machine: no home folders,
/etc (but the loader's cache), /tmp, /run, /srv or /var. It has no network, its own process and IPC
namespaces, a new session, and dies with its parent. Started as root, it runs as `nobody` with no
capabilities and no way to gain any (`setpriv` inside the sandbox, before Python starts), so even
a file it could name is closed to it unless anyone may read it; started by another user, it runs
as that user in its own user namespace, seeing only the folders above.

Without bubblewrap, a child started as root still drops to `nobody` before exec and `unshare` still
takes the network away and kills it with its parent (it can then read what anyone may read); a
child that could only run as the user who started it, with the user's files, is refused with the
one-line fix (install bubblewrap). Its environment holds only what Python and the numeric
libraries read, never the user's tokens or agent sockets. `Isolation.caveat` says in one line what
is missing.
"""
from __future__ import annotations

import functools
import importlib.util
import os
import pwd
import resource
import shutil
import site
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from edgeopt_agent.errors import UserError

# The child a sandbox runs (named, not imported: it lives above this room, beside the exports it calls).
WORKER_MODULE = "edgeopt_converters.passes.pt2_worker"

GIB = 1 << 30
MIB = 1 << 20
# The child's address space: at least MEMORY_FLOOR (+ MEMORY_PER_CPU for each CPU's threads and
# allocator arenas; a TFLite export of a small model peaked at 2.4 GiB on 2 CPUs), and
# MEMORY_PER_TENSOR_BYTE times what the model's tensors hold for a larger one.
MEMORY_FLOOR = 5 * GIB
MEMORY_PER_CPU = 256 * MIB
MEMORY_PER_TENSOR_BYTE = 12
# Processes and threads the child may add to those its user already runs (torch starts one
# thread per CPU for each pool).
PROCESSES_PER_CPU = 4
PROCESSES_EXTRA = 64
SANDBOX_USER = "nobody"
BUBBLEWRAP_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap)"


@dataclass(frozen=True)
class Limits:
    cpu_seconds: int = 4 * 3600
    memory_bytes: int = MEMORY_FLOOR
    file_bytes: int = 16 * GIB

    @classmethod
    def for_model(cls, tensor_bytes: int) -> "Limits":
        """Memory sized from the model: MEMORY_PER_TENSOR_BYTE times its tensors' bytes, at least the floor."""
        floor = MEMORY_FLOOR + MEMORY_PER_CPU * (os.cpu_count() or 1)
        return cls(memory_bytes=max(floor, MEMORY_PER_TENSOR_BYTE * max(0, int(tensor_bytes))))


@dataclass(frozen=True)
class Isolation:
    level: str  # "bubblewrap" | "network namespace" | "limits only" (tests only: never chosen by `isolation`)
    prefix: Tuple[str, ...]
    caveat: str  # "" when every wall holds
    user: Optional[Tuple[int, int]] = None  # (uid, gid) the child runs as, when not the caller's


def isolation(private: Path) -> Isolation:
    """The strongest isolation this machine offers, for a child whose only writable place is `private`;
    UserError (one line, with the fix) where the child could act as the caller with the caller's files."""
    user = _sandbox_user() if os.geteuid() == 0 else None
    if _probe("bubblewrap"):
        return Isolation("bubblewrap", _bubblewrap_prefix(private, user), "", user)
    if user is not None and _probe("network namespace"):
        return Isolation("network namespace", _unshare_prefix(user), f"bubblewrap is not available: the child runs "
                         f"as {SANDBOX_USER} without network, but it can read what anyone may read on this machine; "
                         f"{BUBBLEWRAP_HINT}", user)
    if user is None:
        why = "bubblewrap cannot start a sandbox here"
    else:
        why = f"neither bubblewrap nor unshare can start a child as {SANDBOX_USER} without network here"
    raise UserError(f"refusing to load a .pt2 model: {why}, and a child running as you could read and send your "
                    f"files; {BUBBLEWRAP_HINT}, or give the model as file.py:factory or an .onnx file")


@functools.lru_cache(maxsize=None)
def _sandbox_user() -> Tuple[int, int]:
    try:
        account = pwd.getpwnam(SANDBOX_USER)
        return account.pw_uid, account.pw_gid
    except KeyError:
        return 65534, 65534


def _setpriv(user: Optional[Tuple[int, int]]) -> Tuple[str, ...]:
    """Drops to `user` with no capabilities, no supplementary groups and no way to gain privileges."""
    if user is None:
        return ()
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return ()
    return (setpriv, f"--reuid={user[0]}", f"--regid={user[1]}", "--clear-groups", "--inh-caps=-all",
            "--bounding-set=-all", "--no-new-privs", "--")


def _bubblewrap_prefix(private: Path, user: Optional[Tuple[int, int]]) -> Tuple[str, ...]:
    bwrap = shutil.which("bwrap")
    drop = _setpriv(user)
    if bwrap is None or (user is not None and not drop):
        return ()
    if user is None:  # unprivileged bubblewrap: a user namespace, no capabilities
        options = ["--unshare-all", "--cap-drop", "ALL"]
    else:  # as root: setpriv below drops every capability along with root
        options = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    mounts = _Mounts(["--die-with-parent", "--new-session", *options, "--dev", "/dev", "--proc", "/proc"])
    system = [f for f in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32") if os.path.lexists(f)]
    for folder in system:
        if os.path.islink(folder):
            mounts.symlink(os.readlink(folder), folder)
    mounts.read_only(["/usr", *(f for f in system if not os.path.islink(f)), "/sys/devices/system/cpu",
                      *_python_folders()])
    mounts.read_only_file("/etc/ld.so.cache")
    mounts.writable(str(private))
    return (bwrap, *mounts.options, "--chdir", str(private), "--", *drop)


def _python_folders() -> List[str]:
    """The Python installation, the virtual environment, its site-packages and the folders edgeopt's own
    packages live in (an editable install keeps them in the source tree); not the other folders on the
    import path (the current folder, PYTHONPATH), which may be anything."""
    wanted = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, os.path.dirname(sys.executable),
              os.path.dirname(os.__file__), *site.getsitepackages()]
    if site.ENABLE_USER_SITE and site.getusersitepackages() in sys.path:
        wanted.append(site.getusersitepackages())
    for package in ("edgeopt", "edgeopt_agent", "edgeopt_converters", "edgeopt_device_profiles"):
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.submodule_search_locations:
            wanted.extend(spec.submodule_search_locations)
    return [p for p in wanted if p and os.path.isdir(p)]


class _Mounts:
    """bubblewrap's mount options for an otherwise empty root: each folder bound at its own path and at
    the path Python knows it by, outermost first (a folder inside one already bound is visible through
    it), with the folders above each made (0755 and empty: the child may pass, nothing is there)."""

    def __init__(self, options: List[str]):
        self.options = options
        self.present: List[str] = ["/dev", "/proc"]  # what the child sees, and all below it

    def symlink(self, target: str, path: str) -> None:
        self.options += ["--symlink", target, path]
        self.present.append(path)

    def read_only(self, folders: Sequence[str]) -> None:
        targets: Dict[str, str] = {}
        for folder in folders:
            real = os.path.realpath(folder)
            if os.path.isdir(real):
                for seen in (real, os.path.abspath(folder)):
                    targets.setdefault(seen, real)
        for target in sorted(targets, key=lambda p: (p.count("/"), p)):
            self._mount("--ro-bind", targets[target], target)

    def read_only_file(self, path: str) -> None:
        if os.path.isfile(path):
            self._mount("--ro-bind", os.path.realpath(path), path)

    def writable(self, folder: str) -> None:
        self._mount("--bind", folder, folder)

    def _mount(self, how: str, source: str, target: str) -> None:
        if self._visible(target) and how == "--ro-bind":
            return
        parts = target.strip("/").split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            folder = "/" + "/".join(parts[:depth])
            if not self._visible(folder):
                self.options += ["--perms", "0755", "--dir", folder]
                self.present.append(folder + "/.")  # made empty: only this folder itself is there
        self.options += [how, source, target]
        self.present.append(target)

    def _visible(self, path: str) -> bool:
        for seen in self.present:
            if seen.endswith("/."):
                if path == seen[:-2]:
                    return True
            elif path == seen or path.startswith(seen.rstrip("/") + "/"):
                return True
        return False


def _unshare_prefix(user: Tuple[int, int]) -> Tuple[str, ...]:
    unshare, drop = shutil.which("unshare"), _setpriv(user)
    if unshare is None or not drop:
        return ()
    return (unshare, "--net", "--pid", "--ipc", "--uts", "--fork", "--kill-child", "--", *drop)


@functools.lru_cache(maxsize=None)
def _probe(level: str) -> bool:
    """Whether a child started at `level` runs Python and imports edgeopt's worker here (containers may
    forbid namespaces; the sandbox user may not reach a Python installed under /root)."""
    user = _sandbox_user() if os.geteuid() == 0 else None
    with tempfile.TemporaryDirectory(prefix="edgeopt-probe-") as folder:
        private = Path(folder) / "child"
        private.mkdir()
        os.chmod(folder, 0o711)
        if level == "bubblewrap":
            prefix = _bubblewrap_prefix(private, user)
        else:
            prefix = _unshare_prefix(user) if user is not None else ()
        if not prefix:
            return False
        isolated = Isolation(level, prefix, "", user)
        try:
            child = start([sys.executable, "-c", f"import {WORKER_MODULE}"], private,
                          Limits.for_model(0), isolated, subprocess.DEVNULL)
            child.stdin.close()
            try:
                return child.wait(timeout=60) == 0
            finally:
                stop(child, isolated)
                child.stdout.close()
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
    env["USER"] = env["LOGNAME"] = "edgeopt-child"  # no account database inside: getpass reads these
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def start(argv: Sequence[str], private: Path, limits: Limits, isolated: Isolation, stderr,
          pass_fds: Sequence[int] = ()) -> subprocess.Popen:
    """`argv` started in `private` under `isolated`'s wrapper and `limits`; stdin and stdout are pipes.
    Each limit is capped by the hard limit this process inherited (a limit is never raised)."""
    if isolated.user is not None:
        os.chown(private, *isolated.user)
        os.chmod(private, 0o700)
    processes = _tasks_of(isolated.user[0] if isolated.user else os.getuid()) + \
        PROCESSES_PER_CPU * (os.cpu_count() or 1) + PROCESSES_EXTRA
    wanted = ((resource.RLIMIT_CPU, limits.cpu_seconds), (resource.RLIMIT_AS, limits.memory_bytes),
              (resource.RLIMIT_FSIZE, limits.file_bytes), (resource.RLIMIT_NPROC, processes),
              (resource.RLIMIT_CORE, 0))
    settings = [(kind, _capped(kind, value)) for kind, value in wanted]

    def apply_limits() -> None:  # runs in the child between fork and exec
        for kind, value in settings:
            resource.setrlimit(kind, (value, value))

    command: List[str] = [*isolated.prefix, *argv]
    return subprocess.Popen(command, cwd=str(private), env=child_environment(private), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=stderr, preexec_fn=apply_limits,
                            start_new_session=isolated.level != "bubblewrap", pass_fds=tuple(pass_fds), close_fds=True)


def _capped(kind: int, value: int) -> int:
    hard = resource.getrlimit(kind)[1]
    return value if hard == resource.RLIM_INFINITY else min(value, hard)


def _tasks_of(uid: int) -> int:
    """Threads that `uid` runs now (RLIMIT_NPROC counts them all, across the machine)."""
    count = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status", "rb") as status:
                fields = dict(line.split(b":", 1) for line in status.read().splitlines() if b":" in line)
        except OSError:
            continue
        if int(fields.get(b"Uid", b"-1").split()[0]) == uid:
            count += int(fields.get(b"Threads", b"1").strip() or 1)
    return count


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
