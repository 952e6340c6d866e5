"""The job worker and the agent's loop keep going whatever the input or the state file does."""
import json
import shutil
import sqlite3
import ssl
import threading
import time
from pathlib import Path

import pytest
from harness import QUICK_BENCH, wait_until, write_tiny_onnx

from edgeopt_agent import wire
from edgeopt_agent.wire.backoff import Backoff
from edgeopt_agent.daemon.inbox import Inbox
from edgeopt_agent.daemon.jobs import JobHandler
from edgeopt_agent.daemon.outbox import Outbox
from edgeopt_agent.daemon.store import STATE_FILE, Store
from edgeopt_agent.daemon.worker import JobWorker

DEVICE = "dev-1"


class FailingInbox(Inbox):
    """An inbox whose state file fails the first `failures` takes, as a full or locked disk does."""

    def __init__(self, store, failures):
        super().__init__(store)
        self.failures = failures

    def take(self):
        if self.failures:
            self.failures -= 1
            raise sqlite3.OperationalError("disk I/O error")
        return super().take()


class FailingOutbox(Outbox):
    def __init__(self, store, device_id, failures):
        super().__init__(store, device_id)
        self.failures = failures

    def add(self, *args, **kwargs):
        if self.failures:
            self.failures -= 1
            raise sqlite3.OperationalError("database or disk is full")
        return super().add(*args, **kwargs)


@pytest.fixture
def store(tmp_path):
    store = Store(tmp_path / STATE_FILE)
    yield store
    store.close()


def run_worker(store, inbox, outbox, data_dir):
    worker = JobWorker(store, inbox, outbox, JobHandler(DEVICE, data_dir), backoff=Backoff(0.01, 0.01))
    worker.start()
    worker.notify()
    wait_until(lambda: len(outbox) == 1)
    worker.stop()
    return worker, json.loads(outbox.pending()[0].payload)["body"]


def attempts(store):
    with store.transaction() as db:
        return db.execute("SELECT attempts FROM inbox").fetchone()[0]


def test_a_job_that_cannot_be_read_is_answered_and_removed(store, tmp_path):
    inbox = Inbox(store)
    inbox.add(b"[" * 5000)
    _, answer = run_worker(store, inbox, Outbox(store, DEVICE), tmp_path)
    assert answer["error"]["kind"] == "malformed_message"
    assert inbox.open_count() == 0


def test_the_worker_survives_a_state_file_that_fails_to_give_the_next_job(store, tmp_path):
    inbox = FailingInbox(store, failures=3)
    inbox.add(b"{not json")
    worker, answer = run_worker(store, inbox, Outbox(store, DEVICE), tmp_path)
    assert answer["error"]["kind"] == "malformed_message" and inbox.failures == 0


def test_a_measurement_is_kept_while_storing_it_fails(store, tmp_path):
    sha = write_tiny_onnx(tmp_path / "models" / "tiny.onnx")
    inbox = Inbox(store)
    inbox.add(wire.benchmark_job(DEVICE, 1, "j", sha, "onnx", path="models/tiny.onnx", **QUICK_BENCH).encode())
    outbox = FailingOutbox(store, DEVICE, failures=3)
    _, answer = run_worker(store, inbox, outbox, tmp_path)
    assert answer["ok"] is True, answer["error"]  # not "interrupted": the job ran once, its write was retried
    assert attempts(store) == 1 and inbox.open_count() == 0


def test_stop_waits_for_a_job_being_taken_so_busy_tells_the_truth(store, tmp_path):
    entered, release = threading.Event(), threading.Event()

    class SlowInbox(Inbox):
        def take(self):
            entered.set()
            release.wait(5)
            return super().take()

    inbox = SlowInbox(store)
    inbox.add(b"{not json")
    worker = JobWorker(store, inbox, Outbox(store, DEVICE), JobHandler(DEVICE, tmp_path))
    worker.start()
    assert entered.wait(5)
    stopped = threading.Event()
    stopper = threading.Thread(target=lambda: (worker.stop(), stopped.set()))
    stopper.start()
    time.sleep(0.2)
    assert not stopped.is_set()  # a job is being taken: stop() may not report the store free yet
    release.set()
    stopper.join(5)
    assert stopped.is_set()
    worker._thread.join(5)
    assert not worker.is_alive()


def test_telemetry_that_cannot_be_stored_does_not_end_the_agent(tmp_path):
    from edgeopt_agent.daemon.agent import Agent
    from edgeopt_agent.daemon.config import build_config

    agent = Agent(build_config({"device_id": DEVICE, "data_dir": str(tmp_path / "data")}))
    agent.outbox = FailingOutbox(agent.store, DEVICE, failures=1)
    try:
        agent.send_telemetry()  # the disk is full: this reading is skipped
        agent.send_telemetry()
        assert len(agent.outbox) == 1
    finally:
        agent.store.close()
        agent._lock.close()


def test_a_tls_file_gone_before_the_mqtt_311_fallback_does_not_end_the_session(tmp_path):
    from edgeopt_agent.wire.broker import BrokerSettings
    from edgeopt_agent.wire.session import V5, V311, MqttSession

    bundle = Path(ssl.get_default_verify_paths().cafile or "")
    if not bundle.is_file():
        pytest.skip("no system CA bundle to stand in for the broker's CA")
    ca = tmp_path / "ca.pem"
    shutil.copy(bundle, ca)
    session = MqttSession(BrokerSettings("localhost", 8883, tls=True, tls_ca=ca), "c", before_connect=None,
                          on_connect=None, on_message=lambda *a: None, on_ack=None, on_tick=None,
                          on_new_client=lambda: None)
    ca.unlink()
    assert session._fall_back_to_v311() is False and session.protocol == V5
    shutil.copy(bundle, ca)
    assert session._fall_back_to_v311() is True and session.protocol == V311
