"""The cells of a profile's tables (see edgeopt.profiling), shared by `edgeopt profile` and the report."""
from __future__ import annotations

from typing import Any, List, Mapping, Optional


def op_type_rows(profile: Mapping[str, Any], top: Optional[int] = None) -> List[List[Any]]:
    """op type, nodes, ms, share: one row per op type, slowest first."""
    return [[t["op_type"], t["nodes"], f"{t['ms']:.4f}", f"{t['share'] * 100:.1f}%"] for t in profile["op_types"][:top]]


def node_rows(profile: Mapping[str, Any], top: Optional[int] = None) -> List[List[Any]]:
    """node, op type, ms, share: one row per node, slowest first."""
    return [[n["name"], n["op_type"], f"{n['ms']:.4f}", f"{n['share'] * 100:.1f}%"] for n in profile["nodes"][:top]]


def family_rows(comparison: Mapping[str, Any]) -> List[List[Any]]:
    """op family, FP32 ms, INT8 ms, speed-up, verdict: one row per op family of an FP32/INT8 pair."""
    return [[r["family"], f"{r['fp32_ms']:.4f}", f"{r['int8_ms']:.4f}",
             f"{r['speedup']:.2f}x" if r["speedup"] else "-", r["verdict"]] for r in comparison["families"]]
