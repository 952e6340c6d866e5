"""`edgeopt convert MODEL --device NAME -o OUTDIR`."""
from __future__ import annotations

import json

import click

from .option_flags import option_flags
from .output import console, table

MODEL_HELP = """MODEL is one of: path/to/file.py:factory (a function returning an nn.Module), a TorchScript
file, an ExportedProgram .pt2, an .onnx file, or example:digits-cnn (bundled)."""


def convert_options(command):
    """One click option per convert option, generated from their one definition (edgeopt_converters.options)."""
    from edgeopt_converters.options import ConvertOptions

    return option_flags(ConvertOptions)(command)


@click.command(help=f"Quantize and export a model for a target board.\n\n{MODEL_HELP}")
@click.argument("model")
@convert_options
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON instead of the summary table.")
def convert(model, as_json, **options):
    from edgeopt.api import convert as run
    from edgeopt_converters.progress import LineProgress, ProgressReporter, terminal_progress

    reporter = ProgressReporter() if as_json else terminal_progress()
    if as_json:
        manifest = run(model, progress=reporter, **options)
        click.echo(json.dumps(manifest, indent=2))
        return
    with reporter:
        if isinstance(reporter, LineProgress):
            reporter.headline(f"convert {model} for {options['device']} into {options['output_dir']}")
        manifest = run(model, progress=reporter, **options)
    print_summary(manifest, options["output_dir"])


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _fmt(value, pattern="{:.2f}"):
    return "-" if value is None else pattern.format(value)


def _verdict(acc: dict) -> str:
    verdict = acc.get("verdict") or "-"
    return {"ok": "ok", "unresolved": "unresolved", "failed": "FAILED"}.get(verdict, verdict)


def _worst(acc: dict) -> str:
    """The deciding output's kind and its headline figure."""
    name = acc.get("worst_output")
    judged = [o for o in acc.get("outputs", []) + ((acc.get("streamed") or {}).get("outputs") or []) if o["name"] == name]
    if not judged:
        return "-"
    o = judged[0]
    if o.get("loss_points") is not None:
        from ..report.text import fixed  # the report's number formats, imported when a table is drawn

        low, high = o["loss_points_interval"]
        figure = f"{points(o['loss_points'])} [{fixed(low)}, {fixed(high)}]"
    elif o["kind"] == "embedding":
        figure = f"cos {o['cosine_similarity']:.4f}/{o['worst_cosine']:.4f}"
    elif o["kind"] == "mask":
        figure = f"IoU {o['mean_iou']:.3f}"
    else:
        figure = f"cos {o['cosine_similarity']:.4f}"
    return f"{o['name']} {o['kind']}: {figure}"


def points(loss: float) -> str:
    """A loss in percentage points in words: 'lost 0.50 pt', 'gained 0.50 pt', 'lost 0 pt' (never -0.00)."""
    rounded = round(loss, 2)
    if rounded == 0:
        return "lost 0 pt"
    return f"lost {rounded:.2f} pt" if rounded > 0 else f"gained {-rounded:.2f} pt"


def _speedup(timing: dict) -> str:
    from edgeopt_converters.cost.host_timing import speedup_text  # the one format, also the recommendation's

    speedup = timing.get("speedup")
    if speedup:
        return speedup_text(speedup["estimate"], *speedup["interval"])
    return "-" if timing.get("speedup_vs_fp32") is None else speedup_text(timing["speedup_vs_fp32"])


def _few(names, shown: int = 12) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def search_line(search: dict) -> str:
    """The repair loop's search in one line: attempts judged, the stages they came from, how it ended."""
    tries = search.get("tries") or []
    judged = [t for t in tries if t.get("verdict") not in ("not tried", "not built")]
    stages = list(dict.fromkeys(t.get("stage", "").split(" (")[0].split(":")[0] for t in tries[1:]))
    text = f"search: {len(judged)} attempts judged"
    if stages:
        text += f" ({', '.join(stages)})"
    if search.get("stopped"):
        text += f"; stopped: {search['stopped']}"
    return text + (f"; {search['result']}" if search.get("result") else "")


def phases_line(manifest: dict) -> str:
    """Where the conversion's time went: each phase's seconds, the search's against --time-budget."""
    budget = (manifest.get("options") or {}).get("time_budget")
    parts = []
    for phase, seconds in manifest["phases"].items():
        text = f"{phase} {seconds:.0f} s"
        if phase == "search" and budget:
            text += f" (--time-budget {budget:g} s)"
        parts.append(text)
    total = f"; {manifest['seconds']:.0f} s in all" if manifest.get("seconds") is not None else ""
    return ", ".join(parts) + total


def print_summary(manifest: dict, output_dir: str) -> None:
    from ..report.text import size  # "13.5 MiB": short enough for a row on one line at 100 columns

    rows = []
    for a in manifest["artifacts"]:
        acc, timing = a["accuracy"], a["host_timing"] or {}
        rows.append([
            a["key"] + (" *" if a["recommended"] else ""),
            size(a["size_bytes"]),
            _verdict(acc),
            _worst(acc),
            _fmt(acc["top1_accuracy"]),
            _fmt(timing.get("p50_ms"), "{:.3f}"),
            _speedup(timing),
        ])
    for failed in manifest.get("failed_artifacts") or []:
        rows.append([failed["key"], "-", "repaired" if failed.get("repaired") else "failed", _clip(failed["cause"], 32),
                     "-", "-", "-"])
    out = console()
    basis = manifest["recommendation"]["basis"]
    where = "measured on this host" if basis == "measured" else f"timings are from this {manifest['host']['machine']} host, not {manifest['device']}"
    out.print(table(["artifact", "size", "verdict", "worst output", "top-1 %", "p50 ms", "vs fp32 (95%)"], rows,
                    title=f"{manifest['device']}: {manifest['model']['source']} ({where}; * recommended)",
                    optional=("p50 ms", "top-1 %"), whole_lines=True))
    for o in (manifest["artifacts"][0]["accuracy"].get("outputs") or []) if manifest["artifacts"] else []:
        chosen = "given with --output-kind" if o.get("kind_source") == "given" else o.get("kind_why")
        out.print(f"output {o['name']}: judged as {o['kind']} ({chosen})", markup=False)
    for a in manifest["artifacts"]:
        if a["scheme"]:
            out.print(f"{a['key']}: {a['scheme']}", markup=False)
        if a.get("float_nodes"):
            out.print(f"{a['key']}: kept in float: {_few(a['float_nodes'])}", markup=False)
        if a.get("mixed_precision"):
            out.print(f"{a['key']}: {search_line(a['mixed_precision'])}", markup=False)
        if a["accuracy"].get("verdict") != "ok":
            out.print(f"{a['key']}: {a['accuracy'].get('verdict')}: {a['accuracy'].get('reason')}", markup=False)
    for failed in manifest.get("failed_artifacts") or []:
        repaired = f"; repaired: {failed['repaired']}" if failed.get("repaired") else ""
        out.print(f"{failed['key']}: failed: {failed['cause']}{repaired}", markup=False)
    for note in manifest["notes"]:
        out.print(f"note: {note}", markup=False)
    for warning in manifest["warnings"]:
        out.print(f"warning: {warning}", markup=False)
    if manifest.get("phases"):
        out.print(f"time: {phases_line(manifest)}", markup=False)
    rec = manifest["recommendation"]
    out.print(f"recommended: {rec['key'] or 'none'} ({rec['basis']}) — {rec['reason']}", markup=False)
    out.print(f"manifest: {output_dir}/manifest.json", markup=False)
