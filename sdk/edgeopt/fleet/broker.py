"""A local MQTT broker on a free port, for the quickstart, the benchmark scripts and the tests.

Mosquitto when its binary is there (MQTT v5; persistence in the work dir, saved after every
AUTOSAVE_CHANGES changes as scripts/mosquitto.conf does, so sessions and queued messages survive
a stop/start, and most of them a crash, like a production broker's), else an embedded amqtt broker (MQTT 3.1.1
only, in memory) in a child process, so everything also works on a machine without Mosquitto.
`EDGEOPT_BROKER=amqtt` (or `kind="amqtt"`) forces the embedded one. `edgeopt fleet broker` runs
one in the foreground with the settings of scripts/mosquitto.conf (`mosquitto_settings`).

Started as root, Mosquitto reads its config as root and then runs as the `mosquitto` account,
which owns the work dir (its persistence). So nothing root reads or writes may be rewritten by that
account: the config is never a file, but a sealed memory file handed to Mosquitto by descriptor
(`-c /dev/fd/N`); the password, ACL and TLS files the listener names must be out of the account's
reach; the log is opened without following links or blocking and must be a plain file; and root
hands the account only the work dir and its own persistence files.

Run as a module it is that embedded broker: ``python -m edgeopt.fleet.broker amqtt PORT [HOST]``.
"""
from __future__ import annotations

import errno
import fcntl
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional, Sequence

from ..errors import UserError

MOSQUITTO_FALLBACK = "/usr/sbin/mosquitto"
MOSQUITTO_USER = "mosquitto"  # whom Mosquitto started as root switches to unless told otherwise (`user`)
# The fleet broker configuration this source tree ships (absent from an installed wheel).
SHIPPED_CONFIG = Path(__file__).resolve().parents[3] / "scripts" / "mosquitto.conf"
# Keys the launcher writes itself: where it listens, who may connect, where it persists, whom it runs as.
LAUNCHER_KEYS = ("listener", "port", "bind_address", "allow_anonymous", "persistence_location", "user")
# Settings that name a file Mosquitto reads (as root, or as its account after dropping root).
FILE_KEYS = ("password_file", "acl_file", "cafile", "capath", "certfile", "keyfile", "crlfile", "dhparamfile",
             "psk_file", "include_dir", "plugin", "auth_plugin", "plugin_opt_config_file")
START_TIMEOUT_S = 15.0
# Save the persistence file after this many changes (queued messages, subscriptions, retained
# messages) rather than once a minute; scripts/mosquitto.conf ships the same.
AUTOSAVE_CHANGES = 100
# The local broker's settings (quickstart, tests): persistent, saving as scripts/mosquitto.conf does.
LOCAL_SETTINGS = (
    "persistence true",
    "autosave_on_changes true",
    f"autosave_interval {AUTOSAVE_CHANGES}",
    "max_queued_messages 100000",
    "max_inflight_messages 100",
    "log_dest stderr",
    "log_type error",
    "log_type warning",
    "log_type notice",
)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def mosquitto_binary() -> Optional[str]:
    found = shutil.which("mosquitto")
    if found:
        return found
    return MOSQUITTO_FALLBACK if os.access(MOSQUITTO_FALLBACK, os.X_OK) else None


def mosquitto_settings(config: Path) -> List[str]:
    """The settings of a Mosquitto config file, less those the launcher sets (`LAUNCHER_KEYS`)."""
    kept = []
    for line in Path(config).read_text(encoding="utf-8").splitlines():
        words = line.split()
        if words and not words[0].startswith("#") and words[0] not in LAUNCHER_KEYS:
            kept.append(line.strip())
    return kept


