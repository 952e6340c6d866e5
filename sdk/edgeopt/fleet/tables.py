"""The columns of the fleet tables that the writer fills and the queries read (schema: migrations.py)."""
from __future__ import annotations


DEVICE_COLUMNS = (
    "profile", "state", "state_reason", "state_started_at", "state_seq", "state_ts", "mqtt_protocol",
    "agent_version", "versions", "runtimes", "temperature_c", "telemetry_ts", "telemetry_seq", "first_seen", "last_seen",
)
RESULT_COLUMNS = (
    "id", "device_id", "seq", "ts", "job_id", "request_id", "job_type", "ok", "error_kind", "error_message",
    "model", "model_sha256", "artifact_key", "format", "precision", "manifest_sha256", "accuracy_drop_points",
    "runtime", "threads", "p50_ms", "p90_ms", "p95_ms", "p99_ms", "min_ms", "max_ms", "mean_ms", "load_ms",
    "first_inference_ms", "throughput_ips", "peak_rss_mb", "energy_per_inference_mj", "avg_power_w",
    "power_source", "valid", "invalid_reasons", "build_id", "build_version", "runtime_version", "agent_version",
    "runs", "temperature_c", "throttled",
)
# Read only when asked for (a comparison of builds): the latency distribution as the result carried it.
RESULT_HISTOGRAM = "latency_histogram"
TELEMETRY_COLUMNS = (
    "id", "device_id", "seq", "ts", "cpu_percent", "memory_used_mb", "temperature_c", "power_w", "power_source",
)

