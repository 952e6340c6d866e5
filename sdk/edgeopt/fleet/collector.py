"""The collector: subscribes to every device's status, telemetry and results and stores them.

It rides on the agent's MQTT session (edgeopt_agent.wire.session: MQTT v5 with fallback to
3.1.1, persistent session, reconnect with back-off) with one change: a message is acknowledged
only after the transaction that stored it has committed. Messages are committed in batches —
when `max_batch` are waiting, when nothing more is waiting on the socket, or after `max_wait_s`
— so the database's commit cost is shared; until its PUBACK the broker keeps each message, and a
collector that dies before committing gets it again on reconnect (stored once, by message id).

After each commit it tells every device whose messages were in the batch which of them are
committed (stored now or already stored) or rejected for good, on the device's confirm topic:
the agent forgets a message only then, so a broker that dies with messages it had acknowledged
costs nothing (the agent sends them again). With a collector key each confirm is signed, and an
agent with a trusted key acts on no other (edgeopt_agent.confirm_signing).

With `shared_group` the subscriptions are MQTT v5 shared subscriptions ($share/GROUP/...), so
several collectors split the devices' messages between them.

It also sends again each job that `edgeopt deploy --db` kept in the database until its board
answers or the job expires (edgeopt.fleet.jobs), so a job reaches a board that was away whatever
the broker lost meanwhile.
"""
from __future__ import annotations

import json
import logging
import socket
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence, Tuple

from edgeopt_agent import wire
from edgeopt_agent.wire.backoff import Backoff
from edgeopt_agent.wire.broker import BrokerSettings
from edgeopt_agent.wire.session import V5, Message, MqttSession, Received

from ..errors import UserError
from .jobs import DEFAULT_RESEND_S, JobQueue
from .store import FleetStore
from .messages import KINDS
from .writer import DUPLICATE, NOT_CONFIRMED, REJECTED, STORED, IngestOutcome

if TYPE_CHECKING:
    from ..deploy.collector_keys import CollectorKey

log = logging.getLogger(__name__)

PRESENCE_ROOT = "edgeopt/collectors"
DEFAULT_MAX_BATCH = 500
DEFAULT_MAX_WAIT_S = 0.05
JOB_CHECK_S = 1.0  # how often the kept jobs are looked at for one due to be sent again


def default_client_id(shared_group: Optional[str] = None) -> str:
    """Fixed per host (and share group), so the broker keeps this collector's session across restarts."""
    host = "".join(c if c.isalnum() or c in "-_." else "-" for c in socket.gethostname().split(".")[0])
    return "-".join(part for part in ("edgeopt-collector", shared_group, host or "host") if part)


def subscriptions(shared_group: Optional[str] = None) -> List[str]:
    if shared_group is None:
        return [wire.subscription(kind) for kind in KINDS]  # every message kind a board sends the fleet
    return [wire.shared_subscription(shared_group, kind) for kind in KINDS]


@dataclass(frozen=True)
class Delivery:
    topic: str
    payload: bytes
    mid: int
    qos: int
    connection: int  # which connection it came on: a PUBACK is only valid on that one
    received: float


@dataclass
class Counters:
    stored: int = 0
    duplicate: int = 0
    rejected: int = 0
    new_gaps: int = 0
    missing: int = 0
    filled: int = 0
    batches: int = 0
    confirmed: int = 0  # message ids confirmed to their devices
    jobs_resent: int = 0  # kept jobs sent again to boards that had not answered them
    failed_commits: int = 0
    last_error: Optional[str] = None


