"""Artifacts the job names by URL: downloaded with urllib, checked like any other before use.

The download streams into a temporary file next to its target, stops as soon as the server sends
more than the job's `size` or takes longer than its deadline, and is renamed into place only
when its sha256 is the job's.
"""
from __future__ import annotations

import hashlib
import http.client
import logging
import socket
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import List

from ..files import READ_BYTES, atomic_writer
from ..wire import ArtifactRef
from .artifacts import ArtifactDeliveryError

log = logging.getLogger(__name__)

TIMEOUT_S = 30.0  # per connection attempt and per read
MIN_DEADLINE_S = 60.0  # for the whole file: this, or one second per MB, whichever is longer
MIN_RATE_BYTES_S = 1_000_000


def download_deadline_s(size: int) -> float:
    return max(MIN_DEADLINE_S, size / MIN_RATE_BYTES_S)


def download(ref: ArtifactRef, target: Path, timeout_s: float = TIMEOUT_S, user_agent: str = "edgeopt-agent",
             deadline_s: float = MIN_DEADLINE_S) -> Path:
    """Fetch `ref.url` into `target`; ArtifactDeliveryError if it is not the artifact or takes over `deadline_s`."""
    if ref.url is None or ref.size is None:
        raise ValueError("the artifact has no url and size")
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    received = 0
    deadline = _Deadline(deadline_s)

    def too_slow() -> ArtifactDeliveryError:
        return ArtifactDeliveryError(f"{ref.url} sent {received} of {ref.size} bytes in {deadline_s:g} s; too slow, gave up",
                             kind="download_failed")

    try:
        with atomic_writer(target, mode=0o600, durable=True) as out:
            request = urllib.request.Request(ref.url, headers={"User-Agent": user_agent})
            try:
                with _opener(deadline).open(request, timeout=timeout_s) as response:
                    # read1: whatever has arrived, so a server that trickles bytes cannot outlast the deadline
                    for data in iter(lambda: response.read1(READ_BYTES), b""):
                        if deadline.expired:
                            break
                        received += len(data)
                        if received > ref.size:
                            raise ArtifactDeliveryError(
                                f"{ref.url} sent more than the {ref.size} bytes the job names; it is not the artifact",
                                kind="artifact_mismatch",
                            )
                        digest.update(data)
                        out.write(data)
            except (OSError, http.client.HTTPException):
                if deadline.expired:  # the deadline shut the socket under a read
                    raise too_slow() from None
                raise
            if deadline.expired:
                raise too_slow()
            if received != ref.size or digest.hexdigest() != ref.sha256:
                raise ArtifactDeliveryError(
                    f"{ref.url} gave {received} bytes with sha256 {digest.hexdigest()}; the job expects {ref.size} "
                    f"bytes with sha256 {ref.sha256}",
                    kind="artifact_mismatch",
                )
    except urllib.error.HTTPError as exc:
        raise ArtifactDeliveryError(f"downloading {ref.url} failed: HTTP {exc.code} {exc.reason}", kind="download_failed") from None
    except (urllib.error.URLError, socket.timeout, ConnectionError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise ArtifactDeliveryError(f"downloading {ref.url} failed: {reason}", kind="download_failed") from None
    finally:
        deadline.cancel()
    log.info("downloaded %s (%d bytes)", ref.url, received)
    return target


class _Deadline:
    """Shuts the download's sockets when the deadline passes, so that no read, of the headers or the
    body, outlives it (a per-read timeout alone lets a server that sends a byte now and then go on)."""

    def __init__(self, seconds: float):
        self.expired = False
        self._sockets: List[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            expired = self.expired
        if expired:
            _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)

    def cancel(self) -> None:
        self._timer.cancel()


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed by its connection: nothing left to stop


def _opener(deadline: _Deadline) -> urllib.request.OpenerDirector:
    """urllib's opener, with every connection's socket (after any TLS handshake) under `deadline`."""

    class WatchedHTTPConnection(http.client.HTTPConnection):
        def connect(self) -> None:
            super().connect()
            deadline.watch(self.sock)

    class WatchedHTTPSConnection(http.client.HTTPSConnection):
        def connect(self) -> None:
            super().connect()
            deadline.watch(self.sock)

    class HTTPHandler(urllib.request.HTTPHandler):
        def http_open(self, req):
            return self.do_open(WatchedHTTPConnection, req)

    class HTTPSHandler(urllib.request.HTTPSHandler):
        def https_open(self, req):
            return self.do_open(WatchedHTTPSConnection, req, context=self._context)

    return urllib.request.build_opener(HTTPHandler(), HTTPSHandler())
