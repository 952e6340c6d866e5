"""Benchmark jobs: the artifact a job names, its target devices, release, signature and validity;
parsing a job (board) and building one (host)."""
from __future__ import annotations

import base64
import binascii
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from ..runtimes import FORMATS as RUNTIME_FORMATS
from ..values import is_int, is_number
from .bench_options import BenchOptions, parse_bench
from .chunks import MAX_CHUNK_BYTES, MAX_CHUNKS, MIN_CHUNK_BYTES, ChunkPlan, chunk_count
from .envelope import BENCHMARK_JOB, JOB_TYPES, Envelope, is_sha256
from .errors import ProtocolError
from .topics import validate_device_id

# Inline artifacts travel base64-encoded inside one job message; bigger files go in chunks.
MAX_INLINE_ARTIFACT_BYTES = 4 * 1024 * 1024
ARTIFACT_FORMATS = RUNTIME_FORMATS
# Where a job's artifact comes from: exactly one of these keys of its "artifact" object.
ARTIFACT_SOURCES = ("path", "data_b64", "chunks", "url")
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
        bench = parse_bench(body.get("bench", {}))
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
    `bench` holds benchmark options (BenchOptions' names; another name is a TypeError, and
    `job_message` checks the values as the board will); `meta` is anything the sender wants echoed
    in the result.
    """
    BenchOptions.refuse_unknown(bench)
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


def benchmark_job(device_id: str, seq: int, *body: Any, target: Optional[JobTarget] = None, **options: Any) -> Envelope:
    """A benchmark job for one device (host side): `benchmark_body(*body, **options)` addressed to
    `device_id` (the `target`, by default that device alone)."""
    target = target or JobTarget(devices=(device_id,))
    return job_message(device_id, seq, benchmark_body(*body, target=target, **options))


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
    if not is_sha256(sha256):
        raise ProtocolError("artifact 'sha256' must be 64 lowercase hex digits")
    fmt = data.get("format")
    if fmt not in ARTIFACT_FORMATS:
        raise ProtocolError(f"artifact 'format' must be one of {', '.join(ARTIFACT_FORMATS)}, got {fmt!r}")
    size = data.get("size")
    if size is not None and (not is_int(size) or size < 1):
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
    if not is_int(chunk_size) or not MIN_CHUNK_BYTES <= chunk_size <= MAX_CHUNK_BYTES:
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
    if not all(is_sha256(h) for h in hashes):
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
    if not (is_number(issued_at) and is_number(expires_at)):
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
    if not is_number(version):
        raise ProtocolError(f"job 'release.version' must be a number, got {version!r}")
    return Release(model, version)
