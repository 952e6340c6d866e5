"""Chunked artifacts in the daemon: ask for the missing chunks, store what comes, hand the file over.

Three threads meet here. The MQTT thread calls `job_arrived` for every new job message (so the
chunks are asked for at once, even while another job is still running) and `chunk_arrived` for
every chunk. The job worker calls `fetch` when it gets to the job: it waits until the last chunk
is in, as long as chunks keep coming, then assembles and verifies the file.

Each job message is asked for at most once per agent process (after a restart the worker asks
again), so the sender never sends the same chunks twice for one request.
"""
from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Set, Tuple

from .. import wire
from ..files import sha256_file
from .admission import Admission
from .artifacts import ArtifactDeliveryError, artifact_path
from .chunk_store import ChunkStore, TransferError

log = logging.getLogger(__name__)

TRANSFERS_DIR = "transfers"
DEFAULT_IDLE_TIMEOUT_S = 120.0


class Transfers:
    def __init__(
        self,
        device_id: str,
        data_dir: Path,
        admission: Optional[Admission] = None,
        request: Optional[Callable[[Dict[str, Any]], Any]] = None,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
        store: Optional[ChunkStore] = None,
    ):
        """`request(body)` sends a transfer message (the agent queues it in its outbox); a job that
        `admission` refuses gets none of its chunks asked for."""
        self.device_id = device_id
        self.data_dir = Path(data_dir)
        self.admission = admission
        self.idle_timeout_s = idle_timeout_s
        self.store = store or ChunkStore(self.data_dir / TRANSFERS_DIR)
        self._request = request
        self._cond = threading.Condition()
        self._asked: Set[str] = set()  # job message ids whose chunks were asked for
        self._last_chunk: Dict[str, float] = {}  # artifact sha256 -> monotonic time of its last new chunk
        self._refused: Dict[str, Tuple[str, str]] = {}  # artifact sha256 -> (error kind, message)
        self._dropped: Dict[str, Set[int]] = {}  # artifact sha256 -> indices of chunks dropped as wrong

    # --- MQTT thread --------------------------------------------------------------------------

    def job_arrived(self, payload: bytes) -> None:
        """Ask for the missing chunks of a new job right away. A job that fails a check here is
        left alone: the worker makes the same checks and answers it with the error."""
        try:
            job = wire.parse_job(wire.Envelope.decode(payload, expect_device=self.device_id))
        except wire.ProtocolError:
            return
        if job.artifact.chunks is None:
            return
        try:
            if self.admission is not None:
                self.admission.precheck(job)
            missing = [] if artifact_path(self.data_dir, job.artifact).is_file() else self.store.register(job.artifact)
        except (wire.ProtocolError, OSError) as exc:
            log.info("not asking for the chunks of job %s: %s", job.job_id, exc)
            return
        with self._cond:
            self._refused.pop(job.artifact.sha256, None)  # a new job starts with a clean slate
        self._ask(job, missing)

    def chunk_arrived(self, payload: bytes) -> None:
        """Store one chunk. Never raises: a chunk that cannot be taken is logged and dropped (then
        acknowledged), since the transfer asks again for whatever is still missing."""
        try:
            self._take_chunk(payload)
        except Exception:
            log.exception("dropping a chunk message that could not be handled")

    def _take_chunk(self, payload: bytes) -> None:
        try:
            chunk = wire.parse_chunk(wire.Envelope.decode(payload, expect_device=self.device_id))
        except wire.ProtocolError as exc:
            log.warning("dropping a chunk message: %s", exc)
            return
        sha = chunk.artifact_sha256
        try:
            stored = self.store.put(sha, chunk.index, chunk.data)
        except TransferError as exc:
            if exc.kind == "unknown_artifact":
                log.info("dropping chunk %d: %s", chunk.index, exc)  # late copy of a finished transfer
                return
            log.warning("dropping a chunk; it will be asked for again: %s", exc)
            with self._cond:
                self._dropped.setdefault(sha, set()).add(chunk.index)
                self._cond.notify_all()
            return
        except OSError as exc:
            log.error("cannot store chunk %d of artifact %s: %s", chunk.index, sha[:12], exc)
            self._refuse(sha, "io_error", f"cannot store chunk {chunk.index}: {exc.strerror or exc}")
            return
        if stored:
            with self._cond:
                self._last_chunk[sha] = time.monotonic()
                self._cond.notify_all()

    # --- job worker ---------------------------------------------------------------------------

    def fetch(self, job: wire.BenchmarkJob) -> Path:
        """The job's artifact as a verified local file, once all its chunks are in."""
        ref = job.artifact
        target = artifact_path(self.data_dir, ref)
        damaged = False
        if target.is_file():
            if sha256_file(target) == ref.sha256:
                return target
            log.warning("stored artifact %s is damaged; receiving it again", target.name)
            target.unlink()
            damaged = True  # the sender was told nothing is missing: tell it again
        missing = self.store.register(ref)
        if missing:
            self._ask(job, missing, again=damaged)  # else a no-op, unless the agent restarted since the job came
            self._wait(job)
        try:
            return self.store.assemble(ref.sha256, target)
        except TransferError as exc:
            raise ArtifactDeliveryError(str(exc), kind=exc.kind) from None

    def _wait(self, job: wire.BenchmarkJob) -> None:
        sha = job.artifact.sha256
        idle_until = time.monotonic() + self.idle_timeout_s
        with self._cond:
            while not self.store.complete(sha):
                if sha in self._refused:
                    kind, message = self._refused.pop(sha)
                    raise ArtifactDeliveryError(message, kind=kind)
                dropped = self._dropped.pop(sha, set())
                again = sorted(dropped.intersection(self.store.missing(sha)))
                if again:
                    self._ask(job, again, again=True)
                idle_until = max(idle_until, self._last_chunk.get(sha, 0.0) + self.idle_timeout_s)
                left = idle_until - time.monotonic()
                if left <= 0:
                    held, total = self.store.progress(sha)
                    raise ArtifactDeliveryError(
                        f"received {held} of {total} chunks of the artifact, then nothing for "
                        f"{self.idle_timeout_s:g} s; the chunks received are kept: deploy again to send the rest",
                        kind="transfer_incomplete",
                    )
                self._cond.wait(left)

    # ---------------------------------------------------------------------------------------------

    def _ask(self, job: wire.BenchmarkJob, missing, again: bool = False) -> None:
        with self._cond:
            if job.request_id in self._asked and not again:
                return
            self._asked.add(job.request_id)
        count = job.artifact.chunks.count
        log.info("job %s: asking for %d of %d chunks of artifact %s", job.job_id, len(missing), count,
                 job.artifact.sha256[:12])
        if self._request is not None:
            self._request(wire.transfer_body(job.job_id, job.request_id, job.artifact.sha256, count, missing))

    def _refuse(self, sha: str, kind: str, message: str) -> None:
        with self._cond:
            self._refused.setdefault(sha, (kind, message))
            self._cond.notify_all()
