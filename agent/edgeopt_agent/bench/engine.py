"""`run_benchmark`: one artifact in, one JSON-able measurement (or error) out.

The measuring happens in a child process (see isolation.py and child.py); this side checks the
request, takes the idle power baseline and the board's health around the run, and turns what
the child said into the result.
"""
from __future__ import annotations

import dataclasses
import time
from contextlib import nullcontext
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Union

from ..runners.errors import InputError
from ..runners.formats import check_precision, resolve_runtime
from .board_state import board_changes, board_fields, board_state, thermal_fields
from .failures import CRASH, TIMEOUT, describe_exit, error_result, failure
from .isolation import ChildOutcome, ProgressTextCallback, run_child
from .spec import BenchmarkSpec

NO_SENSORS = "no sensors given"
ENERGY_KEYS = (
    "energy_per_inference_mj",
    "avg_power_w",
    "idle_power_w",
    "power_source",
    "power_rail",
    "power_reason",
)
# What the child reports once per run, copied to the top of the result.
_LOADED_KEYS = ("load_ms", "model_rss_mb")
# What each measured batch reports, copied to the top of the result from the first good batch.
_BATCH_KEYS = (
    "batch",
    "first_inference_ms",
    "latency_ms",
    "throughput_ips",
    "runs",
    "warmup_runs",
    "measured_s",
    "capped_by_max_duration",
    "output_sha256",
    "output_stable",
    "latency_histogram",
) + ENERGY_KEYS
# What a batch on a GPU runtime adds (CUDA event timings, device memory); copied where present.
_DEVICE_KEYS = ("gpu_compute_ms", "gpu_latency_ms", "h2d_ms", "d2h_ms", "enqueue_ms", "gpu_memory_mb")


def run_benchmark(
    spec: Union[BenchmarkSpec, Mapping[str, Any]], sensors=None, progress: Optional[ProgressTextCallback] = None
) -> Dict[str, Any]:
    """Benchmark `spec.artifact` in a child process and return the result dict.

    sensors: a SensorSuite (edgeopt_agent.sensors) for power, energy and throttling, or None.
    progress: called with a short text at each phase (for a status line).
    Raises UserError only for what is wrong before the child starts (no such artifact or input
    file, not a model file, a runtime that cannot run it); everything after that — corrupt
    model, crash, hang, out of memory — comes back as {"ok": False, "error": {kind, message}}.
    """
    if not isinstance(spec, BenchmarkSpec):
        spec = BenchmarkSpec.from_dict(spec)
    runtime = resolve_runtime(spec.artifact, spec.runtime)
    check_precision(runtime, spec.precision)
    for fallback in spec.fallback_runtimes or ():
        resolve_runtime(spec.artifact, fallback)  # each must be able to run this file
    if spec.input_file is not None and not Path(spec.input_file).is_file():
        raise InputError(f"input file not found: {spec.input_file}")
    threads_requested = spec.threads
    spec = dataclasses.replace(spec, threads=spec.resolved_threads(), runtime=runtime)

    snapshot = sensors.snapshot() if sensors is not None else {}
    board_before = board_state(snapshot)
    health_before = sensors.health() if sensors is not None else None
    with (sensors.power_monitor() if sensors is not None else nullcontext()) as monitor:
        idle = _idle_baseline(snapshot.get("power") or {}, monitor, spec.idle_s, progress) if monitor is not None else None
        outcome = run_child(spec, progress)
        entries = _batch_entries(outcome, spec)
        for entry in entries:
            entry.update(_energy(entry, monitor, idle))
        health_during = _health_during(monitor, entries)
    health_after = sensors.health() if sensors is not None else None
    snapshot_after = sensors.snapshot() if sensors is not None else {}
    board_after = board_state(snapshot_after) if board_before else {}
    result = _result(spec, outcome, entries, health_before, health_during, health_after)
    if result["ok"]:
        result["thermal"] = thermal_fields(snapshot, snapshot_after, [health_before, *health_during, health_after])
    result.update(_threads_fields(threads_requested, spec.threads))
    if result.get("threads_capped") and result["ok"]:
        result["notes"] = [result["threads_capped"]] + list(result.get("notes") or [])
    if result["ok"] and board_before:  # a board with clock / power-mode telemetry (a Jetson)
        result.update(board_fields(board_before, board_after))
        changes = board_changes(board_before, board_after)
        result["invalid_reasons"] = result["invalid_reasons"] + changes
        result["valid"] = not result["invalid_reasons"]
    return result


