"""A local MQTT broker on a free port, for the quickstart, the benchmark scripts and the tests.

Mosquitto when its binary is there (MQTT v5; persistence in the work dir, saved after every
AUTOSAVE_CHANGES changes as scripts/mosquitto.conf does, so sessions and queued messages survive
a stop/start, and most of them a crash, like a production broker's), else an embedded amqtt broker (MQTT 3.1.1
only, in memory) in a child process, so everything also works on a machine without Mosquitto.
`EDGEOPT_BROKER=amqtt` (or `kind="amqtt"`) forces the embedded one.

Run as a module it is that embedded broker: ``python -m edgeopt.fleet.broker amqtt PORT``.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional, Sequence

MOSQUITTO_FALLBACK = "/usr/sbin/mosquitto"
START_TIMEOUT_S = 15.0
# Save the persistence file after this many changes (queued messages, subscriptions, retained
# messages) rather than once a minute; scripts/mosquitto.conf ships the same.
AUTOSAVE_CHANGES = 100


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def mosquitto_binary() -> Optional[str]:
    found = shutil.which("mosquitto")
    if found:
        return found
    return MOSQUITTO_FALLBACK if os.access(MOSQUITTO_FALLBACK, os.X_OK) else None


class MqttBroker:
    """`host`, `port`, `kind` ("mosquitto" or "amqtt"); `stop()` / `start()` keep the same port."""

    def __init__(self, workdir: Path, kind: Optional[str] = None, port: Optional[int] = None,
                 listener_settings: Sequence[str] = ()):
        """`listener_settings`: Mosquitto lines for the listener (TLS, password_file, acl_file...)
        in place of `allow_anonymous true`."""
        requested = kind or os.environ.get("EDGEOPT_BROKER") or os.environ.get("EDGEOPT_TEST_BROKER")
        if requested not in (None, "mosquitto", "amqtt"):
            raise ValueError(f"unknown broker kind {requested!r}; use mosquitto or amqtt")
        binary = mosquitto_binary()
        if requested == "mosquitto" and binary is None:
            raise RuntimeError("mosquitto is not installed")
        self.kind = requested or ("mosquitto" if binary else "amqtt")
        self.host = "127.0.0.1"
        self.port = port or free_port()
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.workdir / f"{self.kind}.log"
        self._binary = binary
        self._listener_settings = list(listener_settings)
        if self._listener_settings and self.kind != "mosquitto":
            raise RuntimeError("listener settings need mosquitto, which is not installed")
        self._process: Optional[subprocess.Popen] = None

    @property
    def mqtt_v5(self) -> bool:
        return self.kind == "mosquitto"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> "MqttBroker":
        if self.running:
            return self
        log = open(self.log_path, "ab")
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
        return [sys.executable, "-m", __name__, "amqtt", str(self.port)]

    def _write_mosquitto_config(self) -> Path:
        path = self.workdir / "mosquitto.conf"
        path.write_text(
            "\n".join(
                [
                    f"listener {self.port} {self.host}",
                    *(self._listener_settings or ["allow_anonymous true"]),
                    "persistence true",
                    f"persistence_location {self.workdir}/",
                    "autosave_on_changes true",
                    f"autosave_interval {AUTOSAVE_CHANGES}",
                    "max_queued_messages 100000",
                    "max_inflight_messages 100",
                    "log_dest stderr",
                    "log_type error",
                    "log_type warning",
                    "log_type notice",
                    # As root, mosquitto would switch to the 'mosquitto' user, who may not write here.
                    "user root" if os.geteuid() == 0 else "",
                    "",
                ]
            )
        )
        return path

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


def _serve_amqtt(port: int) -> None:
    import asyncio

    from edgeopt_agent.errors import require

    Broker = require("amqtt.broker", "fleet", "the embedded MQTT broker").Broker

    config = {
        "listeners": {"default": {"type": "tcp", "bind": f"127.0.0.1:{port}"}},
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
    if len(sys.argv) != 3 or sys.argv[1] != "amqtt":
        sys.exit("usage: python -m edgeopt.fleet.broker amqtt PORT")
    _serve_amqtt(int(sys.argv[2]))
