"""A local MQTT broker on a free port, for the quickstart, the benchmark scripts and the tests.

Mosquitto when its binary is there (MQTT v5; persistence in the work dir, saved after every
AUTOSAVE_CHANGES changes as scripts/mosquitto.conf does, so sessions and queued messages survive
a stop/start, and most of them a crash, like a production broker's), else an embedded amqtt broker (MQTT 3.1.1
only, in memory) in a child process, so everything also works on a machine without Mosquitto.
`EDGEOPT_BROKER=amqtt` (or `kind="amqtt"`) forces the embedded one. `edgeopt fleet broker` runs
one in the foreground with the settings of scripts/mosquitto.conf (`mosquitto_settings`).

Run as a module it is that embedded broker: ``python -m edgeopt.fleet.broker amqtt PORT [HOST]``.
"""
from __future__ import annotations

import errno
import os
import pwd
import shutil
import signal
import socket
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
        log = os.fdopen(_open_not_through_links(self.log_path, os.O_APPEND), "ab")
        self._process = subprocess.Popen(self._command(), stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir)
        log.close()
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
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def _command(self) -> List[str]:
        if self.kind == "mosquitto":
            return [self._binary, "-c", str(self._write_mosquitto_config())]
        return [sys.executable, "-m", __name__, "amqtt", str(self.port), self.host]

    def _write_mosquitto_config(self) -> Path:
        path = self.workdir / "mosquitto.conf"
        user = self._user_setting()
        self._stays_root = user == "user root"
        _write_not_through_links(path,
            "\n".join(
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
        )
        return path

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
        os.chown(self.workdir, account.pw_uid, account.pw_gid)
        for path in self.workdir.glob("mosquitto.db*"):
            # What that user could have put there is never followed: a link would hand its target over.
            if path.is_file() and not path.is_symlink():
                os.chown(path, account.pw_uid, account.pw_gid, follow_symlinks=False)
        return ""

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


def _open_not_through_links(path: Path, mode: int) -> int:
    """A file in the broker's folder, opened for writing without following a link someone put in its
    place (as root, the folder's files may have been written by the broker's own user)."""
    if path.is_symlink():
        path.unlink()
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | mode, 0o644)


def _write_not_through_links(path: Path, text: str) -> None:
    with os.fdopen(_open_not_through_links(path, os.O_TRUNC), "w") as handle:
        handle.write(text)


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