@lru_cache(maxsize=1)
def agent_version() -> Optional[str]:
    """The installed edgeopt's version: what a comparison of builds shows beside the runtime's."""
    from importlib import metadata

    try:
        return metadata.version("edgeopt")
    except metadata.PackageNotFoundError:
        return None


def _threads_fields(requested: Optional[int], used: int) -> Dict[str, Any]:
    """What the job asked for, and why fewer threads ran where the machine has fewer CPUs."""
    fields: Dict[str, Any] = {"threads_requested": requested, "threads_capped": None}
    if requested is not None and requested > used:
        fields["threads_capped"] = (f"threads capped at {used}: {requested} asked for, but this machine lets "
                                    f"the benchmark use {used} CPU{'s' if used != 1 else ''}")
    return fields


def _idle_baseline(power: Mapping[str, Any], monitor, idle_s: float, progress: Optional[ProgressTextCallback]):
    """Mean power with nothing running, over idle_s seconds (skipped where there is no power sensor)."""
    from ..sensors import EnergyReading

    if idle_s <= 0:
        return EnergyReading(None, None, None, None, 0, "no idle baseline taken (idle_s=0)")
    if power.get("source") is None:
        return EnergyReading(None, None, None, None, 0, power.get("reason") or "no power sensor")
    if progress is not None:
        progress(f"idle power baseline ({idle_s:g} s)")
    start = time.time()
    time.sleep(idle_s)
    return monitor.window(start, time.time())


def _batch_entries(outcome: ChildOutcome, spec: BenchmarkSpec) -> List[Dict[str, Any]]:
    """The batches the child reported, plus one for the batch it was in when it died."""
    entries = [m["entry"] for m in outcome.all("batch")]
    ended_cleanly = outcome.first("done") or outcome.first("error")
    if ended_cleanly or not outcome.first("loaded"):
        return entries
    current = outcome.last("phase")
    batch = current.get("batch") if current else None
    entries.append({"batch": batch, "ok": False, "error": _death(outcome, spec)})
    return entries


def _death(outcome: ChildOutcome, spec: BenchmarkSpec) -> Dict[str, str]:
    """Why the child ended without a result."""
    if outcome.timed_out:
        phase = outcome.last("phase")
        during = f" (while {phase['text']})" if phase else ""
        return failure(TIMEOUT, f"the benchmark did not finish within timeout_s={spec.timeout_s:g} s{during}; it was killed")
    if outcome.returncode is None:
        return failure(CRASH, "the benchmark process ended without a result")
    return describe_exit(outcome.returncode, outcome.log_tail)


def _energy(entry: Dict[str, Any], monitor, idle) -> Dict[str, Any]:
    if not entry.get("ok"):
        return {}
    if monitor is None:
        return _no_energy()
    from ..sensors import energy_fields

    start, end = entry["measured_window"]
    if not end > start:
        return {**_no_energy(), "power_reason": "the measured phase was too short for the wall clock to see"}
    fields = energy_fields(monitor.window(start, end), idle, entry["runs"])
    mj = fields.get("energy_per_inference_mj")
    if mj is not None and entry.get("batch"):
        fields["energy_per_sample_mj"] = round(mj / entry["batch"], 6)
    return fields


