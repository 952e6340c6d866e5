"""The benchmark process: `python -m edgeopt_agent.bench.child RESULT_FD [WATCH_FD PARENT_PID]`.

The spec comes as JSON on stdin. With WATCH_FD and PARENT_PID it dies with its parent
(parent_watch.py): WATCH_FD is a pipe whose write end only the parent holds.

It reports on the file descriptor RESULT_FD, one JSON object per line:
    {"type": "phase", "text": ..., "batch": ...}   what it is doing now (for progress and for
                                                    naming the batch a crash happened in)
    {"type": "fallback", "fallback": {...}}         the runtime asked for is not here: which one runs instead, why
    {"type": "loaded", ...}                         load time, memory, runtime, model inputs/outputs
    {"type": "batch", "entry": {...}}               one measured batch size, or its error
    {"type": "op_profile", "profile": {...}}        the per-op profile (spec.profile), after every batch
    {"type": "done", "peak_rss_mb": ...}            finished
    {"type": "error", "error": {"kind", "message"}} stopped before any batch could run
A process that ends without "done" or "error" has crashed; the parent names the cause.
"""
from __future__ import annotations

import dataclasses
import faulthandler
import gc
import json
import os
import sys
import time
from typing import Any, Callable, Dict, Optional, Tuple

from .. import op_profile
from ..runners import UnsupportedModelError, open_runner
from ..runners.availability import unavailable_reason
from .. import runtimes
from .failures import classify
from .inputs import file_feeds, random_feeds
from .memory import current_rss_mb, limit_address_space, peak_rss_mb
from .parent_watch import die_with_parent
from .reference import OUTPUT_MISMATCH, run_reference
from .spec import BenchmarkSpec
from .stats import device_timing_fields, histogram_ms, summarize_ms
from .timing import output_digest, time_calls

Send = Callable[..., None]


def benchmark(spec: BenchmarkSpec, send: Send) -> None:
    if spec.fallback_runtimes:
        send("phase", text="checking which runtime this machine has")
        spec, fallback = choose_runtime(spec)
        if fallback is not None:
            send("fallback", fallback=fallback)
    # Importing a runtime (executorch brings torch) can take longer than loading the model on a loaded board:
    # a timeout says which of the two it was.
    send("phase", text=f"importing the {spec.runtime} runtime" if spec.runtime else "importing the runtime")
    runner = open_runner(spec.artifact, threads=spec.resolved_threads(), runtime=spec.runtime, **spec.runner_options())
    send("phase", text="loading the model")
    notes = []
    rss_before = current_rss_mb()
    if spec.memory_limit_mb is not None and spec.runtime in runtimes.GPU_RUNTIMES:
        notes.append("memory limit not enforced: CUDA reserves more address space than an RLIMIT_AS limit allows")
    elif spec.memory_limit_mb is not None:
        note = limit_address_space(spec.memory_limit_mb)
        if note:
            notes.append(note)
    start = time.perf_counter()
    runner.load()
    load_ms = (time.perf_counter() - start) * 1000.0
    notes.extend(getattr(runner, "notes", ()))  # what a runner noticed while loading (a rebuilt engine)
    rss_after = current_rss_mb()
    send(
        "loaded",
        load_ms=round(load_ms, 6),
        model_rss_mb=_mb(rss_after - rss_before) if rss_before is not None and rss_after is not None else None,
        runner=runner.describe(),
        inputs=[i.to_dict() for i in runner.inputs()],
        outputs=[o.to_dict() for o in runner.outputs()],
        notes=notes,
    )
    sizes = spec.batch_sizes or (None,)
    profile_feeds = None
    for number, batch in enumerate(sizes, start=1):
        what = "measuring" if batch is None else f"measuring batch {batch}"
        if len(sizes) > 1:
            what += f" ({number} of {len(sizes)})"
        send("phase", text=what, batch=batch)
        try:
            if spec.input_file:
                feeds = file_feeds(spec.input_file, runner.inputs(), batch, spec.inputs)
            else:
                feeds = random_feeds(runner.inputs(), batch, spec.seed, spec.inputs)
            entry = measure_batch(runner, spec, batch, feeds)
            if profile_feeds is None:
                profile_feeds = feeds
        except Exception as exc:  # this batch failed; the next size may still run
            entry = {"batch": batch, "ok": False, "error": classify(exc)}
        send("batch", entry=entry)
    if spec.reference is not None:
        send("phase", text="checking outputs against the reference")
        try:
            send("reference", check=run_reference(runner, spec.reference, spec.inputs))
        except Exception as exc:  # the reference could not run: that is a result too, not a crash
            error = classify(exc)
            send("reference", check={"ok": False, "outputs": [], "reason": f"{OUTPUT_MISMATCH}: the reference "
                                     f"samples could not run ({error['kind']}: {error['message']})"})
    if spec.profile and profile_feeds is not None:  # last: a profiler may stay attached to the runner
        send("phase", text="profiling per op")
        send("op_profile", profile=profile_ops(runner, spec, profile_feeds))
    runner.close()
    send("done", peak_rss_mb=_mb(peak_rss_mb()))


