"""Turn one MQTT message from a device into the row it will become, or say why it is rejected; and
the registry of the messages a board sends the fleet (`KINDS`: topic, schema, row, table, handlers).

Pure functions, no database: the envelope is checked with the wire protocol's own validator
(edgeopt_agent.wire), its device signature with `edgeopt_agent.message_signing` (whose key it is,
and whether that is the board's pinned key, the writer decides), then the body with the checks
below, and the figures the fleet views sort and filter on are lifted into columns. The full body
is kept as JSON next to them.
"""
from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Union

from edgeopt_agent import message_signing, wire
from edgeopt_agent.runtimes import DISTRIBUTIONS
from edgeopt_agent.values import finite, is_int, is_number

from . import handlers

log = logging.getLogger(__name__)

EXCERPT_BYTES = 256
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # shown escaped; tab and newline stay
# Text no database column takes: NUL (PostgreSQL) and lone surrogates, which JSON's "\ud800" can
# produce and UTF-8 cannot encode (a valid pair is already one character once parsed).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
MAX_INT64 = 2 ** 63 - 1  # BIGINT and SQLite's INTEGER: the seq columns
MAX_INT32 = 2 ** 31 - 1  # INTEGER on PostgreSQL: results.threads
_META_TEXT = ("model", "model_sha256", "artifact_key", "format", "precision", "manifest_sha256", "build_id",
              "build_version")


@dataclass(frozen=True)
class Rejection:
    topic: str
    reason: str  # a short kind: malformed_message, oversized, wrong_device, unsupported_schema, ...
    detail: str
    payload_bytes: int
    excerpt: str
    device_id: Optional[str] = None
    message_id: Optional[str] = None
    digest: Optional[str] = None  # sha256 of the payload: what a confirm of this rejection names


@dataclass(frozen=True)
class DeviceMessage:
    kind: str  # status, telemetry or results
    envelope: wire.Envelope
    row: Dict[str, Any]  # the columns of its table (status, telemetry or results), id included
    public_key: bytes = b""  # the device key its signature verifies under (raw 32 bytes)
    digest: str = ""  # sha256 of the payload as received
    payload_bytes: int = 0
    excerpt: str = ""

    @property
    def device_id(self) -> str:
        return self.envelope.device_id

    @property
    def facts(self) -> Dict[str, Any]:
        """What it says about its device (see `device_facts`)."""
        return device_facts(self)


Parsed = Union[DeviceMessage, Rejection]


class BodyError(ValueError):
    """The envelope is fine but its body is not what its type promises."""


def parse(topic: str, payload: bytes, max_bytes: int = wire.MAX_MESSAGE_BYTES) -> Parsed:
    """Validate one message, its device signature included. Never raises for bad input: that becomes a Rejection."""
    digest = wire.message_digest(payload)

    def reject(reason: str, detail: str, device_id: Optional[str] = None, message_id: Optional[str] = None):
        return Rejection(clean(topic), reason, clean(detail), len(payload), excerpt(payload), device_id,
                         clean(message_id), digest)

    try:
        device_id, kind = wire.parse_topic(topic)
    except wire.ProtocolError as exc:
        return reject("invalid_topic", str(exc))
    if kind not in KINDS:
        return reject("unexpected_topic", f"'{kind}' messages go to devices; the collector stores "
                                          f"{', '.join(KINDS)}", device_id)
    try:
        document = wire.parse_json(payload, max_bytes)
        envelope = wire.Envelope.from_dict(document, expect_device=device_id)
    except wire.ProtocolError as exc:
        return reject(exc.kind, str(exc), device_id, _message_id_of(payload, max_bytes))
    except Exception as exc:  # RecursionError, OverflowError: a payload the JSON parser cannot take
        return reject("malformed_message", f"message could not be decoded: {type(exc).__name__}", device_id,
                      _message_id_of(payload, max_bytes))
    try:
        public_key = message_signing.verify_message(document)
    except wire.ProtocolError as exc:
        return reject(exc.kind, str(exc), device_id, envelope.id)
    if envelope.seq > MAX_INT64:
        return reject("malformed_message", f"'seq' must be at most {MAX_INT64}", device_id, envelope.id)
    if envelope.type != KINDS[kind].type:
        return reject("unexpected_type", f"a '{envelope.type}' message on a {kind} topic; expected "
                                         f"'{KINDS[kind].type}'", device_id, envelope.id)
    try:
        row = _cleaned(KINDS[kind].row(envelope))
    except BodyError as exc:
        return reject("invalid_body", str(exc), device_id, envelope.id)
    row.update(id=envelope.id, device_id=device_id, seq=envelope.seq, ts=envelope.ts)
    return DeviceMessage(kind, envelope, row, public_key, digest, len(payload), excerpt(payload))