def _health_during(monitor, entries: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Throttling/under-voltage the monitor saw inside each measured phase."""
    if monitor is None or not hasattr(monitor, "health"):
        return []
    windows = [e["measured_window"] for e in entries if e.get("ok")]
    return [monitor.health(start, end) for start, end in windows if end > start]


def _no_energy() -> Dict[str, Any]:
    fields: Dict[str, Any] = dict.fromkeys(ENERGY_KEYS)
    fields["power_reason"] = NO_SENSORS
    return fields


def _validity(
    before: Optional[Mapping[str, Any]], during: List[Mapping[str, Any]], after: Optional[Mapping[str, Any]]
) -> List[str]:
    """Why the board's state makes the numbers untrustworthy (throttling, under-voltage)."""
    reasons: List[str] = []
    seen = [("before", before)] + [("during", h) for h in during] + [("after", after)]
    for when, health in seen:
        if not health or not (health.get("throttled") or health.get("under_voltage")):
            continue
        said = list(health.get("reasons") or [])
        if not said:
            said = [name.replace("_", "-") for name in ("throttled", "under_voltage") if health.get(name)]
        reasons.extend(f"{when} the run: {reason}" for reason in said if f"{when} the run: {reason}" not in reasons)
    return reasons


def _result(
    spec: BenchmarkSpec,
    outcome: ChildOutcome,
    entries: List[Dict[str, Any]],
    health_before: Optional[Mapping[str, Any]],
    health_during: List[Mapping[str, Any]],
    health_after: Optional[Mapping[str, Any]],
) -> Dict[str, Any]:
    loaded = outcome.first("loaded") or {}
    runner = loaded.get("runner", {})
    fell_back = (outcome.first("fallback") or {}).get("fallback")
    head: Dict[str, Any] = {
        "artifact": spec.artifact,
        "runtime": fell_back["to"] if fell_back else spec.runtime,
        "threads": spec.threads,
        "fallback": fell_back,
        "agent_version": agent_version(),
    }
    head.update({k: v for k, v in runner.items() if k not in ("runtime", "threads")})

    good = [e for e in entries if e.get("ok")]
    if not good:
        error = _failure_of(outcome, spec, entries)
        return {**error_result(error["kind"], error["message"], **head), "batches": entries, "log_tail": outcome.log_tail}

    done = outcome.first("done") or {}
    result: Dict[str, Any] = {"ok": True, **head}
    result.update({k: loaded.get(k) for k in _LOADED_KEYS})
    result.update({k: good[0].get(k) for k in _BATCH_KEYS})
    result.update({k: good[0][k] for k in _DEVICE_KEYS if k in good[0]})
    profiled = outcome.first("op_profile")
    if profiled is not None:
        result["op_profile"] = profiled.get("profile")
    result["peak_rss_mb"] = done.get("peak_rss_mb") or max(e.get("peak_rss_mb") or 0 for e in good) or None
    # The distribution travels once, at the top (the first good batch's): results stay small on the wire.
    result["batches"] = [{k: v for k, v in e.items() if k != "latency_histogram"} for e in entries]
    if spec.latency_budget_ms is not None:
        result.update(_budget(spec.latency_budget_ms, good))
    reasons = _validity(health_before, health_during, health_after)
    result.update(
        valid=not reasons,
        invalid_reasons=reasons,
        health={"before": health_before, "during": health_during, "after": health_after},
        input={"source": "file", "path": spec.input_file} if spec.input_file else {"source": "random", "seed": spec.seed},
        inputs=loaded.get("inputs"),
        outputs=loaded.get("outputs"),
        notes=([f"runtime {fell_back['from']} is not available here ({fell_back['reason']}): "
                f"ran {fell_back['to']} instead"] if fell_back else []) + list(loaded.get("notes", [])),
        spec=_spec_summary(spec),
    )
    check = outcome.first("reference")
    if check is not None:
        result["output_check"] = check["check"]
        if not check["check"]["ok"]:
            result["invalid_reasons"] = result["invalid_reasons"] + [check["check"]["reason"]]
            result["valid"] = False
    return result


def _spec_summary(spec: BenchmarkSpec) -> Dict[str, Any]:
    """The spec as the result echoes it: a reference by its seed and outputs, not all its values."""
    data = spec.to_dict()
    if spec.reference is not None:
        data["reference"] = {"seed": spec.reference["seed"], "samples": spec.reference["samples"],
                             "outputs": [o["name"] for o in spec.reference["outputs"]]}
    return data


def _failure_of(outcome: ChildOutcome, spec: BenchmarkSpec, entries: List[Dict[str, Any]]) -> Dict[str, str]:
    reported = outcome.first("error")
    if reported:
        return reported["error"]
    if not outcome.first("loaded"):  # died before it could say anything
        return _death(outcome, spec)
    failed = [e for e in entries if not e.get("ok")]
    if len(failed) == 1:
        return failed[0]["error"]
    listed = "; ".join(f"batch {e['batch']}: {e['error']['message']}" for e in failed)
    return failure(failed[0]["error"]["kind"], f"no batch size could run: {listed}")


def _budget(budget_ms: float, good: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The largest batch whose p90 latency fits the budget."""
    fitting = [e for e in good if e["latency_ms"]["p90"] <= budget_ms and e.get("batch") is not None]
    best = max(fitting, key=lambda e: e["batch"]) if fitting else None
    fields: Dict[str, Any] = {
        "latency_budget_ms": budget_ms,
        "max_batch_within_budget": best["batch"] if best else None,
    }
    if best is None:
        fastest = min(good, key=lambda e: e["latency_ms"]["p90"])
        fields["budget_reason"] = (
            f"no batch size has p90 within {budget_ms:g} ms "
            f"(best: p90 {fastest['latency_ms']['p90']:.3f} ms at batch {fastest['batch']})"
        )
    return fields
