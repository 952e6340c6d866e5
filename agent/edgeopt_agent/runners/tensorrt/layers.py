"""Per-layer GPU time of a TensorRT engine, from TensorRT's own IProfiler.

An IProfiler attached to the execution context (`context.profiler`) is told each layer's time
after every enqueue (`enqueue_emits_profile` defaults to true). Checked against the Python
bindings of TensorRT 8.6, 10.13 and 11.4 (`IProfiler`, `report_layer_time`, the context's
`profiler` attribute; see DEVELOPERS.md for how), never run here: no GPU. Layer names are
TensorRT's (fused layers read like "Conv_0 + Relu_1"); TensorRT does not say their op type
without a detailed-verbosity build, so the type is taken from the name's first part.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Dict, List

from ...op_profile import summarize


def layer_kind(name: str) -> str:
    """'/backbone/conv1/Conv + /backbone/relu/Relu' -> 'Conv+Relu'; 'Reformatting CopyNode for ...' -> 'Reformat'."""
    if name.startswith("Reformatting"):
        return "Reformat"
    parts = []
    for piece in name.split(" + "):
        last = piece.strip().rstrip("/").split("/")[-1]
        kind = re.sub(r"[_.:]?\d+$", "", last) or last
        parts.append(kind)
    return "+".join(parts)


def layer_profile(trt: Any, context: Any, call: Callable[[], Any], runs: int,
                  gpu_compute_ms: Callable[[], List[float]]) -> Dict[str, Any]:
    """Attach a profiler, run `call` once (dropped) and `runs` times; per-layer ms per run."""
    times: Dict[str, Dict[str, Any]] = {}

    class LayerTimes(trt.IProfiler):
        def __init__(self):
            trt.IProfiler.__init__(self)  # the bindings require the base class to be initialised

        def report_layer_time(self, layer_name, ms):
            entry = times.setdefault(layer_name, {"name": layer_name, "op_type": layer_kind(layer_name),
                                                  "provider": "tensorrt", "total_us": 0.0, "calls": 0})
            entry["total_us"] += float(ms) * 1000.0
            entry["calls"] += 1

    profiler = LayerTimes()
    context.profiler = profiler
    call()
    times.clear()
    gpu_compute_ms()
    for _ in range(runs):
        call()
    compute = gpu_compute_ms()
    run_ms = sum(compute) / len(compute) if compute else 0.0
    result = summarize(list(times.values()), runs, run_ms, "tensorrt")
    result["note"] = "layer times from TensorRT's IProfiler; run_ms is the engine's GPU compute time (CUDA events)"
    return result