def port_in_use(host: str, port: int) -> bool:
    """True when something already listens on (host, port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # As a broker binds: a port whose old connections linger in TIME_WAIT is free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except socket.gaierror as exc:
            raise UserError(f"cannot listen on {host}: no such address ({exc.strerror}); give --host an address "
                            f"of this machine, e.g. 127.0.0.1") from None
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            if exc.errno in (errno.EADDRNOTAVAIL, errno.EACCES):
                raise UserError(f"cannot listen on {host}:{port}: {exc.strerror}; give --host an address of this "
                                f"machine (e.g. 127.0.0.1) and a --port above 1023 unless running as root") from None
            raise
    return False


class BrokerPortInUse(UserError):
    """Something else already listens where the broker should."""


def _reachable_by(folder: Path, uid: int, gid: int) -> bool:
    """Whether user `uid` (group `gid`) may pass through every folder above `folder` (mode bits only)."""
    for parent in folder.resolve().parents:
        st = parent.stat()
        if st.st_uid == uid:
            allowed = st.st_mode & 0o100
        elif st.st_gid == gid:
            allowed = st.st_mode & 0o010
        else:
            allowed = st.st_mode & 0o001
        if not allowed:
            return False
    return True


class MqttBroker:
    """`host`, `port`, `kind` ("mosquitto" or "amqtt"); `stop()` / `start()` keep the same port."""

    def __init__(self, workdir: Path, kind: Optional[str] = None, port: Optional[int] = None,
                 listener_settings: Sequence[str] = (), host: str = "127.0.0.1",
                 settings: Optional[Sequence[str]] = None):
        """`listener_settings`: Mosquitto lines for the listener (TLS, password_file, acl_file...)
        in place of `allow_anonymous true`; `settings`: Mosquitto's other settings (default
        `LOCAL_SETTINGS`; `mosquitto_settings(SHIPPED_CONFIG)` for the fleet's)."""
        requested = kind or os.environ.get("EDGEOPT_BROKER") or os.environ.get("EDGEOPT_TEST_BROKER")
        if requested not in (None, "mosquitto", "amqtt"):
            raise ValueError(f"unknown broker kind {requested!r}; use mosquitto or amqtt")
        binary = mosquitto_binary()
        if requested == "mosquitto" and binary is None:
            raise RuntimeError("mosquitto is not installed")
        self.kind = requested or ("mosquitto" if binary else "amqtt")
        self.host = host
        self.port = port or free_port()
        self.workdir = Path(workdir).resolve()  # mosquitto runs in it: its own paths must not be relative
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.workdir / f"{self.kind}.log"
        self._binary = binary
        self._listener_settings = list(listener_settings)
        self._settings = list(LOCAL_SETTINGS if settings is None else settings)
        if self._listener_settings and self.kind != "mosquitto":
            raise RuntimeError("listener settings need mosquitto, which is not installed")
        self._process: Optional[subprocess.Popen] = None
        self._stays_root = False
        self._config: Optional[int] = None  # the descriptor Mosquitto reads its config from

    @property
    def mqtt_v5(self) -> bool:
        return self.kind == "mosquitto"

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def returncode(self) -> Optional[int]:
        """The broker process's exit code once it has exited, else None."""
        return None if self._process is None else self._process.poll()

    @property
    def run_as(self) -> str:
        """The user the started broker runs as (see `_user_setting`)."""
        if os.geteuid() == 0 and self.kind == "mosquitto" and not self._stays_root:
            return MOSQUITTO_USER
        return pwd.getpwuid(os.geteuid()).pw_name

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> "MqttBroker":
        if self.running:
            return self
        if port_in_use(self.host, self.port):
            raise BrokerPortInUse(f"port {self.port} on {self.host} is already in use (another broker?); "
                                  f"stop it or pick another port")
        log = _open_log(self.log_path)
        try:
            self._process = subprocess.Popen(self._command(), stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir,
                                             pass_fds=() if self._config is None else (self._config,))
        finally:
            os.close(log)
            self._close_config()
        self._wait_until_listening()
        return self

    def stop(self) -> None:
        """Stop like a service stop (SIGTERM: mosquitto saves its persistence file first)."""
        if self._process is None:
            return
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(5)
        self._process = None

    def kill(self) -> None:
        """Crash it (SIGKILL): nothing is saved beyond what the broker had already written."""
        if self._process is None:
            return
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait(10)
        self._process = None

    def log_text(self) -> str:
        """The log, when it is a plain file (never blocking on whatever was put in its place)."""
        try:
            fd = os.open(self.log_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return ""
        with os.fdopen(fd, "rb") as log:
            return log.read().decode(errors="replace") if stat.S_ISREG(os.fstat(fd).st_mode) else ""

    def _command(self) -> List[str]:
        if self.kind == "mosquitto":
            self._config = _sealed_file(self._mosquitto_config().encode())
            return [self._binary, "-c", f"/dev/fd/{self._config}"]
        return [sys.executable, "-m", __name__, "amqtt", str(self.port), self.host]

    def _close_config(self) -> None:
        if self._config is not None:
            os.close(self._config)
            self._config = None

    def _mosquitto_config(self) -> str:
        """The config Mosquitto gets, by descriptor: never a file its own account could rewrite."""
        user = self._user_setting()
        self._stays_root = user == "user root"
        return "\n".join(
            [
                # Global settings first: per_listener_settings must come before any listener.
                *self._settings,
                f"persistence_location {self.workdir}/",
                user,
                f"listener {self.port} {self.host}",
                *(self._listener_settings or ["allow_anonymous true"]),
                "",
            ]
        )

    def _user_setting(self) -> str:
        """Started as root, Mosquitto switches to MOSQUITTO_USER, which "must have read/write access
        to the persistence database" (mosquitto.conf(5), `user`): the work dir is handed to that user
        where it can reach it, else `user root` keeps the broker root ("not recommended", same page)."""
        if os.geteuid() != 0:
            return ""
        try:
            account = pwd.getpwnam(MOSQUITTO_USER)
        except KeyError:
            return "user root"
        if not _reachable_by(self.workdir, account.pw_uid, account.pw_gid):
            return "user root"
        for line in (*self._settings, *self._listener_settings):
            words = line.split(None, 1)
            if len(words) == 2 and words[0] in FILE_KEYS:
                _refuse_if_writable_by(Path(words[1].strip()), account.pw_uid, account.pw_gid, words[0])
        os.chown(self.workdir, account.pw_uid, account.pw_gid)
        for path in self.workdir.glob("mosquitto.db*"):
            _hand_over(path, account.pw_uid, account.pw_gid)
        return f"user {MOSQUITTO_USER}"

    def _wait_until_listening(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"{self.kind} exited with {self._process.returncode}:\n{self.log_text()}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{self.kind} did not listen on {self.address} within {START_TIMEOUT_S:.0f} s")


def _sealed_file(data: bytes) -> int:
    """A descriptor of a file holding `data` that nobody can change (a sealed memory file; an unlinked
    temporary file where the system has none)."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("mosquitto.conf", os.MFD_ALLOW_SEALING)
        os.write(fd, data)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL)
    else:
        handle = tempfile.TemporaryFile()
        handle.write(data)
        handle.flush()
        fd = os.dup(handle.fileno())
        handle.close()
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _open_log(path: Path) -> int:
    """The broker's log, opened for appending without following a link or blocking on a FIFO someone put in
    its place (as root, the folder's files may have been written by the broker's own account); it must be
    a plain file with no other name."""
    if path.is_symlink():
        path.unlink()
    not_plain = UserError(f"the broker's log {path} is not a plain file of its own (a FIFO, device or hard link "
                          f"was put there?); remove it")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno in (errno.ENXIO, errno.ELOOP):  # a FIFO nobody reads; a link put back in between
            raise not_plain from None
        raise UserError(f"cannot open the broker's log {path}: {exc.strerror}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        raise not_plain
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return fd


def _hand_over(path: Path, uid: int, gid: int) -> None:
    """Give a persistence file to the broker's account, through the file itself: never a link, a FIFO,
    or a file with another name (a hard link to one of root's)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return
    try:
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode) and info.st_nlink == 1:
            os.fchown(fd, uid, gid)
    finally:
        os.close(fd)


def _refuse_if_writable_by(path: Path, uid: int, gid: int, key: str) -> None:
    """A file Mosquitto reads must not be one its account can rewrite or replace: not the file, nor a
    folder above it (a sticky folder lets it replace only what it owns), by the path given or the real one."""
    given = Path(os.path.abspath(path))
    chains = [given.parents, Path(os.path.realpath(path)).parents]
    for part in [Path(os.path.realpath(path)), *chains[0], *chains[1]]:
        try:
            info = os.stat(part)
        except OSError:
            continue
        sticky = part.is_dir() and info.st_mode & stat.S_ISVTX and part not in (given, Path(os.path.realpath(path)))
        if _may_write(info, uid, gid) and not sticky:
            raise UserError(f"{key} {path}: the {MOSQUITTO_USER} account can change {part} (owner {info.st_uid}, "
                            f"mode {stat.filemode(info.st_mode)}); make it root's and not writable by that account "
                            f"(edgeopt fleet provision does so for its password and ACL files)")


def _may_write(info: os.stat_result, uid: int, gid: int) -> bool:
    if info.st_uid == uid:
        return bool(info.st_mode & stat.S_IWUSR)
    if info.st_gid == gid:
        return bool(info.st_mode & stat.S_IWGRP)
    return bool(info.st_mode & stat.S_IWOTH)


def _serve_amqtt(port: int, host: str = "127.0.0.1") -> None:
    import asyncio

    from edgeopt_agent.errors import require

    Broker = require("amqtt.broker", "fleet", "the embedded MQTT broker").Broker

    config = {
        "listeners": {"default": {"type": "tcp", "bind": f"[{host}]:{port}" if ":" in host else f"{host}:{port}"}},
        "plugins": {"amqtt.plugins.authentication.AnonymousAuthPlugin": {"allow_anonymous": True}},
    }

    async def serve() -> None:
        # SIGTERM ends the process at once: amqtt keeps nothing across a restart anyway, and its
        # own shutdown goes on acknowledging messages it no longer delivers.
        broker = Broker(config)
        await broker.start()
        await asyncio.Event().wait()

    asyncio.run(serve())


def start_broker(kind: Optional[str] = None, workdir: Optional[Path] = None) -> MqttBroker:
    """A started broker in `workdir` (default: a new temporary directory); the caller stops it."""
    return MqttBroker(workdir or Path(tempfile.mkdtemp(prefix="edgeopt-broker-")), kind).start()


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4) or sys.argv[1] != "amqtt":
        sys.exit("usage: python -m edgeopt.fleet.broker amqtt PORT [HOST]")
    _serve_amqtt(int(sys.argv[2]), *sys.argv[3:])
