"""ONNX Runtime's per-op profiler: a session created with profiling on writes a Chrome trace (JSON),
one "Session" event per run ("model_run") and, per node and run, a "Node" event named
"<node>_kernel_time" with the op type in its args. `parse_ort_trace` turns such a trace into per-node
and per-op-type times; `profile_onnx` runs a model under the profiler and parses what it wrote.
Warm-up runs are in the trace too: only node events inside the last `runs` model_run windows count.
Stdlib only until a profile is taken (onnxruntime is imported then).
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import tempfile
import time
from typing import Any, Dict, List, Mapping, Optional

from ...op_profile import ProfileParseError, summarize
from .importing import import_onnxruntime

_KERNEL_SUFFIX = "_kernel_time"


def parse_ort_trace(events: Any, skip_runs: int = 0) -> Dict[str, Any]:
    """Per-node and per-op-type kernel time (ms per run) from onnxruntime's profiling JSON.

    `skip_runs`: the first model runs (warm-up) whose node events are left out.
    """
    if not isinstance(events, list):
        raise ProfileParseError("an onnxruntime profile is a JSON list of trace events")
    runs = sorted((e for e in events if _is_event(e) and e.get("cat") == "Session" and e.get("name") == "model_run"),
                  key=lambda e: e["ts"])
    kept = runs[skip_runs:]
    if not kept:
        raise ProfileParseError(f"the profile has {len(runs)} model run(s); none left after {skip_runs} warm-up run(s)")
    windows = [(e["ts"], e["ts"] + e["dur"]) for e in kept]
    nodes: Dict[str, Dict[str, Any]] = {}
    for e in events:
        if not (_is_event(e) and e.get("cat") == "Node" and str(e.get("name", "")).endswith(_KERNEL_SUFFIX)):
            continue
        if not any(start <= e["ts"] <= end for start, end in windows):
            continue
        name = e["name"][: -len(_KERNEL_SUFFIX)]
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        entry = nodes.setdefault(name, {"name": name, "op_type": args.get("op_name", "?"),
                                        "provider": args.get("provider"), "total_us": 0.0, "calls": 0})
        entry["total_us"] += float(e["dur"])
        entry["calls"] += 1
    run_ms = sum(float(e["dur"]) for e in kept) / 1000.0 / len(kept)
    return summarize(list(nodes.values()), len(kept), run_ms, "onnxruntime")




def _is_event(e: Any) -> bool:
    return isinstance(e, dict) and isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float))


def profile_onnx(path: str, feeds: Mapping[str, Any], threads: Optional[int] = None, runs: int = 20,
                 warmup: int = 3, providers: Optional[List[str]] = None, top: Optional[int] = None) -> Dict[str, Any]:
    """Run an ONNX model `warmup + runs` times under onnxruntime's profiler; per-node times per run."""
    ort = import_onnxruntime("agent-onnx", "ONNX models")
    folder = tempfile.mkdtemp(prefix="edgeopt-profile-")
    try:
        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(folder, "ort")
        if threads:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
        session = ort.InferenceSession(str(path), sess_options=options,
                                       providers=providers or ["CPUExecutionProvider"])
        feeds = dict(feeds)
        for _ in range(warmup):
            session.run(None, feeds)
        wall = []
        for _ in range(runs):
            start = time.perf_counter()
            session.run(None, feeds)
            wall.append((time.perf_counter() - start) * 1000.0)
        trace = session.end_profiling()
        with open(trace, encoding="utf-8") as handle:
            events = json.load(handle)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    result = parse_ort_trace(events, skip_runs=warmup)
    if top:
        result["nodes"] = result["nodes"][:top]
    result["providers"] = list(session.get_providers())
    result["wall_ms"] = round(statistics.fmean(wall), 6)  # mean per run on the caller's clock, like run_ms
    return result


def profile_ops(runner: Any, artifact: str, feeds: Mapping[str, Any], threads: Optional[int], runs: int,
                top: Optional[int]) -> Dict[str, Any]:
    """The row's per-op profiler (edgeopt_agent.runtimes.Runtime.profiler): onnxruntime's own, with the
    execution providers the runner runs on."""
    return profile_onnx(artifact, feeds, threads=threads, runs=runs, providers=list(runner.providers), top=top)
