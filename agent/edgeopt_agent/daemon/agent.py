"""The agent: wires state, sensors, MQTT session, job worker and the telemetry clock together.

Threads: the caller's thread keeps the telemetry clock and waits for the stop signal; the MQTT
session runs the network; the job worker runs benchmarks. They meet only in the SQLite store.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Dict, Optional

from .. import confirm_signing, cpu_check, extraction_folders, message_signing, signing, wire
from ..bench.leftovers import RECORD_FILE, ChildRecord
from ..profiles import load_profile
from .admission import Admission, JobLedger
from ..wire.backoff import Backoff
from .config import AgentConfig
from .inbox import ADDED, FULL, Inbox
from .jobs import BUNDLES_DIR, JobHandler
from .outbox import Outbox
from .sender import OutboxSender
from .store import STATE_FILE, Store, lock_data_dir
from .telemetry import Telemetry
from .artifact_transfer import Transfers
from ..wire.session import Message, MqttSession
from .worker import JobWorker

log = logging.getLogger(__name__)

SHUTDOWN_TIMEOUT_S = 5.0
CONFIRMS_REFUSED = "confirms_refused:"  # counter prefix: confirm messages not acted on, by kind
CONFIRM_WARNING_INTERVAL_S = 60.0
# Counter: confirm entries that named one of this board's ids with the digest of other bytes.
OTHER_BYTES_CONFIRMED = "confirmed_other_bytes"


class Agent:
    def __init__(self, config: AgentConfig, sensors: Any = None, cpu: Optional[cpu_check.CpuFacts] = None):
        """`sensors` is a SensorSuite; by default the board's sensors are discovered here, once. `cpu` is what
        the profile is checked against; by default this CPU's facts, read once (`cpu_check.read_cpu`)."""
        self.config = config
        self.device_id = config.device_id
        profile = load_profile(config.profile) if config.profile else None
        self.profile_check = self._check_profile(profile, cpu)  # warns once here when the profile does not fit
        self.trusted_key = signing.load_public_key(config.trusted_key) if config.trusted_key else None
        if self.trusted_key is not None:
            signing.ensure_available()
        if sensors is None:
            from ..sensors import discover

            sensors = discover(sysfs_root="/", profile=profile)
        self._lock = lock_data_dir(config.data_dir)
        child_record = ChildRecord(config.data_dir / RECORD_FILE)
        self.reaped_child = child_record.reap()  # only now: the lock says no other agent uses it
        if self.reaped_child:
            log.warning("%s", self.reaped_child)
        extraction_folders.sweep(config.data_dir / BUNDLES_DIR)  # what killed children left mid-load
        self.device_key = message_signing.DeviceKey.load_or_create(
            config.device_key or config.data_dir / message_signing.KEY_FILE)
        self.store = Store(config.data_dir / STATE_FILE)
        self.outbox = Outbox(self.store, self.device_id, max_bytes=config.outbox_max_bytes,
                             signer=self.device_key.encode)
        self.outbox.sign_unsigned()
        self.inbox = Inbox(self.store, max_bytes=config.inbox_max_bytes)
        self.confirms = config.delivery == "collector"
        self.sender = OutboxSender(self.outbox, confirm=self.confirms, confirm_timeout_s=config.confirm_timeout_s)
        self.telemetry = Telemetry(sensors, profile.name if profile else None)
        self.admission = Admission(self.device_id, config.profile, self.trusted_key,
                                   JobLedger(self.store, clock_skew_s=config.clock_skew_s) if self.trusted_key else None,
                                   config.clock_skew_s)
        self.transfers = Transfers(
            self.device_id,
            config.data_dir,
            self.admission,
            request=lambda body: self.outbox.add(wire.TRANSFER, wire.TRANSFER_TYPE, body),
            idle_timeout_s=config.transfer_timeout_s,
        )
        self.jobs = JobHandler(self.device_id, config.data_dir, sensors, self.trusted_key, self.transfers,
                               config.bench_limits, self.admission)
        self.worker = JobWorker(self.store, self.inbox, self.outbox, self.jobs, child_record=child_record)
        self.session = MqttSession(
            config.broker,
            config.client_id,
            before_connect=self._before_connect,
            on_connect=self._on_connect,
            on_message=self._on_message,
            on_ack=self.sender.acknowledged,
            on_tick=lambda session: self.sender.tick(session.publish),
            on_new_client=self.sender.restart,
            subscriptions=[wire.jobs_topic(self.device_id), wire.chunks_topic(self.device_id)]
            + ([wire.confirm_topic(self.device_id)] if self.confirms else []),
            backoff=Backoff(config.reconnect_min_s, config.reconnect_max_s),
        )
        self._started_at = round(time.time(), 3)
        self._online_seq: Optional[int] = None
        self._confirm_warned_at = -CONFIRM_WARNING_INTERVAL_S  # so the first refused confirm is logged
        self._confirms_unreported = 0

    def run(self, stop: threading.Event) -> None:
        """Serve until `stop` is set, then shut down cleanly."""
        log.info("edgeopt-agent %s: device '%s' (device key %s, %s), broker %s, data in %s, job signatures %s",
                 self.telemetry.agent_version, self.device_id, self.device_key.fingerprint, self.device_key.path,
                 self.config.broker.address, self.config.data_dir,
                 f"required (trusted key {self.trusted_key.key_id})" if self.trusted_key else "off")
        if self.trusted_key is None:
            log.warning("NO TRUSTED KEY: this agent runs any job that anyone who can publish on %s sends, "
                        "unsigned, with no expiry, replay, target or downgrade checks; give it the fleet's "
                        "public key (--trusted-key, or trusted_key in its config)", wire.jobs_topic(self.device_id))
            if self.confirms:
                log.warning("NO TRUSTED KEY: this agent also forgets its queued results and telemetry on any "
                            "confirm message published on %s, signed or not, so whoever can publish there can "
                            "make it drop measurements the collector never stored",
                            wire.confirm_topic(self.device_id))
        self.worker.start()
        self.session.start()
        interval = self.config.telemetry_interval_s
        due = time.monotonic()
        try:
            while not stop.is_set():
                if time.monotonic() >= due:
                    self.send_telemetry()
                    # Skip ticks missed while suspended rather than sending a burst.
                    due = max(due + interval, time.monotonic())
                stop.wait(max(0.0, due - time.monotonic()))
        finally:
            self.shutdown()

    def send_telemetry(self) -> None:
        try:
            body = self.telemetry.body(self._agent_state())
        except Exception:  # a sensor bug must not stop the agent; the next tick tries again
            log.exception("collecting telemetry failed")
            return
        try:
            self.outbox.add(wire.TELEMETRY, wire.TELEMETRY_TYPE, body)
        except Exception:  # e.g. the disk is full: skip this reading, the next tick tries again
            log.exception("could not queue telemetry")

    def shutdown(self) -> None:
        log.info("shutting down")
        self.worker.stop()  # from here on `worker.busy` says whether a job still uses the store
        offline = self._status(wire.OFFLINE, "shutdown", self.store.next_seq(wire.STATUS))
        self.session.stop(final=offline, drained=self.sender.idle, timeout_s=SHUTDOWN_TIMEOUT_S)
        self.sender.flush()
        if self.worker.busy:
            log.warning("a job was still running; it will run again after the next start")
        else:
            self.store.close()
            self._lock.close()

    # --- hooks, called on the MQTT thread ---------------------------------------------------------

    def _before_connect(self) -> Message:
        # The online message gets its number now, before the Will's, so that a Will fired later
        # in this connection always carries a higher seq than the online it contradicts.
        self._online_seq = self.store.next_seq(wire.STATUS)
        return self._status(wire.OFFLINE, "connection_lost", self.store.next_seq(wire.STATUS))

    def _on_connect(self, session: MqttSession) -> None:
        assert self._online_seq is not None, "_before_connect runs before every connection"
        self.sender.reconnected()
        online = self._status(wire.ONLINE, "connected", self._online_seq)
        session.publish(online.topic, online.payload, online.retain)

    def _on_message(self, topic: str, payload: bytes) -> None:
        if topic == wire.chunks_topic(self.device_id):
            self.transfers.chunk_arrived(payload)  # on disk before the broker gets its PUBACK
            return
        if topic == wire.confirm_topic(self.device_id):
            self._confirmed(payload)
            return
        if topic != wire.jobs_topic(self.device_id):
            log.warning("ignoring a message on unexpected topic %s", topic)
            return
        # An oversized job is kept only as far as needed to answer that it is oversized.
        payload = payload[: wire.MAX_MESSAGE_BYTES + 1]
        with self.store.transaction():  # a refused job is remembered and answered together
            outcome = self.inbox.add(payload)
            if outcome == FULL:
                self.outbox.add(wire.RESULTS, wire.RESULT_TYPE, self._inbox_full(payload))
        if outcome == ADDED:
            try:
                self.transfers.job_arrived(payload)
            except Exception:  # the job is stored; the worker asks for its chunks when it gets to it
                log.exception("could not ask for the chunks of a new job right away")
            self.worker.notify()
        elif outcome != FULL:
            log.info("ignoring a job message delivered twice")

    def _confirmed(self, payload: bytes) -> None:
        try:
            envelope = wire.Envelope.decode(payload, expect_device=self.device_id)
            confirmation = wire.parse_confirm(envelope)
            if self.trusted_key is not None:  # only a collector the fleet key certified makes it forget
                confirm_signing.verify_confirm(self.trusted_key, envelope, confirmation, self.device_id,
                                               clock_skew_s=self.config.clock_skew_s)
        except wire.ProtocolError as exc:
            self._confirm_refused(exc.kind, str(exc))
            return
        except Exception as exc:  # a bug in checking it: act on nothing, and keep running
            log.exception("checking a confirm message failed")
            self._confirm_refused("internal_error", f"{type(exc).__name__}: {exc}")
            return
        if not self.confirms:
            return
        done = self.sender.confirmed(confirmation.deliveries)
        log.debug("collector confirmed %d message(s), %d of them still queued here",
                  len(confirmation.deliveries), len(done.rows))
        rejected = [(i, reason) for i, d, reason in confirmation.rejected if (i, d) in done.forgotten]
        for message_id, reason in rejected:
            log.warning("the collector rejected message %s (%s); it is not sent again", message_id, reason)
        if rejected:
            self.store.count("rejected_by_collector", len(rejected))
        if done.other_bytes:
            # Someone published copies of this board's messages under their ids: the collector's word on
            # those copies makes this board forget nothing.
            self.store.count(OTHER_BYTES_CONFIRMED, done.other_bytes)
            log.warning("the collector confirmed %d message(s) under this board's ids with other bytes than it "
                        "sent (someone's copies); its own stay queued", done.other_bytes)

    def _confirm_refused(self, kind: str, why: str) -> None:
        """Count a confirm the agent does not act on; warn at most once a minute (a flood stays one line)."""
        try:
            self.store.count(f"{CONFIRMS_REFUSED}{kind}")
        except Exception:
            log.exception("could not count a refused confirm message")
        now = time.monotonic()
        if now - self._confirm_warned_at < CONFIRM_WARNING_INTERVAL_S:
            self._confirms_unreported += 1
            return
        more = (f" ({self._confirms_unreported} more refused since the last warning)"
                if self._confirms_unreported else "")
        log.warning("ignoring a confirm message (%s): %s; the measurements it names stay queued and are sent "
                    "again%s", kind, why, more)
        self._confirm_warned_at, self._confirms_unreported = now, 0

    def _inbox_full(self, payload: bytes) -> Dict[str, Any]:
        """The answer to a job refused because the unanswered jobs already fill the inbox cap."""
        try:
            envelope = wire.Envelope.decode(payload, expect_device=self.device_id)
            job_id = envelope.body.get("job_id")
            job_id = job_id if isinstance(job_id, str) and len(job_id) <= 128 else None
            request_id, job_type = envelope.id, envelope.type
        except wire.ProtocolError as exc:
            request_id, job_type, job_id = None, None, exc.job_id
        message = (f"the agent's queue of unanswered jobs is full ({self.inbox.size_bytes()} bytes waiting, "
                   f"inbox_max_bytes {self.inbox.max_bytes}, this job {len(payload)} bytes); send the job again "
                   "once earlier ones are answered, or raise inbox_max_bytes")
        log.warning("refused job %s: %s", job_id or request_id or "?", message)
        self.store.count("jobs_refused:inbox_full")
        return wire.result_body(job_id, job_type, request_id, error=wire.error_info("inbox_full", message))

    # ---------------------------------------------------------------------------------------------

    def _status(self, state: str, reason: str, seq: int) -> Message:
        body = wire.status_body(
            state,
            reason,
            agent_version=self.telemetry.agent_version,
            profile=self.config.profile,
            started_at=self._started_at,
            mqtt_protocol=self.session.protocol,
            **self._signature_state(),
            profile_check=self.profile_check,
        )
        envelope = wire.Envelope(device_id=self.device_id, seq=seq, type=wire.STATUS_TYPE, body=body)
        return Message(wire.status_topic(self.device_id), self.device_key.encode(envelope), retain=True)

    def _agent_state(self) -> Dict[str, Any]:
        counts = self.store.counters()  # one read for every counter the state reports
        return {
            "outbox_queued": len(self.outbox),
            "outbox_bytes": self.outbox.size_bytes(),
            "outbox_max_bytes": self.outbox.max_bytes,
            "outbox_dropped": self.outbox.dropped(),
            # Telemetry is taken on the main thread while the sender lives on the MQTT thread: a
            # momentary count is all this is.
            "outbox_unconfirmed": self.sender.unconfirmed,
            "outbox_resent": self.sender.resent,
            "delivery": self.config.delivery,
            "rejected_by_collector": counts.get("rejected_by_collector", 0),
            "confirmed_other_bytes": counts.get(OTHER_BYTES_CONFIRMED, 0),
            **self._confirms_refused(counts),
            "jobs_open": self.inbox.open_count(),
            "inbox_bytes": self.inbox.size_bytes(),
            "inbox_max_bytes": self.inbox.max_bytes,
            "jobs_refused": _prefixed(counts, "jobs_refused:"),
            "job_running": self.worker.busy,
            "mqtt": {"connected": self.session.connected, "protocol": self.session.protocol},
            **self._signature_state(),
        }

    def _signature_state(self) -> Dict[str, Any]:
        """Whether this agent refuses unsigned jobs (and checks expiry, replay, target, downgrade), and
        whether it forgets measurements only on confirms signed by a collector the fleet key certified."""
        return {
            "signatures": "required" if self.trusted_key else "off",
            "trusted_key_id": self.trusted_key.key_id if self.trusted_key else None,
            "confirms": "signed" if self.trusted_key else "any",
            "device_key_id": self.device_key.fingerprint,
        }

    @staticmethod
    def _check_profile(profile: Any, cpu: Optional[cpu_check.CpuFacts]) -> Optional[Dict[str, Any]]:
        """Whether the configured profile describes this CPU (None without a profile). A failure to check
        is logged and reported as unchecked, never fatal: the agent runs on regardless."""
        if profile is None:
            return None
        try:
            check = cpu_check.check_profile(profile, cpu if cpu is not None else cpu_check.read_cpu("/"))
        except Exception as exc:
            log.exception("checking profile %s against this CPU failed", profile.name)
            return {"ok": None, "machine": None, "cores": None, "mismatch": [],
                    "unchecked": [f"the check failed: {type(exc).__name__}: {exc}"]}
        mismatch = cpu_check.warning(profile, check)
        if mismatch:
            log.warning("%s", mismatch)
        return check

    def _confirms_refused(self, counts: Optional[Dict[str, int]] = None) -> Dict[str, Any]:
        """Confirm messages not acted on, ever: in all (`unauthenticated_confirms`) and by why (from `counts`,
        every counter as the store holds them, where the caller read them already)."""
        refused = _prefixed(self.store.counters() if counts is None else counts, CONFIRMS_REFUSED)
        return {"unauthenticated_confirms": sum(refused.values()), "confirms_refused": refused}


def _prefixed(counts: Dict[str, int], prefix: str) -> Dict[str, int]:
    """The counters whose names start with `prefix`, without it (as Store.counters(prefix) gives them)."""
    return {name[len(prefix):]: value for name, value in counts.items() if name.startswith(prefix)}
