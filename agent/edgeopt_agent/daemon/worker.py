"""Runs jobs one at a time on their own thread, so MQTT and telemetry keep flowing meanwhile.

One at a time on purpose: two benchmarks at once would measure each other.
"""
from __future__ import annotations

import logging
import threading
from typing import Optional

from .. import protocol
from .inbox import Inbox
from .jobs import JobHandler
from .outbox import Outbox
from .store import Store

log = logging.getLogger(__name__)
RETRY_S = 5.0


class JobWorker:
    def __init__(self, store: Store, inbox: Inbox, outbox: Outbox, handler: JobHandler):
        self._store = store
        self._inbox = inbox
        self._outbox = outbox
        self._handler = handler
        self._wake = threading.Event()
        self._stopping = False
        self._thread: Optional[threading.Thread] = None
        self.busy = False

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="edgeopt-jobs", daemon=True)
        self._thread.start()

    def notify(self) -> None:
        """A job was added to the inbox."""
        self._wake.set()

    def stop(self) -> None:
        """Take no further job; a job already running is left to finish or to be retried after a restart."""
        self._stopping = True
        self._wake.set()

    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        while not self._stopping:
            self._wake.clear()
            job = self._inbox.take()
            if job is None:
                self._wake.wait()
                continue
            self.busy = True
            try:
                body = self._handler.handle(job.payload, job.attempts)
                with self._store.transaction():
                    self._outbox.add(protocol.RESULTS, protocol.RESULT_TYPE, body)
                    self._inbox.done(job.id)
            except Exception:  # the state file failed; the job stays in the inbox
                log.exception("could not record the answer to job %d; trying again in %.0f s", job.id, RETRY_S)
                self._wake.wait(RETRY_S)
            finally:
                self.busy = False
