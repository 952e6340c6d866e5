"""Nothing measured is lost when the broker dies: the agent keeps each result until the collector
confirms it committed it, and sends again what was not confirmed.

Real Mosquitto (persistence in the test's dir, killed with SIGKILL and restarted on the same
port and dir), the real Agent and Collector objects in this process, SQLite for both. Each test
runs against a broker that saves after every 100 changes (scripts/mosquitto.conf) and against one
that saves once a minute (as that file did before): that one loses everything it acknowledged
since its start, sessions included, and still no result may be lost.
"""
import sqlite3
import threading
import time
import uuid

import pytest
from harness import Threaded, running_agent, wait_until
from mqtt_broker import MqttBroker, mosquitto_binary

from edgeopt.fleet.broker import AUTOSAVE_CHANGES
from edgeopt.fleet.collector import Collector
from edgeopt.fleet.store import open_store
from edgeopt_agent import wire
from edgeopt_agent.wire.backoff import Backoff
from edgeopt_agent.wire.broker import BrokerSettings

pytestmark = pytest.mark.slow

DEVICE = "burst-dev"
COLLECTOR_ID = "delivery-collector"
WAIT_S = 25.0


class MinutelyMosquitto(MqttBroker):
    """The local Mosquitto, but saving its state only once a minute."""

    def _mosquitto_config(self):
        text = super()._mosquitto_config().replace("autosave_on_changes true", "autosave_on_changes false")
        return text.replace(f"autosave_interval {AUTOSAVE_CHANGES}", "autosave_interval 60")


@pytest.fixture(params=["saves-on-changes", "saves-every-minute"])
def broker(request, tmp_path):
    if mosquitto_binary() is None:
        pytest.skip("needs mosquitto: the embedded amqtt broker neither persists its state nor queues QoS 1 "
                    "messages for an offline session, so a broker crash cannot be tested with it")
    kind = MqttBroker if request.param == "saves-on-changes" else MinutelyMosquitto
    broker = kind(tmp_path / "broker", kind="mosquitto").start()
    yield broker
    broker.kill()


def start_agent(closing, tmp_path, broker):
    # A broker that lost the collector's session drops what arrives before the collector subscribes again:
    # sent again once overdue.
    agent, _ = running_agent(closing, broker, tmp_path / "agent", DEVICE, confirm_timeout=2.0)
    return agent


def start_collector(closing, url, broker):
    collector = Collector(open_store(url), BrokerSettings(broker.host, broker.port), client_id=COLLECTOR_ID,
                          backoff=Backoff(0.1, 0.5))
    thread = Threaded(collector.run, progress_interval_s=0.05)
    closing.append(thread)
    wait_until(lambda: collector.connected, "the collector to connect")
    time.sleep(0.2)  # its SUBSCRIBE is on the wire right after CONNACK
    return collector, thread


def produce(agent, first, count, pause_s=0.002):
    """Results queued exactly as the job worker queues them."""
    for n in range(first, first + count):
        body = wire.result_body(f"job-{n}", wire.BENCHMARK_JOB, uuid.uuid4().hex,
                                    result={"ok": True, "latency_ms": {"p50": 1.0 + n}})
        agent.outbox.add(wire.RESULTS, wire.RESULT_TYPE, body)
        time.sleep(pause_s)


def stored_results(path):
    with sqlite3.connect(str(path)) as db:
        return db.execute("SELECT job_id, seq FROM results WHERE device_id = ?", (DEVICE,)).fetchall()


def assert_each_stored_once(path, count):
    rows = stored_results(path)
    assert len(rows) == count
    assert sorted(job for job, _ in rows) == sorted(f"job-{n}" for n in range(count))
    assert sorted(seq for _, seq in rows) == list(range(1, count + 1))
    with sqlite3.connect(str(path)) as db:
        assert db.execute("SELECT COUNT(*) FROM gaps WHERE filled_at IS NULL").fetchone() == (0,)


def test_broker_killed_mid_burst_loses_no_result(broker, tmp_path, closing):
    db_path = tmp_path / "fleet.db"
    collector, _ = start_collector(closing, f"sqlite:///{db_path}", broker)
    agent = start_agent(closing, tmp_path, broker)
    burst = threading.Thread(target=produce, args=(agent, 0, 1000))
    burst.start()
    wait_until(lambda: len(stored_results(db_path)) >= 300, "the first results to be stored")
    broker.kill()
    killed_at = len(stored_results(db_path))
    time.sleep(0.3)
    broker.start()  # same port, same persistence dir
    burst.join(WAIT_S)
    wait_until(lambda: len(stored_results(db_path)) >= 1000 and len(agent.outbox) == 0,
               "every result to be stored and confirmed")
    assert 300 <= killed_at < 1000, killed_at  # the kill came mid-burst
    assert_each_stored_once(db_path, 1000)
    assert collector.counters.rejected == 0


def test_collector_away_then_broker_killed_loses_no_result(broker, tmp_path, closing):
    db_path = tmp_path / "fleet.db"
    url = f"sqlite:///{db_path}"
    collector, first = start_collector(closing, url, broker)
    agent = start_agent(closing, tmp_path, broker)
    produce(agent, 0, 200)
    wait_until(lambda: len(stored_results(db_path)) == 200 and len(agent.outbox) == 0, "200 stored and confirmed")

    first.close()  # the collector goes away; the broker queues for its persistent session
    closing.remove(first)
    produce(agent, 200, 800)
    wait_until(lambda: agent.sender.unconfirmed == 800, "the broker to acknowledge all 800")
    assert len(agent.outbox) == 800  # acknowledged by the broker, not confirmed: kept
    broker.kill()
    broker.start()
    wait_until(lambda: agent.session.connected, "the agent to reconnect")

    collector, _ = start_collector(closing, url, broker)
    wait_until(lambda: len(stored_results(db_path)) >= 1000 and len(agent.outbox) == 0,
               "every result to be stored and confirmed")
    assert_each_stored_once(db_path, 1000)
    if isinstance(broker, MinutelyMosquitto):
        assert agent.sender.resent >= 800  # the broker lost all 800 (and the collector's session): sent again
    assert collector.counters.rejected == 0
