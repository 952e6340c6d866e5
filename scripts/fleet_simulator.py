"""Simulated devices: real protocol envelopes, as an agent would publish them, without a board.

For load tests (scripts/bench_fleet.py), demos and tests of the collector. Each device numbers
its messages per topic kind from 1, like the agent's outbox; `seq=` overrides the number to
simulate loss, reordering or a replay. Each signs what it sends with its own device key, as an
agent does (`key=` gives it one; `key=None` with `signed=False` sends unsigned, as agents from
before device keys did).
"""
from __future__ import annotations

import json
import math
import random
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from edgeopt_agent import wire
from edgeopt_agent.bench.stats import summarize_milliseconds
from edgeopt_agent.message_signing import DeviceKey


@dataclass(frozen=True)
class Published:
    topic: str
    payload: bytes
    envelope: wire.Envelope
    retain: bool = False
    key: Optional[DeviceKey] = None  # the device's, which signed it

    def changed(self, document: Dict[str, Any]) -> bytes:
        """Another message from the same device: `document` (this one's JSON, changed at will) signed
        with its key, as the board itself would send it (unsigned for an unsigned device)."""
        return self.key.sign_payload(json.dumps(document).encode()) if self.key else json.dumps(document).encode()


@dataclass(frozen=True)
class LatencyModel:
    """How a simulated board's timed runs spread: a log-normal body of `spread` around `p50_ms`, a
    `tail_share` of runs slowed by a factor drawn from `tail` (a page fault, another process), and each
    benchmark as a whole shifted by a log-normal factor of `run_shift` (a warmer board, other work on it:
    what repeated benchmarks of one build differ by beyond their own samples)."""

    p50_ms: float
    spread: float = 0.05
    tail_share: float = 0.02
    tail: Tuple[float, float] = (1.5, 3.0)
    run_shift: float = 0.01

    def durations(self, rng: random.Random, runs: int, factor: float = 1.0) -> List[float]:
        """One benchmark's `runs` durations (ms), the build `factor` times slower than p50_ms."""
        shifted = self.p50_ms * factor * math.exp(rng.gauss(0.0, self.run_shift))
        return [shifted * math.exp(rng.gauss(0.0, self.spread)) *
                (rng.uniform(*self.tail) if rng.random() < self.tail_share else 1.0) for _ in range(runs)]


