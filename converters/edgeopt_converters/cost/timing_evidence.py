"""What a conversion's speed figures stand for, as the manifest records it.

Host timings say how fast the target runs an artifact only when the host stands for it (same
architecture, CPU runtimes, timing not skipped). Otherwise the manifest carries the roofline's
prediction for the board next to each artifact, so readers (the report) never show host
speed-ups as the board's.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, Mapping, Optional, Tuple

from edgeopt_agent.cpu_check import cpu_flags

# The SIMD features that decide how fast the host's kernels are, named as /proc/cpuinfo does.
SPEED_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8",
               "asimd", "asimddp", "asimdhp", "i8mm", "sve")


def host_simd() -> list:
    """This host's speed-relevant CPU flags, in SPEED_FLAGS order (empty where /proc is absent)."""
    flags = cpu_flags()
    return [f for f in SPEED_FLAGS if f in flags]


def predicted_entries(artifacts: Iterable[Tuple[str, str, str]], predicted_ms: Mapping[str, float]
                      ) -> Dict[str, Optional[Dict[str, Any]]]:
    """Per artifact key, its roofline prediction on the board: {p50_ms, speedup_vs_fp32, method, graph}.

    artifacts: (key, format, precision). A non-ONNX artifact takes the ONNX graph of its precision
    (same arithmetic); speed-up is against the FP32 prediction of the same format. None where no
    graph was predicted.
    """
    artifacts = list(artifacts)
    onnx_by_precision = {precision: key for key, fmt, precision in artifacts
                         if fmt == "onnx" and key in predicted_ms}
    graphs = {key: key if key in predicted_ms else onnx_by_precision.get(precision)
              for key, _, precision in artifacts}
    fp32 = {fmt: predicted_ms[graphs[key]] for key, fmt, precision in artifacts
            if precision == "fp32" and graphs.get(key)}
    entries: Dict[str, Optional[Dict[str, Any]]] = {}
    for key, fmt, _ in artifacts:
        graph = graphs.get(key)
        if graph is None:
            entries[key] = None
            continue
        ms = predicted_ms[graph]
        base = fp32.get(fmt)
        entries[key] = {"p50_ms": round(ms, 6), "speedup_vs_fp32": round(base / ms, 3) if base and ms > 0 else None,
                        "method": "roofline", "graph": graph}
    return entries