class Collector:
    def __init__(
        self,
        store: FleetStore,
        broker: BrokerSettings,
        client_id: Optional[str] = None,
        shared_group: Optional[str] = None,
        max_batch: int = DEFAULT_MAX_BATCH,
        max_wait_s: float = DEFAULT_MAX_WAIT_S,
        backoff: Optional[Backoff] = None,
        shutdown_timeout_s: float = 10.0,
        collector_key: Optional["CollectorKey"] = None,
        job_resend_s: Optional[float] = DEFAULT_RESEND_S,
    ):
        """`collector_key`: signs every confirm (`edgeopt.deploy.collector_keys.CollectorKey.sign`); without
        one, confirms are plain and agents with a trusted key ignore them (and keep re-sending).
        `job_resend_s`: how long after a kept job was sent it is sent again (doubling each time) while its
        board has not answered; None sends none again."""
        if max_batch < 1 or max_wait_s < 0:
            raise UserError(f"batches need max_batch >= 1 and max_wait_s >= 0, got {max_batch} and {max_wait_s}")
        self.store = store
        self.broker = broker
        self.shared_group = shared_group
        self.client_id = client_id or default_client_id(shared_group)
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.shutdown_timeout_s = shutdown_timeout_s
        self.collector_key = collector_key
        self._told_expired = False
        self.counters = Counters()
        self.error: Optional[str] = None  # set when the collector cannot go on (then it stops)
        self._pending: List[Delivery] = []
        self._connection = 0
        self._retry_at = 0.0
        self._retry = Backoff(0.5, 30.0)
        self._confirm_seq = 0
        self.jobs = JobQueue(store.db, job_resend_s) if job_resend_s else None
        self._jobs_check_at = 0.0
        self._stop = threading.Event()
        self.session = MqttSession(
            broker,
            self.client_id,
            before_connect=lambda: self._presence("offline", "connection_lost"),
            on_connect=self._on_connect,
            on_message=None,
            on_receive=self._deliver,
            on_ack=lambda mid, accepted: None,
            on_tick=lambda session: self._tick(),
            on_new_client=self._on_new_client,
            subscriptions=subscriptions(shared_group),
            backoff=backoff,
        )

    @property
    def connected(self) -> bool:
        return self.session.connected

    @property
    def presence_topic(self) -> str:
        return f"{PRESENCE_ROOT}/{self.client_id}/status"

    def start(self) -> None:
        self.session.start()

    def run(self, stop: threading.Event, progress: Optional[Callable[["Collector"], None]] = None,
            progress_interval_s: float = 1.0) -> None:
        """Collect until `stop` is set (or the collector cannot go on), then leave cleanly."""
        self.start()
        try:
            while not stop.wait(progress_interval_s) and not self._stop.is_set():
                if progress is not None:
                    progress(self)
        finally:
            self.close()
        if self.error:
            raise UserError(self.error)

    def close(self) -> None:
        """Store and acknowledge what is waiting (for up to `shutdown_timeout_s`), say goodbye, disconnect."""
        self.session.stop(final=self._presence("offline", "shutdown"), drained=self._drain,
                          timeout_s=self.shutdown_timeout_s)
        # Whatever is still here arrived too late to acknowledge; storing it now is safe, because
        # the broker delivers it again at the next start and then it is a duplicate.
        if self._pending:
            self._commit(self._pending, acknowledge=False)
            if self._pending:
                log.error("%d received messages could not be stored (%s); the broker keeps them "
                          "until the next start", len(self._pending), self.counters.last_error)

    # --- network thread -------------------------------------------------------------------------

    def _on_connect(self, session: MqttSession) -> None:
        self._connection += 1
        if self.shared_group is not None and session.protocol != V5:
            self.error = (f"broker {self.broker.address} speaks only MQTT 3.1.1, and --shared needs MQTT v5 "
                          "shared subscriptions; drop --shared or use a v5 broker (mosquitto, EMQX)")
            log.error(self.error)
            self._stop.set()
            return
        presence = self._presence("online", "connected")
        session.publish(presence.topic, presence.payload, presence.retain)

    def _on_new_client(self) -> None:
        self._connection += 1  # PUBACKs for the old client's messages can no longer be sent

    def _deliver(self, message: Received) -> None:
        self._pending.append(Delivery(message.topic, message.payload, message.mid, message.qos,
                                      self._connection, time.monotonic()))
        if len(self._pending) >= self.max_batch or not self.session.more_waiting():
            self._flush(force=True)

    def _tick(self) -> None:
        self._flush()
        self._resend_jobs()

    def _resend_jobs(self) -> None:
        """Send again the kept jobs whose board has not answered in time (network thread)."""
        now = time.monotonic()
        if self.jobs is None or now < self._jobs_check_at or not self.session.connected:
            return
        self._jobs_check_at = now + min(JOB_CHECK_S, self.jobs.resend_s / 2)
        try:
            due = self.jobs.take_due()
        except Exception as exc:  # the database is away: the next check tries again
            log.warning("could not read the jobs to send again: %s: %s", type(exc).__name__, exc)
            return
        for job in due:
            self.session.publish(wire.jobs_topic(job.device_id), job.payload)
        if due:
            self.counters.jobs_resent += len(due)
            log.info("sent %d job(s) again whose boards have not answered yet", len(due))

    def _flush(self, force: bool = False) -> None:
        if not self._pending:
            return
        now = time.monotonic()
        if now < self._retry_at:
            return
        if not force and now - self._pending[0].received < self.max_wait_s:
            return
        self._commit(self._pending, acknowledge=True)

    def _drain(self) -> bool:
        self._retry_at = 0.0
        self._flush(force=True)
        return not self._pending

    def _commit(self, batch: List[Delivery], acknowledge: bool) -> None:
        try:
            report = self.store.ingest_many([(d.topic, d.payload) for d in batch])
        except Exception as exc:
            # Nothing of the batch is stored and nothing acknowledged: retry after a pause.
            self.counters.failed_commits += 1
            self.counters.last_error = f"{type(exc).__name__}: {exc}"
            delay = self._retry.next()
            log.error("storing %d messages failed (%s); retrying in %.1f s", len(batch), self.counters.last_error, delay)
            self._retry_at = time.monotonic() + delay
            return
        self._retry.reset()
        self._pending = self._pending[len(batch):]
        if acknowledge and self.session.connected:
            for delivery in batch:
                if delivery.connection == self._connection:
                    self.session.ack(delivery.mid, delivery.qos)
            self._confirm(report.outcomes)
        c = self.counters
        c.stored += report.counts[STORED]
        c.duplicate += report.counts[DUPLICATE]
        c.rejected += report.counts[REJECTED]
        c.new_gaps += report.new_gaps
        c.missing += report.missing
        c.filled += report.filled
        c.batches += 1

    def _confirm(self, outcomes: Sequence[IngestOutcome]) -> None:
        """Tell each device which of its messages are committed or rejected for good (network thread)."""
        if self.collector_key is not None and self.collector_key.expired and not self._told_expired:
            self._told_expired = True
            log.error("the collector certificate (%s) has expired: agents with a trusted key ignore its confirmations "
                      "and keep re-sending; issue a new one with `edgeopt keys collector NAME --force` and restart",
                      self.collector_key.describe())
        for device_id, (committed, rejected) in confirmations(outcomes).items():
            entries = [(True, c) for c in committed] + [(False, r) for r in rejected]
            for start in range(0, len(entries), wire.MAX_CONFIRM_IDS):
                batch = entries[start:start + wire.MAX_CONFIRM_IDS]
                self._confirm_seq += 1
                envelope = wire.confirm_message(
                    device_id, self._confirm_seq,
                    committed=[entry for ok, entry in batch if ok],
                    rejected=[entry for ok, entry in batch if not ok],
                    signer=self.collector_key.sign if self.collector_key is not None else None,
                )
                self.session.publish(wire.confirm_topic(device_id), envelope.encode())
                self.counters.confirmed += len(batch)

    def _presence(self, state: str, reason: str) -> Message:
        """The collector's own retained status, outside the device topics."""
        payload = json.dumps({"state": state, "reason": reason, "client_id": self.client_id,
                              "shared_group": self.shared_group, "ts": round(time.time(), 3)})
        return Message(self.presence_topic, payload.encode(), retain=True)



