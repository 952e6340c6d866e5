"""One deploy on the wire: send each device its job, send the chunks it asks for, collect answers.

Per device:  job sent ─▶ device asks for the chunks it misses (transfer) ─▶ chunks sent ─▶
delivered ─▶ result answered.  A device that already holds the artifact asks for none; one that
refuses the job (bad signature...) answers at once with an error result. Chunks go out at QoS 1
a window at a time, each checked against the plan first, so a file changed mid-deploy is caught
here rather than by the board.

A job the device has not reacted to (no transfer request, no answer) is sent again, the same
bytes, `resend_s` after it was sent and then twice as long each time: a broker that died with it
lost it. The board runs a job message once however often it arrives.
"""
from __future__ import annotations

import collections
import hashlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from edgeopt_agent import wire
from edgeopt_agent.wire import read_chunk
from edgeopt_agent.wire.session import Received

from ..errors import UserError
from .artifact import DeployArtifact
from .mqtt import HostClient

log = logging.getLogger(__name__)

WINDOW = 8  # chunks published but not yet acknowledged by the broker
RESEND_S = 10.0  # a job the device has not reacted to is sent again after this long, doubling

# Device states, in order.
SENT = "sent"
TRANSFERRING = "transferring"
DELIVERED = "delivered"
ANSWERED = "answered"
TIMEOUT = "timeout"


@dataclass(frozen=True)
class DeviceProgress:
    """One step of a deploy, for a progress display."""

    device_id: str
    stage: str  # sent, transferring, delivered, answered, timeout
    chunks_sent: int = 0
    chunks_wanted: int = 0
    chunks_total: int = 0
    ok: Optional[bool] = None


ProgressCallback = Callable[[DeviceProgress], None]


@dataclass
class DeviceRun:
    device_id: str
    job: wire.Envelope
    chunks_total: int
    state: str = SENT
    chunks_sent: int = 0
    chunks_wanted: int = 0
    answer: Optional[Dict[str, Any]] = None
    requests: List[wire.TransferRequest] = field(default_factory=list)
    resend_at: float = 0.0
    sends: int = 0

    @property
    def job_id(self) -> str:
        return self.job.body["job_id"]

    def outcome(self, artifact_key: str, waited: bool, timeout_s: float) -> Dict[str, Any]:
        """What the deploy API returns for this device."""
        error, ok, result = None, None, None
        if self.answer is not None:
            ok, error, result = self.answer["ok"], self.answer.get("error"), self.answer.get("result")
        elif self.state == TIMEOUT:
            ok = False
            what = "answered" if waited else "asked for the artifact"
            hint = " (the chunks it has are kept: deploy again to send the rest)" if self.chunks_sent else ""
            error = {"kind": "timeout", "message": f"the device had not {what} within {timeout_s:g} s{hint}"}
        return {
            "device_id": self.device_id,
            "job_id": self.job_id,
            "artifact_key": artifact_key,
            "state": self.state,
            "ok": ok,
            "error": error,
            "result": result,
            "meta": self.job.body.get("meta"),
            "chunks_sent": self.chunks_sent,
            "chunks_total": self.chunks_total,
        }