def excerpt(payload: bytes) -> str:
    """The start of a payload as text, for a person reading the rejected table."""
    text = payload[:EXCERPT_BYTES].decode("utf-8", "backslashreplace")
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
    return text + ("…" if len(payload) > EXCERPT_BYTES else "")


def clean(text: Optional[str]) -> Optional[str]:
    """Text as every database stores it: without NUL and lone surrogates."""
    return _UNSTORABLE.sub("", text) if text is not None else None


def _message_id_of(payload: bytes, max_bytes: int) -> Optional[str]:
    if len(payload) > max_bytes:
        return None
    try:
        data = json.loads(payload)
    except Exception:  # ValueError, or RecursionError for deep nesting
        return None
    found = data.get("id") if isinstance(data, dict) else None
    return found if isinstance(found, str) and len(found) <= 64 else None


# --- bodies -----------------------------------------------------------------------------------


def status_row(envelope: wire.Envelope) -> Dict[str, Any]:
    body = envelope.body
    state = body.get("state")
    if state not in (wire.ONLINE, wire.OFFLINE):
        raise BodyError(f"status 'state' must be '{wire.ONLINE}' or '{wire.OFFLINE}', got {state!r}")
    return {
        "state": state,
        "reason": _text(body, "reason"),
        "body": _json(body),
    }


def telemetry_row(envelope: wire.Envelope) -> Dict[str, Any]:
    body = envelope.body
    cpu, memory, power = _section(body, "cpu"), _section(body, "memory"), _section(body, "power")
    per_cpu = cpu.get("load_pct")
    loads = [float(v) for v in per_cpu if is_number(v)] if isinstance(per_cpu, list) else []
    total, available = _number(memory, "total_mb"), _number(memory, "available_mb")
    return {
        "cpu_percent": finite(round(sum(loads) / len(loads), 2)) if loads else None,
        "memory_used_mb": None if total is None or available is None else finite(round(total - available, 1)),
        "temperature_c": hottest(body),
        "power_w": _number(power, "watts"),
        "power_source": _text(power, "source"),
        "body": _json(body),
    }


def hottest(telemetry_body: Mapping[str, Any]) -> Optional[float]:
    """The highest thermal-zone reading of a telemetry body, in °C."""
    zones = _section(telemetry_body, "thermal")
    readings = [v for v in zones.values() if is_number(v)]
    return float(max(readings)) if readings else None


def runtimes(telemetry_body: Mapping[str, Any]) -> Dict[str, str]:
    """Installed inference runtimes and their versions, from a telemetry body."""
    versions = _section(telemetry_body, "versions")
    return {name: versions[name] for name in DISTRIBUTIONS if isinstance(versions.get(name), str)}