def confirmations(outcomes: Sequence[IngestOutcome]
                  ) -> Dict[str, Tuple[List[Tuple[str, str]], List[Tuple[str, str, str]]]]:
    """Per device: (id, digest) of its messages now committed (stored or duplicate), and (id, digest,
    reason) of those rejected for good. The digest is that of the bytes received, so a board forgets
    only its own message, never on the word about someone's copy under its id.

    Kinds the board does not keep until confirmed are left out (statuses: not in wire.CONFIRMED_KINDS, the
    agent publishes them directly, never from its outbox), and so
    are rejections without a readable device or message id (there is nobody to tell) and those whose
    sender is unknown (unsigned, a bad signature, another key than the board's: `NOT_CONFIRMED`):
    the board keeps its own bytes and sends them again.
    """
    found: Dict[str, Tuple[Dict[Tuple[str, str], None], Dict[Tuple[str, str], str]]] = {}
    for outcome in outcomes:
        if outcome.device_id is None or not wire.is_message_id(outcome.message_id) \
                or not wire.is_sha256(outcome.digest) or outcome.kind not in (None, *wire.CONFIRMED_KINDS):
            continue
        if outcome.status == REJECTED and outcome.reason in NOT_CONFIRMED:
            continue
        committed, rejected = found.setdefault(outcome.device_id, ({}, {}))
        entry = (outcome.message_id, outcome.digest)
        if outcome.status == REJECTED:
            rejected[entry] = outcome.reason or "rejected"
        else:
            committed[entry] = None
    return {device: ([e for e in committed if e not in rejected], [(i, d, r) for (i, d), r in rejected.items()])
            for device, (committed, rejected) in found.items()}
