"""The edgeopt wire protocol: MQTT topics, the message envelope and the job schema.

Standard library only: the agent publishes with it and the host (fleet collector, deploy)
imports the same definitions, so both sides agree by construction. docs/PROTOCOL.md is the
human-readable version of this module.

Topics, all under ``edgeopt/v1/<device_id>/``:

    status     device -> host  retained; "online" on connect, "offline" on shutdown or Last Will
    telemetry  device -> host  periodic load, memory, temperature, power, disk, versions
    jobs       host -> device  work for the agent (type "benchmark")
    results    device -> host  one message per job: the result, or an error
    transfer   device -> host  for a job whose artifact comes in chunks: the chunks still missing
    chunks     host -> device  the pieces of an artifact the device asked for
    confirm    host -> device  the collector: which of the device's messages it committed

Every message is one JSON object, the envelope::

    {"id": "<uuid4 hex>", "device_id": "rpi-01", "seq": 17, "ts": 1712345678.123,
     "schema": 1, "type": "telemetry", "body": {...}}
"""
from __future__ import annotations

import base64
import binascii
import json
import math
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from .errors import UserError

SCHEMA_VERSION = 1
TOPIC_ROOT = "edgeopt/v1"

STATUS = "status"
TELEMETRY = "telemetry"
JOBS = "jobs"
RESULTS = "results"
TRANSFER = "transfer"
CHUNKS = "chunks"
CONFIRM = "confirm"
TOPIC_KINDS = (STATUS, TELEMETRY, JOBS, RESULTS, TRANSFER, CHUNKS, CONFIRM)
# What the agent keeps until the collector confirms it committed it (others: until the broker's PUBACK).
CONFIRMED_KINDS = (TELEMETRY, RESULTS)

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
# Inline artifacts travel base64-encoded inside one job message; bigger files go in chunks.
MAX_INLINE_ARTIFACT_BYTES = 4 * 1024 * 1024
ARTIFACT_FORMATS = ("onnx", "tflite")
# Where a job's artifact comes from: exactly one of these keys of its "artifact" object.
ARTIFACT_SOURCES = ("path", "data_b64", "chunks", "url")
DEFAULT_CHUNK_BYTES = 256 * 1024
MIN_CHUNK_BYTES = 1024
MAX_CHUNK_BYTES = 4 * 1024 * 1024  # base64 of it stays well under MAX_MESSAGE_BYTES
MAX_CHUNKS = 65536  # keeps the job's list of chunk hashes under 5 MB
MAX_URL_CHARS = 2048
MAX_META_BYTES = 16 * 1024  # a job's `meta` is echoed in its result: small, flat facts only
MAX_META_DEPTH = 8
SIGNATURE_ALGORITHMS = ("ed25519",)
ED25519_SIGNATURE_BYTES = 64
# How long a job stays valid after it is issued: the default of `edgeopt deploy`, and the most a
# job may ask for (an agent remembers each signed job's id until it expires, so this bounds that).
DEFAULT_JOB_LIFETIME_S = 24 * 3600.0
MAX_JOB_LIFETIME_S = 30 * 24 * 3600.0
MAX_TARGET_DEVICES = 10000
# The fields of a job body; `signature` covers all the others (edgeopt_agent.signing.job_statement).
JOB_FIELDS = ("job_id", "artifact", "bench", "meta", "target", "issued_at", "expires_at", "release",
              "allow_downgrade", "signature")

