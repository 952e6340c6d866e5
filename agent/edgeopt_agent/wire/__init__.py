"""What the host and the board share: the edgeopt wire protocol, and the MQTT plumbing both sides use.

The protocol (standard library only; docs/PROTOCOL.md is its human-readable version), one module
per concern, its public names also importable from here (``from edgeopt_agent import wire``):

    topics         the MQTT topics ``edgeopt/v1/<device_id>/<kind>`` and device ids
    envelope       the message envelope, message ids, status and result bodies
    jobs           benchmark jobs: artifact, target, release, signature; parse and build
    bench_options  the options a job's `bench` may set, input descriptions, reference outputs
    latency_histogram  a result's latency distribution: log-spaced buckets, compact
    chunks         how an artifact is cut into chunks (the plan, and cutting a file by it)
    transfers      the chunked-transfer messages (missing chunks, chunks)
    confirms       the collector's delivery confirmations
    errors         ProtocolError

The MQTT side (import the modules themselves; the session needs paho-mqtt):

    broker         broker address and credentials, `configure_client` for any paho client
    session        the agent's and the collector's long-lived MQTT session
    backoff        jittered exponential back-off for reconnecting
"""
from __future__ import annotations

from .errors import (
    ProtocolError,
)
from .topics import (
    CHUNKS, CONFIRM, CONFIRMED_KINDS, JOBS, RESULTS, STATUS, TELEMETRY, TOPIC_KINDS, TOPIC_ROOT, TRANSFER,
    chunks_topic, confirm_topic, jobs_topic, parse_topic, results_topic, shared_subscription, status_topic,
    subscription, telemetry_topic, topic, transfer_topic, validate_device_id,
)
from .envelope import (
    BENCHMARK_JOB, CHUNK_TYPE, CONFIRM_TYPE, Envelope, JOB_TYPES, MAX_MESSAGE_BYTES, OFFLINE, ONLINE,
    RESULT_TYPE, SCHEMA_VERSION, STATUS_TYPE, TELEMETRY_TYPE, TRANSFER_TYPE, error_info, is_message_id,
    is_sha256, message_digest, new_message_id, parse_json, result_body, status_body,
)
from .bench_options import (
    BENCH_OPTIONS, INPUT_DESCRIPTION_KEYS, MAX_DESCRIBED_INPUTS, MAX_INPUT_ELEMENTS, MAX_INPUT_RANK,
    MAX_REFERENCE_OUTPUTS, MAX_REFERENCE_SAMPLES, MAX_REFERENCE_VALUES, REFERENCE_TOLERANCES,
    check_input_description, check_reference, parse_bench,
)
from .latency_histogram import LatencyHistogram
from .chunks import (
    ChunkPlan, DEFAULT_CHUNK_BYTES, MAX_CHUNKS, MAX_CHUNK_BYTES, MIN_CHUNK_BYTES, chunk_count, plan_chunks,
    read_chunk,
)
from .jobs import (
    ARTIFACT_FORMATS, ARTIFACT_SOURCES, ArtifactRef, BenchmarkJob, DEFAULT_JOB_LIFETIME_S,
    ED25519_SIGNATURE_BYTES, JOB_FIELDS, JobTarget, MAX_INLINE_ARTIFACT_BYTES, MAX_JOB_LIFETIME_S,
    MAX_META_BYTES, MAX_META_DEPTH, MAX_TARGET_DEVICES, MAX_URL_CHARS, Release, SIGNATURE_ALGORITHMS,
    Signature, Signer, benchmark_body, benchmark_job, job_message, parse_job,
)
from .transfers import (
    Chunk, TransferRequest, chunk_message, parse_chunk, parse_transfer, transfer_body,
)
from .confirms import (
    CONFIRM_FIELDS, Confirmation, ConfirmSigner, Delivery, MAX_CONFIRM_IDS, SIGNED_CONFIRM_FIELDS,
    confirm_message, parse_confirm,
)

__all__ = [
    "annotations", "ProtocolError", "CHUNKS", "CONFIRM", "CONFIRMED_KINDS", "JOBS", "RESULTS", "STATUS",
    "TELEMETRY", "TOPIC_KINDS", "TOPIC_ROOT", "TRANSFER", "chunks_topic", "confirm_topic", "jobs_topic",
    "parse_topic", "results_topic", "shared_subscription", "status_topic", "subscription",
    "telemetry_topic", "topic", "transfer_topic", "validate_device_id", "BENCHMARK_JOB", "CHUNK_TYPE",
    "CONFIRM_TYPE", "Envelope", "JOB_TYPES", "MAX_MESSAGE_BYTES", "OFFLINE", "ONLINE", "RESULT_TYPE",
    "SCHEMA_VERSION", "STATUS_TYPE", "TELEMETRY_TYPE", "TRANSFER_TYPE", "error_info", "is_message_id",
    "is_sha256", "message_digest", "new_message_id", "parse_json", "result_body", "status_body", "BENCH_OPTIONS", "INPUT_DESCRIPTION_KEYS",
    "MAX_DESCRIBED_INPUTS", "MAX_INPUT_ELEMENTS", "MAX_INPUT_RANK", "MAX_REFERENCE_OUTPUTS",
    "MAX_REFERENCE_SAMPLES", "MAX_REFERENCE_VALUES", "REFERENCE_TOLERANCES", "check_input_description",
    "check_reference", "parse_bench", "ChunkPlan", "DEFAULT_CHUNK_BYTES", "MAX_CHUNKS", "MAX_CHUNK_BYTES",
    "MIN_CHUNK_BYTES", "chunk_count", "plan_chunks", "read_chunk", "ARTIFACT_FORMATS", "ARTIFACT_SOURCES",
    "ArtifactRef", "BenchmarkJob", "DEFAULT_JOB_LIFETIME_S", "ED25519_SIGNATURE_BYTES", "JOB_FIELDS",
    "JobTarget", "MAX_INLINE_ARTIFACT_BYTES", "MAX_JOB_LIFETIME_S", "MAX_META_BYTES", "MAX_META_DEPTH",
    "MAX_TARGET_DEVICES", "MAX_URL_CHARS", "Release", "SIGNATURE_ALGORITHMS", "Signature", "Signer",
    "benchmark_body", "benchmark_job", "job_message", "parse_job", "Chunk", "TransferRequest",
    "chunk_message", "parse_chunk", "parse_transfer", "transfer_body", "Confirmation", "MAX_CONFIRM_IDS",
    "confirm_message", "parse_confirm", "CONFIRM_FIELDS", "ConfirmSigner", "Delivery", "SIGNED_CONFIRM_FIELDS",
    "LatencyHistogram",
]
