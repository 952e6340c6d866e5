"""`edgeopt profile ARTIFACT|OUTDIR`: per-op time on this host from the runtime's own profiler."""
from __future__ import annotations

from typing import Any, Dict

import click

from ..profile_rows import family_rows, node_rows, op_type_rows
from .output import console, json_or_shown, table


@click.command()
@click.argument("target", type=click.Path(exists=True))
@click.option("--threads", type=int, help="Inference threads (default: this machine's CPUs).")
@click.option("--runs", type=int, default=20, show_default=True, help="Profiled runs (after 3 warm-up runs).")
@click.option("--input-shape", "input_shapes", multiple=True, metavar="1,3,224,224",
              help="Shape of each input, in order, for models with free dimensions (default for a "
                   "conversion's OUTDIR: the shapes its manifest records).")
@click.option("--top", type=int, default=10, show_default=True, help="Nodes listed per artifact.")
@click.option("--json", "as_json", is_flag=True, help="Print the profiles as JSON.")
def profile(target, threads, runs, input_shapes, top, as_json):
    """Where an artifact's time goes on this host: the slowest nodes and op types with their share,
    and for a conversion's FP32 and INT8 artifacts, which op families got faster and what the
    quantize/dequantize nodes cost."""
    from edgeopt_agent.errors import UserError
    from edgeopt_converters.source.tensors import parse_shape

    from ..profiling import profile as run

    if runs < 1:
        raise UserError("--runs must be at least 1")
    result = run(target, threads=threads, runs=runs, input_shapes=[parse_shape(s) for s in input_shapes], top=top)
    json_or_shown(result, as_json, show)


def show(result: Dict[str, Any]) -> None:
    out = console()
    for a in result["artifacts"]:
        p = a["profile"]
        if not p.get("profiler"):
            out.print(f"{a['key']}: not profiled per op: {p['unavailable']}")
            continue
        out.print(f"\n{a['key']}: {p['run_ms']:.3f} ms per run ({p['runs']} runs, {p['threads']} threads), "
                  f"nodes account for {p['node_coverage'] * 100:.0f}% of it, {p['node_count']} nodes")
        out.print(table(["op type", "nodes", "ms", "share"], op_type_rows(p), title=f"{a['key']}: op types"))
        out.print(table(["node", "op type", "ms", "share"], node_rows(p), title=f"{a['key']}: slowest nodes"))
    for c in result["comparisons"]:
        out.print(table(["op family", "fp32 ms", "int8 ms", "speed-up", "verdict"], family_rows(c),
                        title=f"{c['fp32']} against {c['int8']}"))
        out.print(f"INT8 run {c['speedup']:.2f}x FP32; quantize/dequantize nodes: {c['qdq_ms']:.4f} ms "
                  f"({c['qdq_share'] * 100:.1f}% of INT8 node time)")