_DEVICE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_MESSAGE_ID = re.compile(r"^[0-9a-f]{32}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_ENVELOPE_KEYS = ("id", "device_id", "seq", "ts", "schema", "type", "body")


class ProtocolError(UserError):
    """A message that breaks the protocol; `kind` is the error kind reported back to the sender."""

    def __init__(self, message: str, kind: str = "malformed_message", job_id: Optional[str] = None):
        super().__init__(message)
        self.kind = kind
        self.job_id = job_id


# --- topics -----------------------------------------------------------------------------------


def validate_device_id(device_id: str) -> str:
    """Device ids are topic levels: letters, digits, '.', '_' and '-', at most 64 characters."""
    if not isinstance(device_id, str) or not _DEVICE_ID.match(device_id):
        raise ProtocolError(
            f"invalid device id {device_id!r}: use 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit",
            kind="invalid_device_id",
        )
    return device_id


def topic(device_id: str, kind: str) -> str:
    """The topic of one device's message kind, e.g. ``edgeopt/v1/rpi-01/results``."""
    if kind not in TOPIC_KINDS:
        raise ProtocolError(f"unknown topic kind '{kind}'; known: {', '.join(TOPIC_KINDS)}")
    return f"{TOPIC_ROOT}/{validate_device_id(device_id)}/{kind}"


def status_topic(device_id: str) -> str:
    return topic(device_id, STATUS)


def telemetry_topic(device_id: str) -> str:
    return topic(device_id, TELEMETRY)


def jobs_topic(device_id: str) -> str:
    return topic(device_id, JOBS)


def results_topic(device_id: str) -> str:
    return topic(device_id, RESULTS)


def transfer_topic(device_id: str) -> str:
    return topic(device_id, TRANSFER)


def chunks_topic(device_id: str) -> str:
    return topic(device_id, CHUNKS)


def confirm_topic(device_id: str) -> str:
    return topic(device_id, CONFIRM)


def subscription(kind: Optional[str] = None, device_id: str = "+") -> str:
    """A topic filter: one kind (or all with None) of one device (or every device with "+")."""
    if device_id != "+":
        validate_device_id(device_id)
    if kind is None:
        return f"{TOPIC_ROOT}/{device_id}/#"
    if kind not in TOPIC_KINDS:
        raise ProtocolError(f"unknown topic kind '{kind}'; known: {', '.join(TOPIC_KINDS)}")
    return f"{TOPIC_ROOT}/{device_id}/{kind}"


def shared_subscription(group: str, kind: Optional[str] = None) -> str:
    """An MQTT v5 shared subscription, so several collectors split the devices' messages."""
    if not group or any(c in group for c in "/+#"):
        raise ProtocolError(f"invalid share group {group!r}: it may not be empty or contain '/', '+' or '#'")
    return f"$share/{group}/{subscription(kind)}"


def parse_topic(name: str) -> Tuple[str, str]:
    """Split ``edgeopt/v1/<device_id>/<kind>`` into (device_id, kind)."""
    prefix = TOPIC_ROOT + "/"
    parts = name[len(prefix):].split("/") if name.startswith(prefix) else []
    if len(parts) != 2 or parts[1] not in TOPIC_KINDS:
        raise ProtocolError(f"'{name}' is not an edgeopt topic ({TOPIC_ROOT}/<device_id>/<kind>)")
    return validate_device_id(parts[0]), parts[1]


# --- envelope ---------------------------------------------------------------------------------


def new_message_id() -> str:
    return uuid.uuid4().hex


def is_message_id(value: Any) -> bool:
    """Whether `value` is an envelope id: 32 lowercase hex digits."""
    return isinstance(value, str) and bool(_MESSAGE_ID.match(value))


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
            text = json.dumps(_finite(data), separators=(",", ":"), allow_nan=False)
        return text.encode("utf-8")

    @classmethod
    def decode(
        cls,
        payload: bytes,
        expect_device: Optional[str] = None,
        max_bytes: int = MAX_MESSAGE_BYTES,
    ) -> "Envelope":
        """Parse and validate one message; ProtocolError says what is wrong with it."""
        if len(payload) > max_bytes:
            raise ProtocolError(f"message of {len(payload)} bytes is over the {max_bytes}-byte limit", kind="oversized")
        try:
            data = json.loads(payload.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:  # numbers over int_max_str_digits are ValueErrors too
            raise ProtocolError(f"message is not valid UTF-8 JSON: {exc}") from None
        except RecursionError:
            raise ProtocolError("message is not valid JSON: nested too deeply") from None
        return cls.from_dict(data, expect_device)

    @classmethod
    def from_dict(cls, data: Any, expect_device: Optional[str] = None) -> "Envelope":
        if not isinstance(data, dict):
            raise ProtocolError(f"message must be a JSON object, got {type(data).__name__}")
        missing = [key for key in _ENVELOPE_KEYS if key not in data]
        if missing:
            raise ProtocolError(f"message lacks {', '.join(missing)}", job_id=_job_id_of(data.get("body")))
        job_id = _job_id_of(data["body"])
        schema = data["schema"]
        if not _is_int(schema) or schema < 1:
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
        if not _is_int(data["seq"]) or data["seq"] < 0:
            raise ProtocolError(f"'seq' must be a non-negative integer, got {data['seq']!r}", job_id=job_id)
        if not _is_number(data["ts"]):
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


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    """A finite int or float; ints too big for a float (OverflowError in math) are not numbers here."""
    if not (_is_int(value) or isinstance(value, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _job_id_of(body: Any) -> Optional[str]:
    job_id = body.get("job_id") if isinstance(body, dict) else None
    return job_id if isinstance(job_id, str) else None


# --- device messages --------------------------------------------------------------------------


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


# --- jobs -------------------------------------------------------------------------------------

# Benchmark options a job may set, with their JSON types; they map one to one onto the fields of
# edgeopt_agent.bench.BenchmarkSpec (the agent fills in the artifact itself).
BENCH_OPTIONS: Dict[str, Tuple[str, bool]] = {
    # name: (kind, nullable)
    "runs": ("positive", False),
    "duration_s": ("number", False),
    "warmup_runs": ("count", False),
    "warmup_s": ("number", False),
    "max_duration_s": ("number", False),
    "threads": ("positive", True),
    "batch_sizes": ("batch_sizes", True),
    "latency_budget_ms": ("number", True),
    "input_file": ("path", True),
    "seed": ("integer", False),
    "timeout_s": ("number", False),
    "memory_limit_mb": ("positive", True),
    "runtime": ("name", True),
    "precision": ("name", True),  # the precision a TensorRT engine is built at on the board
    "idle_s": ("number", False),
    "profile": ("flag", False),  # per-op profile from the runtime's own profiler, published with the result
    "inputs": ("inputs", True),  # how to feed each input: see check_input_description
}

INPUT_DESCRIPTION_KEYS = ("name", "shape", "dtype", "value", "alias", "min_shape", "max_shape")
MAX_DESCRIBED_INPUTS = 256
MAX_INPUT_RANK = 16
MAX_INPUT_ELEMENTS = 2**28  # per input: a job cannot ask the board to fill more than this


def check_input_description(value: Any) -> Tuple[Dict[str, Any], ...]:
    """The `inputs` bench option: one object per model input, saying how the board feeds it.

    {"name": the artifact's input name, "shape": [concrete dims] (fills the dims the artifact
    leaves dynamic), "dtype": optional, "value": optional constant every feed holds (a sample
    rate), "alias": optional name the model used for it (an input file may use either),
    "min_shape"/"max_shape": optional, the smallest and largest sizes the conversion fed (a
    TensorRT optimization profile spans them, `shape` being its optimum)}.
    Raises UserError with the first problem.
    """
    if not isinstance(value, (list, tuple)) or len(value) > MAX_DESCRIBED_INPUTS:
        raise UserError(f"'inputs' must be a list of at most {MAX_DESCRIBED_INPUTS} input descriptions, got {value!r}")
    result = []
    for number, item in enumerate(value, start=1):
        if not isinstance(item, dict):
            raise UserError(f"'inputs' #{number} must be an object, got {item!r}")
        unknown = sorted(set(item) - set(INPUT_DESCRIPTION_KEYS))
        if unknown:
            raise UserError(f"'inputs' #{number} has unknown key(s) {', '.join(unknown)}; "
                            f"known: {', '.join(INPUT_DESCRIPTION_KEYS)}")
        for key in ("name", "dtype", "alias"):
            if key in item and (not isinstance(item[key], str) or not 1 <= len(item[key]) <= 256):
                raise UserError(f"'inputs' #{number} '{key}' must be a string of 1-256 characters, got {item.get(key)!r}")
        if "name" not in item:
            raise UserError(f"'inputs' #{number} needs a 'name'")
        shape = item.get("shape")
        if not isinstance(shape, (list, tuple)) or len(shape) > MAX_INPUT_RANK or \
                not all(_is_int(d) and 0 <= d <= 2**31 for d in shape):
            raise UserError(f"'inputs' '{item['name']}' needs a 'shape': a list of at most {MAX_INPUT_RANK} "
                            f"non-negative integers, got {shape!r}")
        elements = 1
        for dim in shape:
            elements *= dim
        if elements > MAX_INPUT_ELEMENTS:
            raise UserError(f"'inputs' '{item['name']}' shape {list(shape)} holds more than {MAX_INPUT_ELEMENTS} elements")
        if "value" in item and not (isinstance(item["value"], bool) or _is_number(item["value"])):
            raise UserError(f"'inputs' '{item['name']}' 'value' must be a number or a boolean, got {item['value']!r}")
        checked = {**item, "shape": [int(d) for d in shape]}
        for key, fits in (("min_shape", lambda bound, d: bound <= d), ("max_shape", lambda bound, d: bound >= d)):
            if key not in item:
                continue
            bound = item[key]
            if not isinstance(bound, (list, tuple)) or len(bound) != len(shape) or \
                    not all(_is_int(b) and 0 <= b <= 2**31 and fits(b, d) for b, d in zip(bound, shape)):
                raise UserError(f"'inputs' '{item['name']}' '{key}' must list {len(shape)} integers bounding its "
                                f"shape {list(shape)}, got {bound!r}")
            checked[key] = [int(b) for b in bound]
        result.append(checked)
    names = [i["name"] for i in result]
    if len(set(names)) != len(names):
        raise UserError(f"'inputs' names an input twice: {names}")
    return tuple(result)


@dataclass(frozen=True)
class ChunkPlan:
    """How an artifact is cut for the trip through the broker: fixed-size chunks, each with its sha256."""

    chunk_size: int
    sha256: Tuple[str, ...]

    @property
    def count(self) -> int:
        return len(self.sha256)

    def length(self, index: int, size: int) -> int:
        """Bytes in chunk `index` of a `size`-byte artifact (the last one may be shorter)."""
        return min(self.chunk_size, size - index * self.chunk_size)

    def to_dict(self) -> Dict[str, Any]:
        return {"chunk_size": self.chunk_size, "sha256": list(self.sha256)}


def chunk_count(size: int, chunk_size: int) -> int:
    return max(1, -(-size // chunk_size))


@dataclass(frozen=True)
class Signature:
    """An Ed25519 signature over a whole job (edgeopt_agent.signing.job_statement)."""

    alg: str
    key_id: str
    value: str  # base64 of the 64 signature bytes

    def raw(self) -> bytes:
        return base64.b64decode(self.value, validate=True)

    def to_dict(self) -> Dict[str, Any]:
        return {"alg": self.alg, "key_id": self.key_id, "value": self.value}


@dataclass(frozen=True)
class ArtifactRef:
    """The model a job runs: a file already under the agent's data dir, the bytes inline, chunks
    sent separately on the device's chunks topic, or a URL the agent downloads."""

    sha256: str
    format: str
    path: Optional[str] = None
    data_b64: Optional[str] = None
    size: Optional[int] = None
    chunks: Optional[ChunkPlan] = None
    url: Optional[str] = None

    @property
    def source(self) -> str:
        """Which of ARTIFACT_SOURCES the file comes from."""
        return next(key for key in ARTIFACT_SOURCES if getattr(self, key) is not None)

    def describe(self) -> str:
        if self.path is not None:
            return self.path
        if self.url is not None:
            return self.url
        what = "inline" if self.data_b64 is not None else f"{self.chunks.count} chunks"
        return f"{what} {self.format} {self.sha256[:12]}"

    def inline_bytes(self) -> bytes:
        """The decoded inline artifact (ProtocolError if it is not valid base64)."""
        if self.data_b64 is None:
            raise ValueError(f"this artifact comes by {self.source}, not inline")
        try:
            return base64.b64decode(self.data_b64, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ProtocolError(f"artifact data_b64 is not valid base64: {exc}", kind="invalid_job") from None


@dataclass(frozen=True)
class JobTarget:
    """Which devices a job is for. One signed job can serve several devices: the same body, with
    its signature, goes to each device's jobs topic, and a device runs it only when it is named.

    `devices`: the device ids (None: any device of `profile`); `profile`: the device profile
    the devices must have (None: any). A job names at least one of the two; `edgeopt deploy`
    names the devices it picked, and the profile too when it picked them by profile.
    """

    devices: Optional[Tuple[str, ...]] = None
    profile: Optional[str] = None

    def includes(self, device_id: str, profile: Optional[str]) -> bool:
        return ((self.devices is None or device_id in self.devices)
                and (self.profile is None or self.profile == profile))

    def describe(self) -> str:
        parts = []
        if self.devices is not None:
            parts.append("device" + ("s " if len(self.devices) > 1 else " ") + ", ".join(self.devices[:5])
                         + (f" and {len(self.devices) - 5} more" if len(self.devices) > 5 else ""))
        if self.profile is not None:
            parts.append(f"profile '{self.profile}'")
        return " of ".join(parts)

    def to_dict(self) -> Dict[str, Any]:
        return {"devices": list(self.devices) if self.devices is not None else None, "profile": self.profile}


@dataclass(frozen=True)
class Release:
    """Which build of a model a job's artifact is: an agent refuses an older `version` of a `model`
    than the last one it accepted, unless the job allows a downgrade. The host sets both (deploy:
    the manifest's model source and its creation time, seconds since the epoch)."""

    model: str
    version: float

    def to_dict(self) -> Dict[str, Any]:
        return {"model": self.model, "version": self.version}


@dataclass(frozen=True)
class BenchmarkJob:
    job_id: str
    artifact: ArtifactRef
    bench: Dict[str, Any]
    request_id: str
    # The sender's own facts about the job (model, manifest, precision...): not interpreted by
    # the agent, echoed in the result so the fleet can file it.
    meta: Optional[Dict[str, Any]] = None
    target: Optional[JobTarget] = None
    issued_at: Optional[float] = None  # seconds since the epoch, sender's clock
    expires_at: Optional[float] = None
    release: Optional[Release] = None
    allow_downgrade: bool = False
    signature: Optional[Signature] = None
    # The body as received: what the signature is checked against.
    body: Dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


def parse_job(envelope: Envelope) -> BenchmarkJob:
    """Validate the body of a job message. Unknown job types raise kind "unknown_job_type"."""
    body = envelope.body
    job_id = body.get("job_id")
    if not isinstance(job_id, str) or not 1 <= len(job_id) <= 128:
        raise ProtocolError("job body needs 'job_id', a string of 1-128 characters", kind="invalid_job")
    if envelope.type not in JOB_TYPES:
        raise ProtocolError(
            f"unknown job type '{envelope.type}'; this agent runs: {', '.join(JOB_TYPES)}",
            kind="unknown_job_type",
            job_id=job_id,
        )
    try:
        unknown = sorted(set(body) - set(JOB_FIELDS))
        if unknown:
            raise ProtocolError(f"unknown job field(s): {', '.join(unknown)}; known: {', '.join(JOB_FIELDS)}")
        artifact = _parse_artifact(body.get("artifact"))
        bench = _parse_bench(body.get("bench", {}))
        meta = _check_meta(body.get("meta"))
        target = _parse_target(body["target"]) if body.get("target") is not None else None
        issued_at, expires_at = _parse_validity(body.get("issued_at"), body.get("expires_at"))
        release = _parse_release(body["release"]) if body.get("release") is not None else None
        allow_downgrade = body.get("allow_downgrade", False)
        if not isinstance(allow_downgrade, bool):
            raise ProtocolError(f"job 'allow_downgrade' must be true or false, got {allow_downgrade!r}")
        signature = _parse_signature(body["signature"]) if body.get("signature") is not None else None
        if signature is not None and (target is None or expires_at is None):
            raise ProtocolError("a signed job must name its 'target' and carry 'issued_at' and 'expires_at'")
    except ProtocolError as exc:
        kind = "invalid_job" if exc.kind == "malformed_message" else exc.kind
        raise ProtocolError(str(exc), kind=kind, job_id=job_id) from None
    return BenchmarkJob(job_id=job_id, artifact=artifact, bench=bench, request_id=envelope.id, meta=meta,
                        target=target, issued_at=issued_at, expires_at=expires_at, release=release,
                        allow_downgrade=allow_downgrade, signature=signature, body=body)


Signer = Callable[[Mapping[str, Any]], Signature]


def benchmark_body(
    job_id: str,
    sha256: str,
    fmt: str,
    path: Optional[str] = None,
    data: Optional[bytes] = None,
    meta: Optional[Mapping[str, Any]] = None,
    *,
    chunks: Optional[ChunkPlan] = None,
    url: Optional[str] = None,
    size: Optional[int] = None,
    target: Optional[JobTarget] = None,
    issued_at: Optional[float] = None,
    lifetime_s: float = DEFAULT_JOB_LIFETIME_S,
    release: Optional[Release] = None,
    allow_downgrade: bool = False,
    signer: Optional[Signer] = None,
    **bench: Any,
) -> Dict[str, Any]:
    """The body of a benchmark job, the same for every device it is sent to (host side). Give one
    of `path`, the artifact's `data`, its `chunks` plan (then send the chunks the device asks for)
    or a `url`; `size` is required with chunks or url.

    The job is valid from `issued_at` (default: now) for `lifetime_s`. `signer` (the host's key,
    `SigningKey.sign_job`) signs everything in the body; a signed job needs a `target`.
    `bench` holds BENCH_OPTIONS; `meta` is anything the sender wants echoed in the result.
    """
    artifact: Dict[str, Any] = {"sha256": sha256, "format": fmt}
    if size is not None:
        artifact["size"] = size
    if path is not None:
        artifact["path"] = path
    if data is not None:
        artifact["data_b64"] = base64.b64encode(data).decode("ascii")
    if chunks is not None:
        artifact["chunks"] = chunks.to_dict()
    if url is not None:
        artifact["url"] = url
    issued_at = round(time.time(), 3) if issued_at is None else issued_at
    body: Dict[str, Any] = {
        "job_id": job_id,
        "artifact": artifact,
        "bench": {k: list(v) if isinstance(v, tuple) else v for k, v in bench.items()},
        "issued_at": issued_at,
        "expires_at": round(issued_at + lifetime_s, 3),
    }
    if meta is not None:
        body["meta"] = dict(meta)
    if target is not None:
        body["target"] = target.to_dict()
    if release is not None:
        body["release"] = release.to_dict()
    if allow_downgrade:
        body["allow_downgrade"] = True
    if signer is not None:
        body["signature"] = signer(body).to_dict()
    return body


def job_message(device_id: str, seq: int, body: Mapping[str, Any]) -> Envelope:
    """A job message for one device, checked as the device will check it (host side)."""
    envelope = Envelope(device_id=validate_device_id(device_id), seq=seq, type=BENCHMARK_JOB, body=dict(body))
    parse_job(envelope)  # the sender finds a broken job before the device does
    return envelope


def benchmark_job(
    device_id: str,
    seq: int,
    job_id: str,
    sha256: str,
    fmt: str,
    path: Optional[str] = None,
    data: Optional[bytes] = None,
    meta: Optional[Mapping[str, Any]] = None,
    *,
    target: Optional[JobTarget] = None,
    **options: Any,
) -> Envelope:
    """A benchmark job for one device (host side): `benchmark_body` addressed to `device_id`
    (the `target`, by default that device alone)."""
    target = target or JobTarget(devices=(device_id,))
    return job_message(device_id, seq, benchmark_body(job_id, sha256, fmt, path, data, meta, target=target,
                                                      **options))


# --- chunked transfer -------------------------------------------------------------------------
#
# A job whose artifact has "chunks" names the artifact (sha256, size, chunk hashes); the bytes
# travel separately. On receiving the job the agent answers on its transfer topic with the
# chunks it still misses (none when it already holds the file); the sender publishes exactly
# those on the device's chunks topic. Received chunks are kept across restarts and failed
# transfers, so a job sent again only costs the chunks still missing.


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
    if not isinstance(sha256, str) or not _SHA256.match(sha256):
        raise ProtocolError("transfer 'artifact_sha256' must be 64 lowercase hex digits")
    if not _is_int(chunks) or not 1 <= chunks <= MAX_CHUNKS:
        raise ProtocolError(f"transfer 'chunks' must be 1-{MAX_CHUNKS}, got {chunks!r}")
    if not isinstance(missing, list) or not all(_is_int(i) and 0 <= i < chunks for i in missing):
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
    if not isinstance(sha256, str) or not _SHA256.match(sha256):
        raise ProtocolError("chunk 'artifact_sha256' must be 64 lowercase hex digits")
    if not _is_int(index) or not 0 <= index < MAX_CHUNKS:
        raise ProtocolError(f"chunk 'index' must be 0-{MAX_CHUNKS - 1}, got {index!r}")
    if not isinstance(data_b64, str) or len(data_b64) > (MAX_CHUNK_BYTES + 2) // 3 * 4:
        raise ProtocolError(f"chunk 'data_b64' must be the base64 of at most {MAX_CHUNK_BYTES} bytes")
    try:
        data = base64.b64decode(data_b64, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ProtocolError(f"chunk data_b64 is not valid base64: {exc}") from None
    return Chunk(sha256, index, data)


def _check_meta(meta: Any) -> Optional[Dict[str, Any]]:
    if meta is None:
        return None
    if not isinstance(meta, dict):
        raise ProtocolError(f"job 'meta' must be an object, got {type(meta).__name__}")
    if _depth(meta) > MAX_META_DEPTH:
        raise ProtocolError(f"job 'meta' is nested more than {MAX_META_DEPTH} levels deep")
    size = len(json.dumps(meta, separators=(",", ":")).encode("utf-8"))
    if size > MAX_META_BYTES:
        raise ProtocolError(f"job 'meta' is {size} bytes of JSON, over the {MAX_META_BYTES}-byte limit")
    return meta


def _depth(value: Any) -> int:
    """How deeply lists and objects nest in `value` (0 for a scalar), without recursing."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, level)
        if level <= MAX_META_DEPTH:
            stack.extend((child, level + 1) for child in children)
    return deepest


def _parse_artifact(data: Any) -> ArtifactRef:
    if not isinstance(data, dict):
        raise ProtocolError("job needs 'artifact', an object with sha256, format and one of " + ", ".join(ARTIFACT_SOURCES))
    known = ("sha256", "format", "size") + ARTIFACT_SOURCES
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ProtocolError(f"unknown artifact field(s): {', '.join(unknown)}; known: {', '.join(known)}")
    sha256 = data.get("sha256")
    if not isinstance(sha256, str) or not _SHA256.match(sha256):
        raise ProtocolError("artifact 'sha256' must be 64 lowercase hex digits")
    fmt = data.get("format")
    if fmt not in ARTIFACT_FORMATS:
        raise ProtocolError(f"artifact 'format' must be one of {', '.join(ARTIFACT_FORMATS)}, got {fmt!r}")
    size = data.get("size")
    if size is not None and (not _is_int(size) or size < 1):
        raise ProtocolError(f"artifact 'size' must be a positive number of bytes, got {size!r}")
    sources = [key for key in ARTIFACT_SOURCES if data.get(key) is not None]
    if len(sources) != 1:
        raise ProtocolError(
            "artifact needs exactly one of 'path' (a file on the device), 'data_b64' (the file inline), "
            "'chunks' (sent on the chunks topic) or 'url' (downloaded by the agent)"
        )
    for needs_size in ("chunks", "url"):
        if data.get(needs_size) is not None and size is None:
            raise ProtocolError(f"artifact with '{needs_size}' needs its 'size' in bytes")
    path, data_b64, url = data.get("path"), data.get("data_b64"), data.get("url")
    if path is not None and (not isinstance(path, str) or not path):
        raise ProtocolError("artifact 'path' must be a non-empty string relative to the agent's data dir")
    if data_b64 is not None:
        if not isinstance(data_b64, str):
            raise ProtocolError("artifact 'data_b64' must be a base64 string")
        # base64 grows data by 4/3; checking the text length avoids decoding an oversized file.
        if len(data_b64) > (MAX_INLINE_ARTIFACT_BYTES + 2) // 3 * 4:
            raise ProtocolError(
                f"inline artifact is over {MAX_INLINE_ARTIFACT_BYTES} bytes; send it in chunks, "
                "or copy it to the device and send its path",
                kind="artifact_too_large",
            )
    if url is not None:
        _check_url(url)
    chunks = _parse_chunk_plan(data["chunks"], size) if data.get("chunks") is not None else None
    return ArtifactRef(sha256=sha256, format=fmt, path=path, data_b64=data_b64, size=size, chunks=chunks, url=url)


def _parse_chunk_plan(data: Any, size: int) -> ChunkPlan:
    if not isinstance(data, dict) or sorted(data) != ["chunk_size", "sha256"]:
        raise ProtocolError("artifact 'chunks' must be an object with exactly 'chunk_size' and 'sha256'")
    chunk_size, hashes = data["chunk_size"], data["sha256"]
    if not _is_int(chunk_size) or not MIN_CHUNK_BYTES <= chunk_size <= MAX_CHUNK_BYTES:
        raise ProtocolError(
            f"artifact 'chunks.chunk_size' must be {MIN_CHUNK_BYTES}-{MAX_CHUNK_BYTES} bytes, got {chunk_size!r}"
        )
    expected = chunk_count(size, chunk_size)
    if expected > MAX_CHUNKS:
        raise ProtocolError(
            f"artifact of {size} bytes in {chunk_size}-byte chunks makes {expected} chunks, over {MAX_CHUNKS}; "
            "use bigger chunks",
            kind="artifact_too_large",
        )
    if not isinstance(hashes, list) or len(hashes) != expected:
        raise ProtocolError(
            f"artifact 'chunks.sha256' must list {expected} chunk hashes ({size} bytes in {chunk_size}-byte chunks)"
        )
    if not all(isinstance(h, str) and _SHA256.match(h) for h in hashes):
        raise ProtocolError("artifact 'chunks.sha256' entries must be 64 lowercase hex digits")
    return ChunkPlan(chunk_size=chunk_size, sha256=tuple(hashes))


def _check_url(url: Any) -> None:
    if not isinstance(url, str) or not 0 < len(url) <= MAX_URL_CHARS:
        raise ProtocolError(f"artifact 'url' must be a string of at most {MAX_URL_CHARS} characters")
    scheme, _, rest = url.partition("://")
    if scheme.lower() not in ("http", "https") or not rest or any(c.isspace() for c in url):
        raise ProtocolError(f"artifact 'url' must be an http:// or https:// URL, got {url[:80]!r}")


def _parse_signature(data: Any) -> Signature:
    if not isinstance(data, dict) or sorted(data) != ["alg", "key_id", "value"]:
        raise ProtocolError("job 'signature' must be an object with exactly 'alg', 'key_id' and 'value'")
    if data["alg"] not in SIGNATURE_ALGORITHMS:
        raise ProtocolError(
            f"job signature algorithm {data['alg']!r} is not one of {', '.join(SIGNATURE_ALGORITHMS)}",
            kind="signature_invalid",
        )
    if not isinstance(data["key_id"], str) or not 1 <= len(data["key_id"]) <= 64:
        raise ProtocolError("job signature 'key_id' must be a string of 1-64 characters")
    signature = Signature(alg=data["alg"], key_id=data["key_id"], value=data["value"])
    try:
        if not isinstance(signature.value, str) or len(signature.raw()) != ED25519_SIGNATURE_BYTES:
            raise ValueError("wrong length")
    except (binascii.Error, ValueError):
        raise ProtocolError(
            f"job signature 'value' must be the base64 of {ED25519_SIGNATURE_BYTES} bytes",
            kind="signature_invalid",
        ) from None
    return signature


def _parse_target(data: Any) -> JobTarget:
    if not isinstance(data, dict) or not set(data) <= {"devices", "profile"}:
        raise ProtocolError("job 'target' must be an object with 'devices' (a list of device ids) and/or 'profile'")
    devices, profile = data.get("devices"), data.get("profile")
    if devices is not None:
        if not isinstance(devices, list) or not 1 <= len(devices) <= MAX_TARGET_DEVICES:
            raise ProtocolError(f"job 'target.devices' must list 1-{MAX_TARGET_DEVICES} device ids")
        for device_id in devices:
            validate_device_id(device_id)
    if profile is not None and (not isinstance(profile, str) or not profile):
        raise ProtocolError("job 'target.profile' must be a profile name")
    if devices is None and profile is None:
        raise ProtocolError("job 'target' must name 'devices', a 'profile', or both")
    return JobTarget(tuple(devices) if devices is not None else None, profile)


def _parse_validity(issued_at: Any, expires_at: Any) -> Tuple[Optional[float], Optional[float]]:
    if issued_at is None and expires_at is None:
        return None, None
    if not (_is_number(issued_at) and _is_number(expires_at)):
        raise ProtocolError("job 'issued_at' and 'expires_at' must both be seconds since the Unix epoch")
    lifetime = expires_at - issued_at
    if not 0 < lifetime <= MAX_JOB_LIFETIME_S:
        raise ProtocolError(f"job 'expires_at' must be after 'issued_at' and at most {MAX_JOB_LIFETIME_S / 86400:g} "
                            f"days later, got {lifetime:g} s")
    return float(issued_at), float(expires_at)


def _parse_release(data: Any) -> Release:
    if not isinstance(data, dict) or sorted(data) != ["model", "version"]:
        raise ProtocolError("job 'release' must be an object with exactly 'model' and 'version'")
    model, version = data["model"], data["version"]
    if not isinstance(model, str) or not 1 <= len(model) <= 1024:
        raise ProtocolError("job 'release.model' must be a string of 1-1024 characters")
    if not _is_number(version):
        raise ProtocolError(f"job 'release.version' must be a number, got {version!r}")
    return Release(model, version)


def _parse_bench(data: Any) -> Dict[str, Any]:
    if not isinstance(data, dict):
        raise ProtocolError("job 'bench' must be an object of benchmark options")
    unknown = sorted(set(data) - set(BENCH_OPTIONS))
    if unknown:
        raise ProtocolError(
            f"unknown bench option(s): {', '.join(unknown)}; known: {', '.join(sorted(BENCH_OPTIONS))}"
        )
    options: Dict[str, Any] = {}
    for name, value in data.items():
        kind, nullable = BENCH_OPTIONS[name]
        if value is None:
            if not nullable:
                raise ProtocolError(f"bench option '{name}' may not be null")
            options[name] = None
            continue
        options[name] = _check_option(name, kind, value)
    return options


def _check_option(name: str, kind: str, value: Any) -> Any:
    if kind == "integer":
        if not _is_int(value):
            raise ProtocolError(f"bench option '{name}' must be an integer, got {value!r}")
    elif kind == "count":
        if not _is_int(value) or value < 0:
            raise ProtocolError(f"bench option '{name}' must be a non-negative integer, got {value!r}")
    elif kind == "positive":
        if not _is_int(value) or value < 1:
            raise ProtocolError(f"bench option '{name}' must be a positive integer, got {value!r}")
    elif kind == "number":
        if not _is_number(value) or value < 0:
            raise ProtocolError(f"bench option '{name}' must be a non-negative number, got {value!r}")
    elif kind == "batch_sizes":
        if not isinstance(value, list) or not value or not all(_is_int(v) and v >= 1 for v in value):
            raise ProtocolError(f"bench option '{name}' must be a non-empty list of positive integers, got {value!r}")
        return tuple(value)
    elif kind == "flag":
        if not isinstance(value, bool):
            raise ProtocolError(f"bench option '{name}' must be true or false, got {value!r}")
    elif kind == "inputs":
        try:
            return [dict(item) for item in check_input_description(value)]
        except UserError as exc:
            raise ProtocolError(f"bench option {exc}") from None
    elif kind in ("path", "name"):
        if not isinstance(value, str) or not value:
            raise ProtocolError(f"bench option '{name}' must be a non-empty string, got {value!r}")
    return value


# --- delivery confirmations -------------------------------------------------------------------
#
# The broker's PUBACK only says the broker has a message, and a broker that dies before saving
# it loses it. So the agent keeps each telemetry and results message until the collector says,
# on the device's confirm topic, that it committed it to its database (or already had it), or
# that it rejected it for good (then sending it again would not help). Ids only, batched.

MAX_CONFIRM_IDS = 1000  # per confirm message: ~40 KB of JSON at most


@dataclass(frozen=True)
class Confirmation:
    """Host -> device: message ids the collector committed, and those it rejected (id -> reason)."""

    committed: Tuple[str, ...]
    rejected: Dict[str, str]

    @property
    def ids(self) -> Tuple[str, ...]:
        """Every id the device may forget."""
        return self.committed + tuple(self.rejected)


def confirm_message(device_id: str, seq: int, committed: Any = (), rejected: Optional[Mapping[str, str]] = None
                    ) -> Envelope:
    """Host -> device: the device's messages (by envelope id) that are committed or rejected for good."""
    committed, rejected = list(committed), dict(rejected or {})
    if len(committed) + len(rejected) > MAX_CONFIRM_IDS:
        raise ValueError(f"a confirm message lists at most {MAX_CONFIRM_IDS} ids; split the batch")
    body = {"committed": committed, "rejected": [{"id": i, "reason": r} for i, r in rejected.items()]}
    return Envelope(device_id=validate_device_id(device_id), seq=seq, type=CONFIRM_TYPE, body=body)


def parse_confirm(envelope: Envelope) -> Confirmation:
    body = envelope.body
    if envelope.type != CONFIRM_TYPE:
        raise ProtocolError(f"a '{envelope.type}' message on a confirm topic; expected '{CONFIRM_TYPE}'")
    if sorted(body) != ["committed", "rejected"]:
        raise ProtocolError("confirm body needs exactly 'committed' and 'rejected'")
    committed, rejected = body["committed"], body["rejected"]
    if not isinstance(committed, list) or not all(isinstance(i, str) and _MESSAGE_ID.match(i) for i in committed):
        raise ProtocolError("confirm 'committed' must list message ids (32 lowercase hex digits)")
    if not isinstance(rejected, list) or not all(
        isinstance(r, dict) and sorted(r) == ["id", "reason"] and isinstance(r["id"], str)
        and _MESSAGE_ID.match(r["id"]) and isinstance(r["reason"], str) for r in rejected
    ):
        raise ProtocolError("confirm 'rejected' must list {id, reason} objects")
    if len(committed) + len(rejected) > MAX_CONFIRM_IDS:
        raise ProtocolError(f"a confirm message lists at most {MAX_CONFIRM_IDS} ids")
    return Confirmation(tuple(committed), {r["id"]: r["reason"][:200] for r in rejected})