def result_row(envelope: wire.Envelope) -> Dict[str, Any]:
    body = envelope.body
    ok = body.get("ok")
    if not isinstance(ok, bool):
        raise BodyError(f"result 'ok' must be true or false, got {ok!r}")
    for key in ("job_id", "job_type", "request_id"):
        if body.get(key) is not None and not isinstance(body[key], str):
            raise BodyError(f"result '{key}' must be a string or null, got {body[key]!r}")
    error, result = body.get("error"), body.get("result")
    if error is not None and not isinstance(error, dict):
        raise BodyError(f"result 'error' must be an object or null, got {type(error).__name__}")
    if result is not None and not isinstance(result, dict):
        raise BodyError(f"result 'result' must be an object or null, got {type(result).__name__}")
    if not ok and error is None:
        raise BodyError("a result with ok=false needs an 'error' object")
    meta = _meta(body.get("meta"))
    result = result or {}
    threads = result.get("threads")
    if is_int(threads) and not 0 <= threads <= MAX_INT32:
        raise BodyError(f"result 'threads' must be between 0 and {MAX_INT32}")
    latency = result.get("latency_ms") if isinstance(result.get("latency_ms"), dict) else {}
    reasons = result.get("invalid_reasons")
    artifact = result.get("artifact")
    thermal = _section(result, "thermal")
    runs = result.get("runs")
    return {
        "job_id": body.get("job_id"),
        "request_id": body.get("request_id"),
        "job_type": body.get("job_type"),
        "ok": int(ok),
        "error_kind": _text(error or {}, "kind"),
        "error_message": _text(error or {}, "message"),
        "model": meta.get("model"),
        "model_sha256": meta.get("model_sha256"),
        "artifact_key": meta.get("artifact_key") or (_basename(artifact) if isinstance(artifact, str) else None),
        "format": meta.get("format") or _text(result, "format") or _format_of(artifact),
        "precision": meta.get("precision") or _text(result, "precision"),
        "manifest_sha256": meta.get("manifest_sha256"),
        "accuracy_drop_points": _number(meta, "accuracy_drop_points"),
        "runtime": _text(result, "runtime"),
        "threads": threads if is_int(threads) else None,
        "p50_ms": _number(latency, "p50"),
        "p90_ms": _number(latency, "p90"),
        "p95_ms": _number(latency, "p95"),
        "p99_ms": _number(latency, "p99"),
        "min_ms": _number(latency, "min"),
        "max_ms": _number(latency, "max"),
        "mean_ms": _number(latency, "mean"),
        "load_ms": _number(result, "load_ms"),
        "first_inference_ms": _number(result, "first_inference_ms"),
        "throughput_ips": _number(result, "throughput_ips"),
        "peak_rss_mb": _number(result, "peak_rss_mb"),
        "energy_per_inference_mj": _number(result, "energy_per_inference_mj"),
        "avg_power_w": _number(result, "avg_power_w"),
        "power_source": _text(result, "power_source"),
        "valid": int(result["valid"]) if isinstance(result.get("valid"), bool) else None,
        "invalid_reasons": json.dumps([str(r) for r in reasons]) if isinstance(reasons, list) else None,
        "build_id": meta.get("build_id"),
        "build_version": meta.get("build_version"),
        "runtime_version": _text(result, "runtime_version"),
        "agent_version": _text(result, "agent_version"),
        "runs": runs if is_int(runs) and 0 <= runs <= MAX_INT64 else None,
        "temperature_c": _number(thermal, "after_c") if _number(thermal, "after_c") is not None
        else _number(thermal, "before_c"),
        "throttled": int(thermal["throttled"]) if isinstance(thermal.get("throttled"), bool) else None,
        "latency_histogram": _histogram(result.get("latency_histogram")),
        "body": _json(body),
    }


def _histogram(data: Any) -> Optional[str]:
    """The result's latency distribution as compact JSON, or None: an older agent sends none, and one that
    does not read back (edgeopt_agent.wire.LatencyHistogram's checks) is left out of comparisons, never
    the reason to refuse the rest of the result."""
    if data is None:
        return None
    try:
        histogram = wire.LatencyHistogram.from_dict(data)
    except wire.ProtocolError as exc:
        log.warning("a result's latency histogram is unusable (%s); storing the result without it", exc)
        return None
    return json.dumps(histogram.to_dict(), separators=(",", ":"))


def _meta(meta: Any) -> Dict[str, Any]:
    """The manifest facts deploy attached to the job and the agent echoed back."""
    if meta is None:
        return {}
    if not isinstance(meta, dict):
        raise BodyError(f"result 'meta' must be an object, got {type(meta).__name__}")
    for key in _META_TEXT:
        if meta.get(key) is not None and not isinstance(meta[key], str):
            raise BodyError(f"result meta '{key}' must be a string or null, got {meta[key]!r}")
    drop = meta.get("accuracy_drop_points")
    if drop is not None and not is_number(drop):
        raise BodyError(f"result meta 'accuracy_drop_points' must be a number or null, got {drop!r}")
    return meta