class SimulatedDevice:
    def __init__(self, device_id: str, profile: str = "x86-64", agent_version: str = "0.1.0",
                 seed: Optional[int] = None, clock=time.time, key: Optional[DeviceKey] = None, signed: bool = True):
        self.device_id = wire.validate_device_id(device_id)
        self.key = key or (DeviceKey.generate() if signed else None)
        self.profile = profile
        self.agent_version = agent_version
        self.started_at = round(clock(), 3)
        self._clock = clock
        self._rng = random.Random(seed)
        self._seq: Dict[str, int] = {}

    def next_seq(self, kind: str) -> int:
        self._seq[kind] = self._seq.get(kind, 0) + 1
        return self._seq[kind]

    def envelope(self, kind: str, message_type: str, body: Dict[str, Any], seq: Optional[int] = None,
                 retain: bool = False) -> Published:
        envelope = wire.Envelope(
            device_id=self.device_id,
            seq=self.next_seq(kind) if seq is None else seq,
            type=message_type,
            body=body,
            ts=round(self._clock(), 3),
        )
        payload = self.key.encode(envelope) if self.key is not None else envelope.encode()
        return Published(wire.topic(self.device_id, kind), payload, envelope, retain, self.key)

    def status(self, state: str = wire.ONLINE, reason: str = "connected", seq: Optional[int] = None,
               profile_check: Optional[Mapping[str, Any]] = None) -> Published:
        """`profile_check`: what the agent found comparing its profile with its CPU (left out when None)."""
        body = wire.status_body(state, reason, agent_version=self.agent_version, profile=self.profile,
                                    started_at=self.started_at, mqtt_protocol="5")
        if profile_check is not None:
            body["profile_check"] = dict(profile_check)
        return self.envelope(wire.STATUS, wire.STATUS_TYPE, body, seq, retain=True)

    def telemetry(self, temperature_c: Optional[float] = None, power_w: Optional[float] = None,
                  seq: Optional[int] = None, machine: Optional[str] = None) -> Published:
        """`machine`: the `versions.machine` the agent reports (`platform.machine()`; left out when None)."""
        rng = self._rng
        temperature = round(rng.uniform(40.0, 70.0), 1) if temperature_c is None else temperature_c
        body = {
            "cpu": {"load_pct": [round(rng.uniform(0, 100), 1) for _ in range(4)]},
            "memory": {"total_mb": 3906.0, "available_mb": round(rng.uniform(1500, 3500), 1),
                       "used_pct": 40.0, "swap_used_mb": 0.0},
            "disk": {"path": "/", "total_gb": 29.1, "free_gb": 18.4, "used_pct": 36.8},
            "thermal": {"cpu-thermal": temperature},
            "throttle": {"throttled": False, "under_voltage": False, "reasons": []},
            "power": {"watts": power_w, "source": "simulated" if power_w is not None else None, "rail": None,
                      "reason": None if power_w is not None else "simulated device has no power sensor",
                      "rails": {}},
            "health": {"throttled": False, "under_voltage": False, "reasons": []},
            "profile": self.profile,
            "versions": {"edgeopt": self.agent_version, "onnxruntime": "1.31.1", "ai-edge-litert": "2.3.0",
                         "tflite-runtime": None, "tensorrt": None, "python": "3.11.2"},
            "agent": {"pid": 4242, "uptime_s": round(self._clock() - self.started_at, 1), "outbox_queued": 0},
        }
        if machine is not None:
            body["versions"]["machine"] = machine
        return self.envelope(wire.TELEMETRY, wire.TELEMETRY_TYPE, body, seq)

    def result(self, job_id: str, p50_ms: float = 10.0, ok: bool = True, meta: Optional[Mapping[str, Any]] = None,
               error_kind: str = "failed", error_message: str = "simulated failure",
               energy_mj: Optional[float] = None, valid: bool = True, seq: Optional[int] = None) -> Published:
        """A benchmark result (or, with ok=False, an error result) for job `job_id`."""
        if ok:
            result: Dict[str, Any] = {
                "ok": True, "artifact": f"artifacts/{job_id}.onnx", "runtime": "onnxruntime", "threads": 4,
                "load_ms": 30.0, "first_inference_ms": p50_ms * 2,
                "latency_ms": {"p50": p50_ms, "p90": p50_ms * 1.1, "p95": p50_ms * 1.15, "p99": p50_ms * 1.3,
                               "mean": p50_ms * 1.02, "std": p50_ms * 0.05, "min": p50_ms * 0.9,
                               "max": p50_ms * 1.6},
                "throughput_ips": round(1000.0 / p50_ms, 2), "runs": 100, "peak_rss_mb": 120.0,
                "model_rss_mb": 40.0, "output_sha256": "0" * 64,
                "energy_per_inference_mj": energy_mj, "avg_power_w": None if energy_mj is None else 5.0,
                "power_source": None if energy_mj is None else "simulated",
                "valid": valid, "invalid_reasons": [] if valid else ["during the run: throttled"],
            }
            body = wire.result_body(job_id, wire.BENCHMARK_JOB, wire.new_message_id(), result=result)
        else:
            body = wire.result_body(job_id, wire.BENCHMARK_JOB, wire.new_message_id(),
                                        error=wire.error_info(error_kind, error_message))
        if meta is not None:
            body["meta"] = dict(meta)
        return self.envelope(wire.RESULTS, wire.RESULT_TYPE, body, seq)

    def measured(self, job_id: str, durations_ms: Sequence[float], meta: Optional[Mapping[str, Any]] = None,
                 valid: bool = True, throttled: bool = False, peak_rss_mb: float = 120.0,
                 energy_mj: Optional[float] = None, runtime_version: str = "1.31.1", seq: Optional[int] = None,
                 histogram: bool = True) -> Published:
        """A result as the agent measures one: its percentiles, latency histogram and sample count from
        `durations_ms` (one per timed run), what ran it (runtime and agent version) and the board's state;
        `histogram=False` leaves the histogram out, as agents from before it did."""
        latency = summarize_milliseconds(durations_ms)
        reasons = [] if valid and not throttled else ["during the run: throttled"]
        result: Dict[str, Any] = {
            "ok": True, "artifact": f"artifacts/{job_id}.onnx", "runtime": "onnxruntime",
            "runtime_version": runtime_version, "agent_version": self.agent_version, "threads": 4, "load_ms": 30.0,
            "first_inference_ms": latency["max"], "latency_ms": latency, "runs": len(durations_ms),
            "throughput_ips": round(1000.0 / latency["mean"], 2), "peak_rss_mb": peak_rss_mb,
            "energy_per_inference_mj": energy_mj, "avg_power_w": None if energy_mj is None else 5.0,
            "power_source": None if energy_mj is None else "simulated",
            "thermal": {"before_c": 48.0, "after_c": 85.0 if throttled else 52.0, "throttled": throttled},
            "valid": valid and not throttled, "invalid_reasons": reasons,
        }
        if histogram:
            result["latency_histogram"] = wire.LatencyHistogram.of_durations(durations_ms).to_dict()
        body = wire.result_body(job_id, wire.BENCHMARK_JOB, wire.new_message_id(), result=result, meta=meta)
        return self.envelope(wire.RESULTS, wire.RESULT_TYPE, body, seq)
