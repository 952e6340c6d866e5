"""The outbox sender: a window of messages awaiting PUBACK; telemetry and results deleted only when
the collector confirms them, sent again after a reconnect or when their confirmation is overdue."""
import json

import pytest

from edgeopt_agent import wire

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

    def seqs(self, start=0):
        return [json.loads(p)["seq"] for p in self.published[start:]]


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


@pytest.fixture
def outbox(tmp_path):
    return Outbox(Store(tmp_path / "agent.db"), "dev-1")


def fill(outbox, count, kind="telemetry"):
    return [outbox.add(kind, kind.rstrip("s"), {"n": n}) for n in range(count)]


def deliveries(outbox, *envelopes):
    """(id, digest of the queued bytes) of each envelope still queued: what a collector's confirm names."""
    digest = {m.message_id: wire.message_digest(m.payload) for m in outbox.pending(limit=1000)}
    return [(e.id, digest[e.id]) for e in envelopes if e.id in digest]


def ack_all(sender, session, start=1):
    for packet_id in range(start, len(session.published) + 1):
        sender.acknowledged(packet_id, True)


def test_a_window_awaits_puback_and_rows_leave_only_on_confirmation(outbox):
    sent = fill(outbox, 5)
    session, sender = RecordingSession(), OutboxSender(outbox, window=2)
    sender.tick(session.publish)
    sender.tick(session.publish)
    assert len(session.published) == 2  # window full until a PUBACK
    sender.acknowledged(1, True)
    sender.tick(session.publish)
    assert len(session.published) == 3 and len(outbox) == 5  # the PUBACK frees room, forgets nothing
    assert not sender.idle()
    ack_all(sender, session, 2)
    sender.tick(session.publish)
    ack_all(sender, session, 4)
    sender.flush()
    assert sender.idle() and len(outbox) == 5 and sender.unconfirmed == 5

    confirmed = sender.confirmed(deliveries(outbox, sent[0], sent[3]) + [("f" * 32, "f" * 64)])
    assert len(confirmed.rows) == 2  # an unknown id is ignored
    assert len(outbox) == 3 and sender.unconfirmed == 3
    assert len(sender.confirmed(deliveries(outbox, *sent)).rows) == 3
    assert len(outbox) == 0


def test_messages_that_need_no_confirmation_leave_on_puback(outbox):
    fill(outbox, 2, kind="transfer")
    session, sender = RecordingSession(), OutboxSender(outbox, window=5)
    sender.tick(session.publish)
    ack_all(sender, session)
    sender.flush()
    assert len(outbox) == 0


def test_broker_delivery_mode_forgets_on_puback(outbox):
    fill(outbox, 3, kind="results")
    session, sender = RecordingSession(), OutboxSender(outbox, window=5, confirm=False)
    sender.tick(session.publish)
    ack_all(sender, session)
    sender.tick(session.publish)
    assert len(outbox) == 0 and sender.unconfirmed == 0


def test_refused_messages_stay_and_are_retried_later(outbox):
    fill(outbox, 1)
    clock = Clock()
    session, sender = RecordingSession(), OutboxSender(outbox, window=5, clock=clock)
    sender.tick(session.publish)
    sender.acknowledged(1, False)
    sender.tick(session.publish)
    assert len(session.published) == 1 and len(outbox) == 1
    clock.now = RETRY_AFTER_S + 0.1
    sender.tick(session.publish)
    assert session.published == [session.published[0]] * 2


def test_a_reconnect_sends_every_unconfirmed_message_again(outbox):
    sent = fill(outbox, 4)
    session, sender = RecordingSession(), OutboxSender(outbox, window=10)
    sender.tick(session.publish)
    ack_all(sender, session)
    sender.confirmed(deliveries(outbox, sent[1]))
    sender.reconnected()  # e.g. the broker was killed: what it acknowledged may be gone
    sender.tick(session.publish)
    assert session.seqs(4) == [1, 3, 4] and sender.resent == 3
    sender.tick(session.publish)
    assert len(session.published) == 7  # once each


def test_an_overdue_confirmation_is_resent_with_back_off(outbox):
    sent = fill(outbox, 2)
    clock = Clock()
    session = RecordingSession()
    sender = OutboxSender(outbox, window=10, clock=clock, confirm_timeout_s=10, confirm_timeout_max_s=25)
    sender.tick(session.publish)
    ack_all(sender, session)
    clock.now = 9.0
    sender.confirmed(deliveries(outbox, sent[1]))  # the collector is alive: it confirmed the second one
    sender.tick(session.publish)
    assert len(session.published) == 2
    clock.now = 10.5  # the first one is overdue
    sender.tick(session.publish)
    assert session.seqs(2) == [1]
    ack_all(sender, session, 3)
    for now, expected in ((30.0, 3), (30.6, 4), (45.0, 4), (55.7, 5)):  # then 20 s, then capped at 25 s
        clock.now = now
        sender.confirmed([])  # other messages keep being confirmed
        sender.tick(session.publish)
        assert len(session.published) == expected, now
        ack_all(sender, session, len(session.published))


def test_without_any_confirmation_one_probe_at_a_time(outbox):
    fill(outbox, 50)
    clock = Clock()
    session = RecordingSession()
    sender = OutboxSender(outbox, window=100, clock=clock, confirm_timeout_s=10, confirm_timeout_max_s=40)
    sender.tick(session.publish)
    ack_all(sender, session)
    probes = []
    for second in range(11, 120):
        clock.now = float(second)
        before = len(session.published)
        sender.tick(session.publish)
        ack_all(sender, session, before + 1)
        probes += [second] * (len(session.published) - before)
    assert probes == [11, 21, 41, 81]  # one message each time, the gaps doubling up to the cap
    assert len(outbox) == 50


def test_a_new_client_starts_over_from_the_oldest_row(outbox):
    sent = fill(outbox, 3)
    session, sender = RecordingSession(), OutboxSender(outbox, window=5)
    sender.tick(session.publish)
    sender.acknowledged(1, True)
    sender.confirmed(deliveries(outbox, sent[0]))
    sender.restart()
    sender.tick(session.publish)
    assert session.seqs(3) == [2, 3]


def test_a_confirmation_before_the_puback_forgets_the_message_all_the_same(outbox):
    sent = fill(outbox, 1)
    session, sender = RecordingSession(), OutboxSender(outbox, window=5)
    sender.tick(session.publish)
    sender.confirmed(deliveries(outbox, sent[0]))
    sender.acknowledged(1, True)
    sender.reconnected()
    sender.tick(session.publish)
    assert len(session.published) == 1 and len(outbox) == 0
