"""What the tests of agents, brokers and fleets share, written once.

    wait_until(predicate, what)        poll until truthy; its value, or AssertionError naming what never came
    NoSensors                          an in-process agent's sensors: none (its telemetry is its own counters)
    Threaded(obj.run, **kwargs)        an object's `run(stop)` on a thread, as its command runs it; close() stops it
    Closing                            what a test started (agents, listeners, threads), closed last first
    running_agent(started, ...)        the real Agent in this process against a broker, connected
    FleetKey(folder)                   the fleet's Ed25519 key: signs jobs; `trusted` is what an agent loads
    AgentProcess(broker, data_dir)     `python -m edgeopt_agent.daemon` as a subprocess
    write_tiny_onnx(path)              y = relu(x) on float[1, 4]; QUICK_BENCH: a benchmark that takes a moment

Fixtures built on them (`closing`, `mqtt_broker`) live in tests/conftest.py; tests/ is on the path, as it is
for mqtt_broker.py and model_files.py.
"""
from __future__ import annotations

import base64
import hashlib
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, List, Optional

WAIT_S = 30.0
# A benchmark that takes a moment: a few runs, no idle-power baseline.
QUICK_BENCH = {"runs": 5, "duration_s": 0, "warmup_runs": 1, "warmup_s": 0, "idle_s": 0, "timeout_s": 60}


def wait_until(predicate: Callable[[], Any], what: str = "the condition", timeout: float = WAIT_S,
               interval: float = 0.02) -> Any:
    """The first truthy value of `predicate()`, polled every `interval` s; AssertionError after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


class NoSensors:
    """An in-process agent's sensors: none, so its telemetry is the agent's own counters."""

    def snapshot(self):
        return {}


class Threaded:
    """Runs an object's `run(stop)` on a thread, as its command would."""

    def __init__(self, target: Callable[..., Any], **kwargs: Any):
        self.stop = threading.Event()
        self.thread = threading.Thread(target=target, args=(self.stop,), kwargs=kwargs, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive()


class Closing(list):
    """What a test started, each with a close(): closed last first at the test's end (the `closing` fixture),
    or earlier by the test itself; each once."""

    def close(self) -> None:
        while self:
            self.pop().close()


def running_agent(started: List[Any], broker, data_dir: Path, device_id: str, timeout: float = WAIT_S,
                  **settings: Any):
    """(agent, its thread): the real Agent (no sensors) in this process, run on a thread appended to `started`
    (a `closing` list stops it), once it is connected (within `timeout` s). `settings` add to or replace a quick agent's (no
    telemetry for an hour, reconnecting within half a second)."""
    from edgeopt_agent.daemon.agent import Agent
    from edgeopt_agent.daemon.config import build_config

    config = build_config({"broker": broker.address, "device_id": device_id, "data_dir": str(data_dir),
                           "telemetry_interval": 3600.0, "reconnect_min": 0.1, "reconnect_max": 0.5, **settings})
    agent = Agent(config, sensors=NoSensors())
    thread = Threaded(agent.run)
    started.append(thread)
    wait_until(lambda: agent.session.connected, "the agent to connect", timeout)
    return agent, thread


class FleetKey:
    """The fleet's Ed25519 key: `sign_job` signs a job body as deploy does, `trusted` is the public key an agent
    loads from `public_path` (needs the cryptography package: callers skip without it)."""

    def __init__(self, folder: Path, name: str = "fleet"):
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519

        from edgeopt_agent import signing

        self.private = ed25519.Ed25519PrivateKey.generate()
        self.public_path = Path(folder) / f"{name}.pub"
        self.public_path.write_bytes(self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        self.trusted = signing.load_public_key(self.public_path)

    def sign_job(self, body):
        from edgeopt_agent import signing, wire

        value = self.private.sign(signing.job_statement(body))
        return wire.Signature("ed25519", self.trusted.key_id, base64.b64encode(value).decode())


class AgentProcess:
    """`python -m edgeopt_agent.daemon` for one device against the test broker; its log beside its data dir."""

    def __init__(self, broker, data_dir: Path, device_id: str = "test-dev", profile: Optional[str] = None,
                 trusted_key: Optional[Path] = None, telemetry_interval: float = 60.0,
                 extra_args: Optional[List[str]] = None):
        self.device_id = device_id
        self.data_dir = Path(data_dir)
        self.log_path = self.data_dir.parent / f"agent-{device_id}.log"
        self.args = [sys.executable, "-m", "edgeopt_agent.daemon", "--broker", broker.address,
                     "--device-id", device_id, "--data-dir", str(self.data_dir),
                     "--telemetry-interval", str(telemetry_interval), "--reconnect-min", "0.5",
                     "--reconnect-max", "1", "--log-level", "debug"]
        if profile is not None:
            self.args += ["--profile", profile]
        if trusted_key is not None:
            self.args += ["--trusted-key", str(trusted_key)]
        self.args += list(extra_args or [])
        self.process: Optional[subprocess.Popen] = None

    def start(self) -> "AgentProcess":
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT)
        return self

    def terminate(self, timeout: float = 20.0) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)

    def pause(self) -> None:
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def kill(self) -> int:
        self.process.kill()
        return self.process.wait(10)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def artifacts(self) -> List[str]:
        folder = self.data_dir / "artifacts"
        return sorted(p.name for p in folder.iterdir()) if folder.exists() else []

    def chunks_held(self, sha256: str) -> int:
        return len(list((self.data_dir / "transfers" / sha256).glob("*.chunk")))

    def close(self) -> None:
        """Killed if still running (a test's end)."""
        if self.alive():
            self.kill()



def tiny_onnx() -> bytes:
    """A one-node ONNX model (y = relu(x), x: float[1, 4]) built with the onnx helper API."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def write_tiny_onnx(path: Path) -> str:
    """The tiny model written to `path`; returns its sha256."""
    data = tiny_onnx()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()
