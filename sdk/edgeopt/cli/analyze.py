"""`edgeopt analyze MODEL.onnx|OUTDIR --profile NAME`: roofline per node and predicted latency on a board."""
from __future__ import annotations

from typing import Any, Dict

import click

from .option_alias import hidden_alias
from .output import console, json_or_shown, table


def _si(value: float, unit: str) -> str:
    for scale, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.2f} {prefix}{unit}"
    return f"{value:.0f} {unit}"


@click.command()
@click.argument("model", type=click.Path(exists=True))
@click.option("--profile", "device", metavar="NAME",
              help="Board profile (see `edgeopt devices`; or a file, ./mybox.toml), or 'host' for this machine "
                   "with its peaks measured. Required.")
@hidden_alias("--device", "--profile", "device", required=True, metavar="NAME")
@click.option("--input-shape", "input_shapes", multiple=True, metavar="1,3,224,224",
              help="Shape of each input, in order (default: a conversion's recorded shapes; for a file, "
                   "the model's, free dimensions 1).")
@click.option("--db", metavar="URL", help="Fleet store to compare with and calibrate from (sqlite:///fleet.db).")
@click.option("--threads", type=int, help="Threads for measuring the host's peaks (--profile host).")
@click.option("--top", type=int, default=15, show_default=True, help="Nodes listed per artifact.")
@click.option("--json", "as_json", is_flag=True, help="Print the whole analysis as JSON.")
def analyze(model, device, input_shapes, db, threads, top, as_json):
    """Where the time should go on a board: per node operations, bytes, arithmetic intensity and
    whether it is bound by memory or by compute, and the graph's predicted latency. With --db,
    predictions are set against what the fleet measured and calibrated by it."""
    from edgeopt_converters.source.tensors import parse_shape

    from ..analysis import analyze as run

    result = run(model, device, [parse_shape(s) for s in input_shapes], db=db, threads=threads, top=top)
    json_or_shown(result, as_json, show)


def show(result: Dict[str, Any]) -> None:
    out = console()
    m = result["machine"]
    peaks = ", ".join(f"{p} {v:.1f} GOP/s" for p, v in m["peak_gops"].items())
    out.print(f"{result['device']}: {peaks}, {m['bandwidth_gbps']:.1f} GB/s ({m['source']})")
    for line in result["figures"]:
        out.print(f"figures {line}")
    if m["kinds"]:
        out.print(table(["kernel kind", "GOP/s", "GB/s", "measured on"],
                        [[k, f"{v['gops']:.1f}", f"{v['gbps']:.1f}" if v["gbps"] else "machine's", v["kernel"]]
                         for k, v in m["kinds"].items()],
                        title=f"{result['device']}: measured per kernel kind"))
    for a in result["artifacts"]:
        p = a["prediction"]
        shares = ", ".join(f"{k} {v * 100:.0f}%" for k, v in sorted(p["bound_share"].items(), key=lambda kv: -kv[1])
                           if v > 0)
        state = (f"calibrated (efficiency {p['efficiency']:.2f} from {p['efficiency_samples']} fleet result(s)"
                 + (f", {len(p['kind_efficiency'])} kernel kinds fitted" if p["kind_efficiency"] else "") + ")"
                 if p["calibrated"] else "uncalibrated (no fleet measurement of this board)")
        out.print(f"\n{a['key']} ({a['precision']}): {_si(a['macs'], 'MAC')}, {_si(a['bytes'], 'B')} moved, "
                  f"predicted {p['predicted_ms']:.3f} ms, {state}; time by bound: {shares}")
        rows = [[n["name"], n["op_type"], n["kind"], n["precision"], _ops(n), _si(n["bytes"], "B"),
                 f"{n['intensity']:.1f}" if n["intensity"] is not None else "-", n["bound"], n["roof"],
                 f"{n['predicted_ms']:.4f}"] for n in p["nodes"] if n["predicted_ms"] > 0]
        out.print(table(["node", "op", "kind", "precision", "ops", "bytes", "ops/byte", "bound", "roof",
                         "predicted ms"], rows,
                        title=f"{a['key']}: slowest nodes"))
        if any(n.get("padded_ops") for n in p["nodes"]):
            from edgeopt_converters.cost.node_kinds import SGEMM_PANEL

            out.print("ops (x N): the kernel computes N times the node's operations (a convolution unfolded into "
                      f"onnxruntime's float GEMM fills whole {SGEMM_PANEL}-column panels) and is timed by them")
        for note in a["notes"]:
            out.print(f"note: {note}")
    if result["fleet"]:
        rows = [[r["profile"], r["artifact"], f"{r['measured_ms']:.3f}", f"{r['predicted_ms']:.3f}",
                 f"{r['error_pct']:+.1f}%",
                 f"{r['calibrated_ms']:.3f}" if r["calibrated_ms"] is not None else "-",
                 f"{r['calibrated_error_pct']:+.1f}%" if r["calibrated_error_pct"] is not None else "-"]
                for r in result["fleet"]]
        out.print(table(["board", "artifact", "measured p50 ms", "predicted ms", "error", "calibrated ms",
                         "calibrated error"], rows, title="predicted against the fleet's measurements"))
    notes = list(result["notes"])
    notes += sorted({n for a in result["artifacts"] for n in a["prediction"]["notes"]})
    for note in notes:
        out.print(f"note: {note}")


def _ops(node: dict) -> str:
    """A node's operations, and how many times more its kernel computes where it pads them."""
    if node.get("padded_ops"):
        return f"{_si(node['ops'], 'op')} (x{node['padded_ops'] / node['ops']:.1f})"
    return _si(node["ops"], "op")
