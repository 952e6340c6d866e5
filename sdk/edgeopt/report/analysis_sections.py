"""The report's profile and roofline sections: where the time goes on the host (per-op profile),
and where it should go on a board (roofline per node, predicted against the fleet's measurements)."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..profile_rows import family_rows, node_rows, op_type_rows
from .charts import Point, legend, roofline_chart
from .text import esc

BOUND_COLORS = {"memory": "#D55E00", "compute": "#0072B2"}


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f'<div class="scroll"><table class="data"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def profile_section(result: Mapping[str, Any], top: int = 8) -> str:
    parts = []
    for a in result["artifacts"]:
        p = a["profile"]
        if not p.get("profiler"):
            parts.append(f"<p>{esc(a['key'])}: not profiled per op: {esc(p.get('unavailable'))}</p>")
            continue
        parts.append(f"<h3>{esc(a['key'])}</h3><p>{p['run_ms']:.3f} ms per run over {p['runs']} runs "
                     f"({esc(p.get('threads'))} threads, onnxruntime's profiler); the {p['node_count']} nodes account "
                     f"for {p['node_coverage'] * 100:.0f}% of the run.</p>")
        parts.append(_table(["op type", "nodes", "ms", "share"], op_type_rows(p, top)))
        parts.append(_table(["slowest node", "op type", "ms", "share"], node_rows(p, top)))
    for c in result.get("comparisons", []):
        parts.append(f"<h3>{esc(c['fp32'])} against {esc(c['int8'])}</h3>"
                     f"<p>INT8 runs {c['speedup']:.2f}x FP32; its quantize/dequantize nodes take {c['qdq_ms']:.4f} ms "
                     f"({c['qdq_share'] * 100:.1f}% of its node time).</p>")
        parts.append(_table(["op family", "FP32 ms", "INT8 ms", "speed-up", "verdict"], family_rows(c)))
    return "".join(parts)


def roofline_section(result: Mapping[str, Any]) -> str:
    m = result["machine"]
    parts = [f"<p>{esc(result['device'])}: " + ", ".join(f"{esc(p)} {v:.1f} GOP/s" for p, v in m["peak_gops"].items())
             + f", {m['bandwidth_gbps']:.1f} GB/s ({esc(m['source'])}). Each point is a node: its arithmetic intensity "
             "and the throughput the roofline lets it reach; under the slope it is bound by memory, under the flat "
             "roof by compute.</p>",
             "".join(f"<p>Figures {esc(line)}.</p>" for line in result.get("figures", [])),
             legend([(f"{b}-bound node", c, "circle", False) for b, c in BOUND_COLORS.items()])]
    for a in result["artifacts"]:
        p = a["prediction"]
        state = (f"calibrated by an efficiency of {p['efficiency']:.2f} from {p['efficiency_samples']} fleet result(s)"
                 + (f" and per kernel kind ({', '.join(f'{k} {v:.2f}' for k, v in p['kind_efficiency'].items())})"
                    if p.get("kind_efficiency") else "")
                 if p["calibrated"] else "uncalibrated (no fleet measurement of this board yet)")
        shares = ", ".join(f"{k} {v * 100:.0f}%" for k, v in p["bound_share"].items() if v > 0)
        parts.append(f"<h3>{esc(a['key'])} ({esc(a['precision'])})</h3><p>{a['macs'] / 1e9:.3f} GMAC, "
                     f"{a['bytes'] / 1e6:.1f} MB moved; predicted {p['predicted_ms']:.3f} ms, {esc(state)}; "
                     f"predicted time by bound: {esc(shares)}.</p>")
        points = [Point(q["intensity"], q["gops"], BOUND_COLORS.get(q["bound"], "#7F7F7F"),
                        tip=f"{q['name']} ({q['op_type']}, {q['precision']}): {q['intensity']:.1f} ops/byte, "
                            f"{q['ms']:.4f} ms, {q['bound']}-bound")
                  for q in a["roofline_points"] if q["intensity"] and q["gops"] > 0]
        precisions = {q["precision"] for q in a["roofline_points"]} or {a["precision"]}
        peaks = [(pr, m["peak_gops"][pr]) for pr in sorted(precisions) if pr in m["peak_gops"]]
        if points and peaks:
            parts.append(roofline_chart(points, peaks, m["bandwidth_gbps"], f"roofline of {a['key']} on {result['device']}"))
    if result.get("fleet"):
        parts.append("<h3>Predicted against the fleet's measurements</h3>")
        parts.append(_table(
            ["board", "artifact", "measured p50 ms", "predicted ms", "error", "calibrated ms", "calibrated error"],
            [[r["profile"], r["artifact"], f"{r['measured_ms']:.3f}", f"{r['predicted_ms']:.3f}", f"{r['error_pct']:+.1f}%",
              f"{r['calibrated_ms']:.3f}" if r["calibrated_ms"] is not None else "-",
              f"{r['calibrated_error_pct']:+.1f}%" if r["calibrated_error_pct"] is not None else "-"]
             for r in result["fleet"]]))
    notes = list(result.get("notes", [])) + sorted({n for a in result["artifacts"] for n in a["prediction"]["notes"]})
    parts += [f'<p class="missing">{esc(n)}</p>' for n in notes]
    return "".join(parts)
