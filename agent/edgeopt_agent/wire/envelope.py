"""The envelope every message travels in, message ids, and the bodies of the device's status and results.

Every message is one JSON object::

    {"id": "<uuid4 hex>", "device_id": "rpi-01", "seq": 17, "ts": 1712345678.123,
     "schema": 1, "type": "telemetry", "body": {...}}

What a board sends also carries `sig`, its device key's signature (`edgeopt_agent.message_signing`
defines and checks it); readers that do not check signatures ignore the field.
"""
from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional

from ..values import finite, is_int, is_number
from .errors import ProtocolError
from .topics import validate_device_id

SCHEMA_VERSION = 1

# Envelope `type` of the messages a device sends; jobs carry their job type instead.
STATUS_TYPE = "status"
TELEMETRY_TYPE = "telemetry"
RESULT_TYPE = "result"
TRANSFER_TYPE = "transfer"
CHUNK_TYPE = "chunk"
CONFIRM_TYPE = "confirm"
BENCHMARK_JOB = "benchmark"
JOB_TYPES = (BENCHMARK_JOB,)

ONLINE = "online"
OFFLINE = "offline"

MAX_MESSAGE_BYTES = 8 * 1024 * 1024

_MESSAGE_ID = re.compile(r"^[0-9a-f]{32}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_ENVELOPE_KEYS = ("id", "device_id", "seq", "ts", "schema", "type", "body")


def new_message_id() -> str:
    return uuid.uuid4().hex


def is_message_id(value: Any) -> bool:
    """Whether `value` is an envelope id: 32 lowercase hex digits."""
    return isinstance(value, str) and bool(_MESSAGE_ID.match(value))


def message_digest(payload: bytes) -> str:
    """What a confirm names a message by besides its id: the sha256 of its bytes as sent."""
    return hashlib.sha256(payload).hexdigest()


def is_sha256(value: Any) -> bool:
    """Whether `value` is a sha256 as the protocol writes it: 64 lowercase hex digits."""
    return isinstance(value, str) and bool(_SHA256.match(value))


@dataclass(frozen=True)
class Envelope:
    """One protocol message. `seq` counts per device and topic kind, starting at 1."""

    device_id: str
    seq: int
    type: str
    body: Dict[str, Any]
    id: str = field(default_factory=new_message_id)
    ts: float = field(default_factory=lambda: round(time.time(), 3))
    schema: int = SCHEMA_VERSION

    def to_dict(self) -> Dict[str, Any]:
        return {key: getattr(self, key) for key in _ENVELOPE_KEYS}

    def encode(self) -> bytes:
        """Compact UTF-8 JSON. Non-finite floats (NaN, inf) become null: JSON has no such numbers."""
        data = self.to_dict()
        try:
            text = json.dumps(data, separators=(",", ":"), allow_nan=False)
        except ValueError:
            text = json.dumps(finite(data), separators=(",", ":"), allow_nan=False)
        return text.encode("utf-8")

    @classmethod
    def decode(
        cls,
        payload: bytes,
        expect_device: Optional[str] = None,
        max_bytes: int = MAX_MESSAGE_BYTES,
    ) -> "Envelope":
        """Parse and validate one message; ProtocolError says what is wrong with it."""
        return cls.from_dict(parse_json(payload, max_bytes), expect_device)

    @classmethod
    def from_dict(cls, data: Any, expect_device: Optional[str] = None) -> "Envelope":
        if not isinstance(data, dict):
            raise ProtocolError(f"message must be a JSON object, got {type(data).__name__}")
        missing = [key for key in _ENVELOPE_KEYS if key not in data]
        if missing:
            raise ProtocolError(f"message lacks {', '.join(missing)}", job_id=_job_id_of(data.get("body")))
        job_id = _job_id_of(data["body"])
        schema = data["schema"]
        if not is_int(schema) or schema < 1:
            raise ProtocolError(f"'schema' must be a positive integer, got {schema!r}", job_id=job_id)
        if schema != SCHEMA_VERSION:
            raise ProtocolError(
                f"message schema {schema} is not the one this side speaks ({SCHEMA_VERSION}); "
                "upgrade the older side",
                kind="unsupported_schema",
                job_id=job_id,
            )
        if not isinstance(data["id"], str) or not _MESSAGE_ID.match(data["id"]):
            raise ProtocolError(f"'id' must be 32 lowercase hex digits, got {data['id']!r}", job_id=job_id)
        device_id = data["device_id"]
        try:
            validate_device_id(device_id)
        except ProtocolError as exc:
            raise ProtocolError(str(exc), job_id=job_id) from None
        if expect_device is not None and device_id != expect_device:
            raise ProtocolError(
                f"message is addressed to device '{device_id}' but arrived for '{expect_device}'",
                kind="wrong_device",
                job_id=job_id,
            )
        if not is_int(data["seq"]) or data["seq"] < 0:
            raise ProtocolError(f"'seq' must be a non-negative integer, got {data['seq']!r}", job_id=job_id)
        if not is_number(data["ts"]):
            raise ProtocolError(f"'ts' must be seconds since the Unix epoch, got {data['ts']!r}", job_id=job_id)
        if not isinstance(data["type"], str) or not data["type"]:
            raise ProtocolError(f"'type' must be a non-empty string, got {data['type']!r}", job_id=job_id)
        if not isinstance(data["body"], dict):
            raise ProtocolError(f"'body' must be a JSON object, got {type(data['body']).__name__}", job_id=job_id)
        return cls(
            device_id=device_id,
            seq=data["seq"],
            type=data["type"],
            body=data["body"],
            id=data["id"],
            ts=float(data["ts"]),
            schema=schema,
        )


def parse_json(payload: bytes, max_bytes: int = MAX_MESSAGE_BYTES) -> Any:
    """The JSON value of a message (checked as an envelope by `Envelope.from_dict`)."""
    if len(payload) > max_bytes:
        raise ProtocolError(f"message of {len(payload)} bytes is over the {max_bytes}-byte limit", kind="oversized")
    try:
        return json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:  # numbers over int_max_str_digits are ValueErrors too
        raise ProtocolError(f"message is not valid UTF-8 JSON: {exc}") from None
    except RecursionError:
        raise ProtocolError("message is not valid JSON: nested too deeply") from None


def _job_id_of(body: Any) -> Optional[str]:
    job_id = body.get("job_id") if isinstance(body, dict) else None
    return job_id if isinstance(job_id, str) else None


def status_body(state: str, reason: str, **details: Any) -> Dict[str, Any]:
    """Body of a status message: `state` is "online" or "offline", `reason` says why."""
    if state not in (ONLINE, OFFLINE):
        raise ProtocolError(f"status state must be '{ONLINE}' or '{OFFLINE}', got {state!r}")
    return {"state": state, "reason": reason, **details}


def result_body(
    job_id: Optional[str],
    job_type: Optional[str],
    request_id: Optional[str],
    result: Optional[Mapping[str, Any]] = None,
    error: Optional[Mapping[str, Any]] = None,
    meta: Optional[Mapping[str, Any]] = None,
) -> Dict[str, Any]:
    """Body of a results message: the engine's result and/or an error {kind, message}.

    `request_id` is the envelope id of the job message, so the sender can match the answer even
    when the job was too broken to carry a job_id. A result whose "ok" is not true brings its
    own error. `meta` is the job's `meta`, echoed unchanged.
    """
    if result is None and error is None:
        raise ValueError("a result body needs a result or an error")
    if error is None and result is not None and result.get("ok") is not True:
        error = result.get("error") or error_info("failed", "the job failed without saying why")
    return {
        "job_id": job_id,
        "job_type": job_type,
        "request_id": request_id,
        "ok": error is None,
        "error": dict(error) if error is not None else None,
        "result": dict(result) if result is not None else None,
        "meta": dict(meta) if meta is not None else None,
    }


def error_info(kind: str, message: str) -> Dict[str, str]:
    return {"kind": kind, "message": message}