def choose_runtime(spec: BenchmarkSpec) -> Tuple[BenchmarkSpec, Optional[Dict[str, Any]]]:
    """The spec with the first of its runtime and fallback runtimes this machine can use, and what
    falling back meant ({"from", "to", "reason"}), or None where the runtime asked for is there.
    Asking imports each runtime, which is why this happens here, in the benchmark process."""
    reasons = []
    for runtime in (spec.runtime,) + tuple(spec.fallback_runtimes or ()):
        reason = unavailable_reason(runtime)
        if reason is None:
            break
        reasons.append((runtime, reason))
    else:
        raise UnsupportedModelError("no runtime asked for can run here: " +
                                    "; ".join(f"{runtime}: {reason}" for runtime, reason in reasons))
    if not reasons:
        return spec, None
    fallback: Dict[str, Any] = {"from": spec.runtime, "to": runtime, "reason": reasons[0][1]}
    if len(reasons) > 1:
        fallback["also_unavailable"] = {name: why for name, why in reasons[1:]}
    precision = spec.precision if runtime in runtimes.ENGINE_RUNTIMES else None
    if spec.precision is not None and precision is None:
        fallback["precision_dropped"] = spec.precision
    return dataclasses.replace(spec, runtime=runtime, precision=precision, fallback_runtimes=None), fallback


def measure_batch(runner, spec: BenchmarkSpec, batch: Optional[int], feeds: Dict[str, Any]) -> Dict[str, Any]:
    """One batch size: cold call, warm-up, measured phase.

    Runners on a GPU time each call on the device as well (`take_device_timings()`: CUDA events)
    and say what device memory they hold (`device_stats()`); latency_ms stays the end-to-end
    time on the host's clock, copies to and from the device included.
    """
    take_device_timings = getattr(runner, "take_device_timings", None)
    device_stats = getattr(runner, "device_stats", None)
    prepared = runner.prepare(feeds)
    first_input = next(iter(prepared.values()), None)
    if batch is None and first_input is not None and first_input.ndim:
        batch = int(first_input.shape[0])
    call = runner.bind(prepared)
    outputs = runner.outputs()

    start = time.perf_counter()
    first = call()
    first_ms = (time.perf_counter() - start) * 1000.0
    digest = output_digest(outputs, first)

    warmup, _ = time_calls(call, spec.warmup_runs, spec.warmup_s, spec.max_duration_s)
    if take_device_timings is not None:
        take_device_timings()  # the cold call and the warm-up are not measured
    gc_was_enabled = gc.isenabled()
    gc.disable()  # as timeit does: a collection inside a timed call is not the model's cost
    try:
        window_start = time.time()
        durations, elapsed = time_calls(call, spec.runs, spec.duration_s, spec.max_duration_s)
        window_end = time.time()
    finally:
        if gc_was_enabled:
            gc.enable()
    device_timings = take_device_timings() if take_device_timings is not None else {}
    stable = output_digest(outputs, call()) == digest

    samples = batch or 1
    entry = {
        "batch": batch,
        "ok": True,
        "first_inference_ms": round(first_ms, 6),
        "latency_ms": summarize_ms(durations),
        "latency_histogram": histogram_ms(durations),
        "throughput_ips": round(len(durations) * samples / elapsed, 3) if elapsed > 0 else None,
        "runs": len(durations),
        "warmup_runs": len(warmup),
        "measured_s": round(elapsed, 6),
        "capped_by_max_duration": len(durations) < spec.runs or elapsed < spec.duration_s,
        "measured_window": [window_start, window_end],
        "output_sha256": digest,
        "output_stable": stable,
        "peak_rss_mb": _mb(peak_rss_mb()),
    }
    entry.update(device_timing_fields(device_timings))
    if device_stats is not None:
        entry.update(device_stats())
    return entry


def profile_ops(runner, spec: BenchmarkSpec, feeds: Dict[str, Any], runs: int = 20) -> Dict[str, Any]:
    """The runtime's own per-op profile of this model and input (first batch size), or why there is none."""
    row = runtimes.BY_NAME.get(runner.runtime)
    try:
        if row is not None and row.profiler is not None:
            return row.profiler(runner, spec.artifact, feeds, spec.resolved_threads(), runs, op_profile.TOP)
    except Exception as exc:  # the measurement stands; the profile reports its own failure
        return {"profiler": runner.runtime, "error": classify(exc)}
    return op_profile.unsupported(runner.runtime)


def _mb(value: Optional[float]) -> Optional[float]:
    return None if value is None else round(value, 3)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) not in (1, 3) or not all(arg.isdigit() for arg in argv):
        sys.stderr.write("usage: python -m edgeopt_agent.bench.child RESULT_FD [WATCH_FD PARENT_PID]  "
                         "(spec JSON on stdin)\n")
        return 2
    if len(argv) == 3:
        die_with_parent(parent_pid=int(argv[2]), watch_fd=int(argv[1]))
    faulthandler.enable()  # a native crash leaves its Python stack in the log the parent reads
    with os.fdopen(int(argv[0]), "w", encoding="utf-8") as channel:

        def send(kind: str, **body: Any) -> None:
            channel.write(json.dumps({"type": kind, **body}) + "\n")
            channel.flush()

        try:
            benchmark(BenchmarkSpec.from_dict(json.load(sys.stdin)), send)
        except Exception as exc:
            send("error", error=classify(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
