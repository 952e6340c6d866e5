"""Artifacts the job names by URL: downloaded with urllib, checked like any other before use.

The download streams into a temporary file next to its target, stops as soon as the server sends
more than the job's `size` or takes longer than its deadline, and is renamed into place only
when its sha256 is the job's.
"""
from __future__ import annotations

import hashlib
import logging
import os
import socket
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from ..protocol import ArtifactRef
from .artifacts import ArtifactError

log = logging.getLogger(__name__)

TIMEOUT_S = 30.0  # per connection attempt and per read
MIN_DEADLINE_S = 60.0  # for the whole file: this, or one second per MB, whichever is longer
MIN_RATE_BYTES_S = 1_000_000
_READ_BYTES = 1 << 20


def download_deadline_s(size: int) -> float:
    return max(MIN_DEADLINE_S, size / MIN_RATE_BYTES_S)


def download(ref: ArtifactRef, target: Path, timeout_s: float = TIMEOUT_S, user_agent: str = "edgeopt-agent",
             deadline_s: float = MIN_DEADLINE_S) -> Path:
    """Fetch `ref.url` into `target`; ArtifactError if it is not the artifact or takes over `deadline_s`."""
    if ref.url is None or ref.size is None:
        raise ValueError("the artifact has no url and size")
    give_up = time.monotonic() + deadline_s
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=target.parent, prefix=".download-")
    digest = hashlib.sha256()
    received = 0
    try:
        with os.fdopen(handle, "wb") as out:
            request = urllib.request.Request(ref.url, headers={"User-Agent": user_agent})
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                # read1: whatever has arrived, so a server that trickles bytes cannot outlast the deadline
                for data in iter(lambda: response.read1(_READ_BYTES), b""):
                    if time.monotonic() > give_up:
                        raise ArtifactError(
                            f"{ref.url} sent {received} of {ref.size} bytes in {deadline_s:g} s; too slow, gave up",
                            kind="download_failed",
                        )
                    received += len(data)
                    if received > ref.size:
                        raise ArtifactError(
                            f"{ref.url} sent more than the {ref.size} bytes the job names; it is not the artifact",
                            kind="artifact_mismatch",
                        )
                    digest.update(data)
                    out.write(data)
            out.flush()
            os.fsync(out.fileno())
        if received != ref.size or digest.hexdigest() != ref.sha256:
            raise ArtifactError(
                f"{ref.url} gave {received} bytes with sha256 {digest.hexdigest()}; the job expects {ref.size} "
                f"bytes with sha256 {ref.sha256}",
                kind="artifact_mismatch",
            )
        os.replace(temp, target)
    except urllib.error.HTTPError as exc:
        raise ArtifactError(f"downloading {ref.url} failed: HTTP {exc.code} {exc.reason}", kind="download_failed") from None
    except (urllib.error.URLError, socket.timeout, ConnectionError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise ArtifactError(f"downloading {ref.url} failed: {reason}", kind="download_failed") from None
    finally:
        Path(temp).unlink(missing_ok=True)
    log.info("downloaded %s (%d bytes)", ref.url, received)
    return target
