"""The outbox sender: a window of messages in flight, rows deleted only on PUBACK."""
import pytest

from edgeopt_agent.daemon.outbox import Outbox
from edgeopt_agent.daemon.sender import RETRY_AFTER_S, OutboxSender
from edgeopt_agent.daemon.store import Store


class RecordingSession:
    """Stands in for the MQTT session: records publishes, hands out packet ids."""

    def __init__(self):
        self.published = []

    def publish(self, topic, payload, retain):
        self.published.append(payload)
        return len(self.published)


@pytest.fixture
def outbox(tmp_path):
    return Outbox(Store(tmp_path / "agent.db"), "dev-1")


def fill(outbox, count):
    return [outbox.add("telemetry", "telemetry", {"n": n}) for n in range(count)]


def test_sends_a_window_and_deletes_only_acknowledged_rows(outbox):
    fill(outbox, 5)
    session, sender = RecordingSession(), OutboxSender(outbox, window=2)
    sender.tick(session.publish)
    assert len(session.published) == 2
    sender.tick(session.publish)
    assert len(session.published) == 2  # window full until a PUBACK
    sender.acknowledged(1, True)
    assert len(outbox) == 5  # deletion is batched into the next tick
    sender.tick(session.publish)
    assert len(outbox) == 4 and len(session.published) == 3
    for packet_id in (2, 3):
        sender.acknowledged(packet_id, True)
    sender.tick(session.publish)
    assert len(outbox) == 2 and len(session.published) == 5
    assert not sender.idle()
    sender.acknowledged(4, True)
    sender.acknowledged(5, True)
    sender.flush()
    assert len(outbox) == 0 and sender.idle()


def test_new_messages_are_picked_up_and_unknown_acks_ignored(outbox):
    session, sender = RecordingSession(), OutboxSender(outbox, window=10)
    sender.tick(session.publish)
    assert session.published == []
    fill(outbox, 1)
    sender.acknowledged(99, True)  # e.g. the PUBACK of a status message
    sender.tick(session.publish)
    assert len(session.published) == 1


def test_refused_messages_stay_and_are_retried_later(outbox):
    fill(outbox, 1)
    now = [0.0]
    session, sender = RecordingSession(), OutboxSender(outbox, window=5, clock=lambda: now[0])
    sender.tick(session.publish)
    sender.acknowledged(1, False)
    sender.tick(session.publish)
    assert len(session.published) == 1 and len(outbox) == 1
    now[0] = RETRY_AFTER_S + 0.1
    sender.tick(session.publish)
    assert session.published == [session.published[0]] * 2
    sender.acknowledged(2, True)
    sender.flush()
    assert len(outbox) == 0


def test_a_new_client_starts_over_from_the_oldest_unacknowledged_row(outbox):
    fill(outbox, 3)
    session, sender = RecordingSession(), OutboxSender(outbox, window=5)
    sender.tick(session.publish)
    sender.acknowledged(1, True)
    sender.restart()
    sender.tick(session.publish)
    assert len(session.published) == 5  # rows 2 and 3 again; row 1 is gone
    assert session.published[3:] == session.published[1:3]