class Rollout:
    def __init__(
        self,
        client: HostClient,
        artifact: DeployArtifact,
        jobs: Dict[str, wire.Envelope],
        progress: Optional[ProgressCallback] = None,
        window: int = WINDOW,
        resend_s: float = RESEND_S,
    ):
        """`jobs`: device id -> its job envelope. With a `url` artifact no chunks are asked for."""
        self.client = client
        self.artifact = artifact
        self.progress = progress or (lambda event: None)
        self.window = window
        self.resend_s = resend_s
        self.runs = {
            device_id: DeviceRun(device_id, job, artifact.chunks.count if "chunks" in job.body["artifact"] else 0)
            for device_id, job in jobs.items()
        }
        self._by_request = {run.job.id: run for run in self.runs.values()}
        self._seq = 0

    def run(self, wait: bool, timeout_s: float) -> List[Dict[str, Any]]:
        self.client.subscribe([wire.subscription(wire.RESULTS), wire.subscription(wire.TRANSFER)])
        deadline = time.monotonic() + timeout_s
        for run in self.runs.values():
            self._send_job(run)
            if not run.chunks_total and not wait:
                run.state = DELIVERED  # fetched by URL: nothing more to send
            self._report(run)
        while not self._finished(wait):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            message = self.client.receive(min(left, 0.5))
            if message is not None:
                self._handle(message, deadline)
            for run in self.runs.values():
                if run.state == SENT and time.monotonic() >= run.resend_at:
                    log.info("%s has not reacted to job %s: sending it again", run.device_id, run.job_id)
                    self._send_job(run, acked=False)  # paho keeps it until the broker is back
        for run in self.runs.values():
            if not self._done(run, wait):
                run.state = TIMEOUT
                self._report(run)
        return [run.outcome(self.artifact.key, wait, timeout_s) for run in self.runs.values()]

    # ---------------------------------------------------------------------------------------------

    def _send_job(self, run: DeviceRun, acked: bool = True) -> None:
        """Publish the job; `acked`: wait for the broker's acknowledgement (the first send)."""
        info = self.client.publish(wire.jobs_topic(run.device_id), run.job.encode())
        if acked:
            self.client.wait_acked(info)
        run.sends += 1
        run.resend_at = time.monotonic() + self.resend_s * 2 ** (run.sends - 1)

    def _done(self, run: DeviceRun, wait: bool) -> bool:
        return run.state == ANSWERED or (not wait and run.state == DELIVERED)

    def _finished(self, wait: bool) -> bool:
        return all(self._done(run, wait) for run in self.runs.values())

    def _handle(self, message: Received, deadline: float) -> None:
        try:
            found = self._match(message)
        except wire.ProtocolError as exc:
            log.warning("ignoring a message on %s: %s", message.topic, exc)
            return
        except Exception as exc:  # RecursionError, OverflowError: a payload the JSON parser cannot take
            log.warning("ignoring a message on %s: it could not be decoded (%s)", message.topic, type(exc).__name__)
            return
        if found is None:
            return
        run, envelope, request = found
        if request is None:
            if run.state != ANSWERED:  # agents send a result again until a collector confirms it
                run.answer = envelope.body
                run.state = ANSWERED
                self._report(run)
        elif run.state != ANSWERED:
            self._send_chunks(run, request, deadline)

    def _match(self, message: Received) -> Optional[Tuple[DeviceRun, wire.Envelope, Any]]:
        """The run a message is about, its envelope and (on a transfer topic) the request; None if another job's."""
        device_id, kind = wire.parse_topic(message.topic)
        if device_id not in self.runs or kind not in (wire.RESULTS, wire.TRANSFER):
            return None
        envelope = wire.Envelope.decode(message.payload, expect_device=device_id)
        request_id = envelope.body.get("request_id")
        run = self._by_request.get(request_id) if isinstance(request_id, str) else None
        if run is None:
            return None  # about another job
        if run.device_id != device_id:
            raise wire.ProtocolError(f"device '{device_id}' answered job {run.job_id} of device '{run.device_id}'")
        if kind == wire.TRANSFER:
            return run, envelope, wire.parse_transfer(envelope)
        check_answer(envelope.body)
        return run, envelope, None

    def _send_chunks(self, run: DeviceRun, request: wire.TransferRequest, deadline: float) -> None:
        if request.artifact_sha256 != self.artifact.sha256 or request.chunks != self.artifact.chunks.count:
            log.warning("%s asked for chunks of another artifact (%s); ignored", run.device_id, request.artifact_sha256)
            return
        run.requests.append(request)
        run.chunks_wanted += len(request.missing)
        run.state = TRANSFERRING
        self._report(run)
        topic = wire.chunks_topic(run.device_id)
        pending: "collections.deque[Any]" = collections.deque()
        for index in request.missing:
            if time.monotonic() > deadline:
                break
            data = read_chunk(self.artifact.path, self.artifact.chunks, index)
            if hashlib.sha256(data).hexdigest() != self.artifact.chunks.sha256[index]:
                raise UserError(f"{self.artifact.path} changed while it was being deployed; convert and deploy again")
            self._seq += 1
            envelope = wire.chunk_message(run.device_id, self._seq, self.artifact.sha256, index, data)
            pending.append(self.client.publish(topic, envelope.encode()))
            if len(pending) >= self.window:
                self._acked(run, pending.popleft())
        while pending:
            self._acked(run, pending.popleft())
        if run.state == TRANSFERRING:
            run.state = DELIVERED
            self._report(run)

    def _acked(self, run: DeviceRun, info: Any) -> None:
        self.client.wait_acked(info)
        run.chunks_sent += 1
        self._report(run)

    def _report(self, run: DeviceRun) -> None:
        ok = run.answer["ok"] if run.answer is not None else None
        self.progress(DeviceProgress(run.device_id, run.state, run.chunks_sent, run.chunks_wanted, run.chunks_total, ok))


def check_answer(body: Dict[str, Any]) -> None:
    """A result body as the deploy reads it: ok true or false, error and result objects or null."""
    if not isinstance(body.get("ok"), bool):
        raise wire.ProtocolError(f"result 'ok' must be true or false, got {body.get('ok')!r}")
    for key in ("error", "result"):
        if body.get(key) is not None and not isinstance(body[key], dict):
            raise wire.ProtocolError(f"result '{key}' must be an object or null, got {type(body[key]).__name__}")
    if not body["ok"] and body.get("error") is None:
        raise wire.ProtocolError("a result with ok=false needs an 'error' object")
