"""Where inference time goes, per node, from the runtime's own profiler: what every profile says.

A runtime's row in the runtime table names its profiler (ONNX Runtime's trace:
runners/onnxruntime/profiler.py; TensorRT's IProfiler: runners/tensorrt/layers.py), or says why it
has none (`unsupported`). Each profiler hands its per-node times to `summarize`, so every profile
has the same shape: nodes and op types by time per run, with their share.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Sequence

from .errors import UserError

TOP = 20  # nodes kept in a published profile (op types are all kept)


class ProfileParseError(UserError):
    """A profiler trace is not what the runtime writes."""


def summarize(nodes: Sequence[Mapping[str, Any]], runs: int, run_ms: float, profiler: str,
              top: Optional[int] = None) -> Dict[str, Any]:
    """Nodes and op types by time per run, with their share of the summed node time, as `profiler` measured them."""
    per_node = [{"name": n["name"], "op_type": n["op_type"], "provider": n.get("provider"),
                 "ms": n["total_us"] / 1000.0 / runs, "calls": n["calls"]} for n in nodes]
    node_ms = sum(n["ms"] for n in per_node)
    per_node.sort(key=lambda n: -n["ms"])
    types: Dict[str, Dict[str, Any]] = {}
    for n in per_node:
        t = types.setdefault(n["op_type"], {"op_type": n["op_type"], "nodes": 0, "ms": 0.0})
        t["nodes"] += 1
        t["ms"] += n["ms"]
    by_type = sorted(types.values(), key=lambda t: -t["ms"])
    for item in per_node + by_type:
        item["share"] = round(item["ms"] / node_ms, 4) if node_ms else 0.0
        item["ms"] = round(item["ms"], 6)
    return {
        "profiler": profiler,
        "runs": runs,
        "run_ms": round(run_ms, 6),
        "node_ms": round(node_ms, 6),
        "node_coverage": round(node_ms / run_ms, 4) if run_ms else None,
        "node_count": len(per_node),
        "nodes": per_node[:top] if top else per_node,
        "op_types": by_type,
    }


def unsupported(runtime: str) -> Dict[str, Any]:
    """What a profile says for a runtime whose per-op profiler edgeopt cannot read."""
    from . import runtimes

    row = runtimes.BY_NAME.get(runtime)
    return {"profiler": None, "runtime": runtime,
            "unavailable": (row.no_profiler if row is not None else "") or f"no per-op profiler for {runtime}"}
