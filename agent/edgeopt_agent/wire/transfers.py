"""Chunked transfer messages.

A job whose artifact has "chunks" names the artifact (sha256, size, chunk hashes); the bytes
travel separately. On receiving the job the agent answers on its transfer topic with the
chunks it still misses (none when it already holds the file); the sender publishes exactly
those on the device's chunks topic. Received chunks are kept across restarts and failed
transfers, so a job sent again only costs the chunks still missing.
"""
from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any, Dict, Tuple

from ..values import is_int
from .chunks import MAX_CHUNK_BYTES, MAX_CHUNKS
from .envelope import CHUNK_TYPE, TRANSFER_TYPE, Envelope, is_sha256
from .errors import ProtocolError
from .topics import validate_device_id


@dataclass(frozen=True)
class TransferRequest:
    """Device -> host: the chunks of a job's artifact the device still needs (empty: none)."""

    job_id: str
    request_id: str
    artifact_sha256: str
    chunks: int
    missing: Tuple[int, ...]


def transfer_body(job_id: str, request_id: str, artifact_sha256: str, chunks: int, missing: Any) -> Dict[str, Any]:
    return {"job_id": job_id, "request_id": request_id, "artifact_sha256": artifact_sha256, "chunks": chunks,
            "missing": sorted(int(i) for i in missing)}


def parse_transfer(envelope: Envelope) -> TransferRequest:
    body = envelope.body
    if envelope.type != TRANSFER_TYPE:
        raise ProtocolError(f"a '{envelope.type}' message on a transfer topic; expected '{TRANSFER_TYPE}'")
    if sorted(body) != sorted(("job_id", "request_id", "artifact_sha256", "chunks", "missing")):
        raise ProtocolError("transfer body needs exactly job_id, request_id, artifact_sha256, chunks and missing")
    job_id, request_id, sha256, chunks, missing = (body[k] for k in
                                                   ("job_id", "request_id", "artifact_sha256", "chunks", "missing"))
    if not isinstance(job_id, str) or not isinstance(request_id, str):
        raise ProtocolError("transfer 'job_id' and 'request_id' must be strings")
    if not is_sha256(sha256):
        raise ProtocolError("transfer 'artifact_sha256' must be 64 lowercase hex digits")
    if not is_int(chunks) or not 1 <= chunks <= MAX_CHUNKS:
        raise ProtocolError(f"transfer 'chunks' must be 1-{MAX_CHUNKS}, got {chunks!r}")
    if not isinstance(missing, list) or not all(is_int(i) and 0 <= i < chunks for i in missing):
        raise ProtocolError(f"transfer 'missing' must list chunk indices below {chunks}")
    return TransferRequest(job_id, request_id, sha256, chunks, tuple(sorted(set(missing))))


@dataclass(frozen=True)
class Chunk:
    artifact_sha256: str
    index: int
    data: bytes


def chunk_message(device_id: str, seq: int, artifact_sha256: str, index: int, data: bytes) -> Envelope:
    """Host -> device: chunk `index` of the artifact `artifact_sha256`."""
    if len(data) > MAX_CHUNK_BYTES:
        raise ValueError(f"a chunk holds at most {MAX_CHUNK_BYTES} bytes, got {len(data)}")
    body = {"artifact_sha256": artifact_sha256, "index": index, "data_b64": base64.b64encode(data).decode("ascii")}
    return Envelope(device_id=validate_device_id(device_id), seq=seq, type=CHUNK_TYPE, body=body)


def parse_chunk(envelope: Envelope) -> Chunk:
    body = envelope.body
    if envelope.type != CHUNK_TYPE:
        raise ProtocolError(f"a '{envelope.type}' message on a chunks topic; expected '{CHUNK_TYPE}'")
    if sorted(body) != ["artifact_sha256", "data_b64", "index"]:
        raise ProtocolError("chunk body needs exactly artifact_sha256, index and data_b64")
    sha256, index, data_b64 = body["artifact_sha256"], body["index"], body["data_b64"]
    if not is_sha256(sha256):
        raise ProtocolError("chunk 'artifact_sha256' must be 64 lowercase hex digits")
    if not is_int(index) or not 0 <= index < MAX_CHUNKS:
        raise ProtocolError(f"chunk 'index' must be 0-{MAX_CHUNKS - 1}, got {index!r}")
    if not isinstance(data_b64, str) or len(data_b64) > (MAX_CHUNK_BYTES + 2) // 3 * 4:
        raise ProtocolError(f"chunk 'data_b64' must be the base64 of at most {MAX_CHUNK_BYTES} bytes")
    try:
        data = base64.b64decode(data_b64, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ProtocolError(f"chunk data_b64 is not valid base64: {exc}") from None
    return Chunk(sha256, index, data)