def _section(body: Mapping[str, Any], key: str) -> Dict[str, Any]:
    value = body.get(key)
    return value if isinstance(value, dict) else {}


def _text(data: Mapping[str, Any], key: str) -> Optional[str]:
    value = data.get(key)
    return clean(value) if isinstance(value, str) else None


def _number(data: Mapping[str, Any], key: str) -> Optional[float]:
    value = data.get(key)
    return float(value) if is_number(value) else None


def _cleaned(row: Dict[str, Any]) -> Dict[str, Any]:
    return {column: clean(value) if isinstance(value, str) else value for column, value in row.items()}


def _basename(path: str) -> str:
    return path.replace("\\", "/").rsplit("/", 1)[-1]


def _format_of(artifact: Any) -> Optional[str]:
    if not isinstance(artifact, str) or "." not in _basename(artifact):
        return None
    suffix = _basename(artifact).rsplit(".", 1)[1].lower()
    return suffix if suffix in wire.ARTIFACT_FORMATS else None


def _json(body: Mapping[str, Any]) -> str:
    """Standard JSON: the parser let NaN and Infinity through, they are stored as null."""
    try:
        return json.dumps(body, separators=(",", ":"), allow_nan=False)
    except ValueError:
        return json.dumps(finite(body), separators=(",", ":"), allow_nan=False)


def device_facts(message: DeviceMessage) -> Dict[str, Any]:
    """What a message says about its device (profile, versions, temperature), for the devices table."""
    body = message.envelope.body
    facts: Dict[str, Any] = {}
    if message.kind == wire.STATUS:
        facts["profile"] = _text(body, "profile")
        facts["agent_version"] = _text(body, "agent_version")
        facts["mqtt_protocol"] = _text(body, "mqtt_protocol")
        started = body.get("started_at")
        facts["started_at"] = float(started) if is_number(started) else 0.0
    elif message.kind == wire.TELEMETRY:
        facts["profile"] = _text(body, "profile")
        versions = _section(body, "versions")
        facts["agent_version"] = _text(versions, "edgeopt")
        facts["versions"] = {k: v for k, v in versions.items() if isinstance(v, str) or v is None}
        facts["runtimes"] = runtimes(body)
        facts["temperature_c"] = message.row["temperature_c"]
    return facts



# --- the registry -----------------------------------------------------------------------------

Handler = Callable[[Any, str, List[DeviceMessage], float], None]  # (transaction, device id, messages, now)


@dataclass(frozen=True)
class MessageKind:
    """One kind of message a board sends the fleet: everything the collector and the writer do with
    it. A new kind is one entry in KINDS plus its row function and handlers (docs/ARCHITECTURE.md,
    "Adding a fleet message", lists the other steps: its topic and type in the wire, its table)."""

    topic: str  # the topic kind it comes on: edgeopt/v1/<device_id>/<topic>; the collector subscribes to it
    type: str  # the envelope type it must carry
    row: Callable[[wire.Envelope], Dict[str, Any]]  # its body checked (BodyError) and made its table's columns
    table: str  # where that row is stored (created in migrations.py)
    gap_checked: bool = False  # its sequence numbers are checked for gaps
    before: Optional[Handler] = None  # runs before a device's messages of this kind in a batch are stored
    after: Optional[Handler] = None  # runs once they are stored
    device: Optional[Callable[[Dict[str, Any], DeviceMessage], None]] = None  # folds one into the devices row


# The only topic kinds a device sends and the collector stores (read when needed, not copied at import).
KINDS: Dict[str, MessageKind] = {kind.topic: kind for kind in (
    # Status sequence numbers have holes by design (the agent numbers a Last Will for every
    # connection, and most Wills are never sent), so statuses are not checked for gaps.
    MessageKind(wire.STATUS, wire.STATUS_TYPE, status_row, "status",
                before=handlers.forget_baselines_if_reset, device=handlers.status_device),
    MessageKind(wire.TELEMETRY, wire.TELEMETRY_TYPE, telemetry_row, "telemetry", gap_checked=True,
                device=handlers.telemetry_device),
    MessageKind(wire.RESULTS, wire.RESULT_TYPE, result_row, "results", gap_checked=True, after=handlers.answered),
)}
