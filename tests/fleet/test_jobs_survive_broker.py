"""Jobs reach a board that was away whatever the broker does (issue 38, item 6).

Jobs are queued for an offline agent (its persistent session is at the broker), then the broker
is killed with SIGKILL and started again on the same port and data: a broker that saves once a
minute loses every job it queued (and the agent's session with it). The jobs are kept in the
fleet database as `edgeopt deploy --db` keeps them, and the collector sends each again until the
board answers: every one is answered, once. Real Mosquitto, the real Agent and Collector.

Each job names a model file the board does not have: the agent answers `missing_artifact` at
once, which is an answer all the same (the benchmark itself is not what is tested here).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import pytest
from mqtt_broker import MqttBroker, mosquitto_binary
from harness import Threaded, running_agent, wait_until
from test_delivery_confirmed import MinutelyMosquitto

from edgeopt.deploy.api import keep_jobs
from edgeopt.deploy.mqtt import HostClient
from edgeopt.fleet.collector import Collector
from edgeopt.fleet.jobs import JobQueue
from edgeopt.fleet.store import open_store
from edgeopt_agent import wire
from edgeopt_agent.wire.backoff import Backoff
from edgeopt_agent.wire.broker import BrokerSettings

DEVICE = "away-dev"
WAIT_S = 50.0


def start_agent(tmp_path, broker):
    return running_agent([], broker, tmp_path / "agent", DEVICE, confirm_timeout=2.0)


@dataclass
class Outcome:
    queued: int
    answered: int  # distinct jobs answered
    results: int  # result messages stored (more than `answered` would be a job run twice)
    resent: int  # copies the collector sent


def answered_jobs(store):
    rows = store.results(device=DEVICE, latest=False)
    return {r["job_id"] for r in rows}, len(rows)


def queued_for_an_offline_board_then_broker_killed(tmp_path, broker, count, resend_s):
    """The scenario; `resend_s` None is the collector without kept jobs (as before issue 38)."""
    url = f"sqlite:///{tmp_path}/fleet.db"
    store = open_store(url)
    started = []
    try:
        collector = Collector(store, BrokerSettings(broker.host, broker.port), client_id="away-collector",
                              backoff=Backoff(0.1, 0.5), job_resend_s=resend_s)
        started.append(Threaded(collector.run, progress_interval_s=0.05))
        wait_until(lambda: collector.connected, "the collector to connect", WAIT_S)
        agent, running = start_agent(tmp_path, broker)  # once, so the broker holds a session for it
        running.close()

        jobs = {n: wire.benchmark_job(DEVICE, n + 1, f"job-{n}", "cd" * 32, "onnx", path="models/none.onnx",
                                      size=10) for n in range(count)}
        if resend_s is not None:
            keep_jobs(url, [(DEVICE, job) for job in jobs.values()], resend_s)  # as `edgeopt deploy --db` does
        host = HostClient(BrokerSettings(broker.host, broker.port))
        host.connect()
        try:
            for info in [host.publish(wire.jobs_topic(DEVICE), job.encode()) for job in jobs.values()]:
                host.wait_acked(info)  # the broker has every one, queued for the offline board
        finally:
            host.close()
        broker.kill()  # SIGKILL: what it had not saved is gone
        broker.start()  # same port, same persistence folder
        agent, running = start_agent(tmp_path, broker)
        started.append(running)

        def settled():
            answered, _ = answered_jobs(store)
            return len(answered) == count or (resend_s is None and time.monotonic() > quiet_until[0])

        quiet_until = [time.monotonic() + 10.0]
        wait_until(settled, f"all {count} jobs to be answered", WAIT_S)
        answered, results = answered_jobs(store)
        return Outcome(count, len(answered), results, collector.counters.jobs_resent)
    finally:
        for each in reversed(started):
            each.close()
        store.close()


@pytest.fixture
def minutely_broker(tmp_path):
    if mosquitto_binary() is None:
        pytest.skip("needs mosquitto: the embedded amqtt broker neither persists nor queues for an offline session")
    broker = MinutelyMosquitto(tmp_path / "broker", kind="mosquitto").start()
    yield broker
    broker.kill()


def check(outcome: Outcome, tmp_path) -> None:
    print(f"\n{outcome.queued} jobs queued for an offline board, broker killed: {outcome.answered} answered "
          f"({outcome.results} results, {outcome.resent} copies sent again by the collector)")
    assert outcome.answered == outcome.queued
    assert outcome.results == outcome.queued  # each run once
    with open_store(f"sqlite:///{tmp_path}/fleet.db") as store:
        assert JobQueue(store.db).counts() == {"waiting": 0, "answered": outcome.queued, "expired": 0}


def test_jobs_queued_for_an_offline_board_survive_a_broker_kill(minutely_broker, tmp_path):
    check(queued_for_an_offline_board_then_broker_killed(tmp_path, minutely_broker, 50, resend_s=1.0), tmp_path)


@pytest.mark.slow
def test_a_thousand_jobs_queued_for_an_offline_board_survive_a_broker_kill(minutely_broker, tmp_path):
    check(queued_for_an_offline_board_then_broker_killed(tmp_path, minutely_broker, 1000, resend_s=1.0), tmp_path)


@pytest.mark.slow
def test_the_shipped_broker_settings_too(tmp_path):
    """The broker as `edgeopt fleet broker` and the tests run it: saving after every 100 changes."""
    if mosquitto_binary() is None:
        pytest.skip("needs mosquitto")
    broker = MqttBroker(tmp_path / "broker", kind="mosquitto").start()
    try:
        check(queued_for_an_offline_board_then_broker_killed(tmp_path, broker, 1000, resend_s=1.0), tmp_path)
    finally:
        broker.kill()
