"""Runs jobs one at a time on their own thread, so MQTT and telemetry keep flowing meanwhile.

One at a time on purpose: two benchmarks at once would measure each other.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Dict, Optional

from .. import wire
from ..bench.isolation import recording_children
from ..bench.leftovers import ChildRecord
from ..wire.backoff import Backoff
from .inbox import Inbox
from .jobs import JobHandler
from .outbox import Outbox
from .store import Store

log = logging.getLogger(__name__)
RETRY_S = 5.0  # first wait after the state file failed; it doubles up to RETRY_MAX_S
RETRY_MAX_S = 60.0


class JobWorker:
    def __init__(self, store: Store, inbox: Inbox, outbox: Outbox, handler: JobHandler,
                 backoff: Optional[Backoff] = None, child_record: Optional[ChildRecord] = None):
        self._store = store
        self._child_record = child_record  # notes the benchmark child while one runs
        self._inbox = inbox
        self._outbox = outbox
        self._handler = handler
        self._wake = threading.Event()
        self._stopping = False
        self._thread: Optional[threading.Thread] = None
        self._backoff = backoff or Backoff(RETRY_S, RETRY_MAX_S)
        # Held while deciding to take a job, so that after stop() returns `busy` tells the truth.
        self._taking = threading.Lock()
        self.busy = False

    def start(self) -> None:
        self._thread = threading.Thread(target=self._serve, name="edgeopt-jobs", daemon=True)
        self._thread.start()

    def notify(self) -> None:
        """A job was added to the inbox."""
        self._wake.set()

    def stop(self) -> None:
        """Take no further job; a job already running is left to finish or to be retried after a restart.

        Once this returns, `busy` is False only if no job is or will be using the store."""
        with self._taking:
            self._stopping = True
        self._wake.set()

    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _serve(self) -> None:
        with recording_children(self._child_record):
            self._run()

    def _run(self) -> None:
        while not self._stopping:
            self._wake.clear()
            failed = False
            with self._taking:
                if self._stopping:
                    return
                try:
                    job = self._inbox.take()
                    self._backoff.reset()
                except Exception:  # the state file failed: nothing was taken
                    log.exception("could not read the next job")
                    job, failed = None, True
                self.busy = job is not None
            if failed:
                self._wake.wait(self._backoff.next())
                continue
            if job is None:
                self._wake.wait()
                continue
            try:
                body = self._handler.handle(job.payload, job.attempts)
                self._record(job.id, body)
            finally:
                self.busy = False

    def _record(self, inbox_id: int, body: Dict[str, Any]) -> None:
        """Queue the answer and close the job in one transaction, retrying only the write until it works."""
        while True:
            try:
                with self._store.transaction():
                    self._outbox.add(wire.RESULTS, wire.RESULT_TYPE, body)
                    self._inbox.done(inbox_id)
                self._backoff.reset()
                return
            except Exception:
                if self._stopping:  # the job stays in the inbox and is answered after the restart
                    log.exception("could not record the answer to job %d before stopping", inbox_id)
                    return
                delay = self._backoff.next()
                log.exception("could not record the answer to job %d; trying again in %.0f s", inbox_id, delay)
                self._wake.wait(delay)
                self._wake.clear()
