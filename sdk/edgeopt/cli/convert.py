"""`edgeopt convert MODEL --device NAME -o OUTDIR`."""
from __future__ import annotations

import json

import click

from edgeopt_agent.runtimes import FORMATS, PRECISIONS

from .output import console, table

MODEL_HELP = """MODEL is one of: path/to/file.py:factory (a function returning an nn.Module), a TorchScript
file, an ExportedProgram .pt2, an .onnx file, or example:digits-cnn (bundled)."""


@click.command(help=f"Quantize and export a model for a target board.\n\n{MODEL_HELP}")
@click.argument("model")
@click.option("-d", "--device", required=True, help="Target board profile (see `edgeopt devices`).")
@click.option("-o", "--output", "output_dir", default="edgeopt-out", show_default=True,
              type=click.Path(file_okay=False), help="Folder for the artifacts and manifest.json.")
@click.option("--input-shape", "input_shapes", multiple=True, metavar="[NAME=]1,3,224,224",
              help="Input shape, NAME=SHAPE for a named input (NAME= or NAME=scalar: a scalar); repeat per "
                   "input. Dims the model declares are read from it: give only the dynamic ones' inputs.")
@click.option("--input-dtype", "input_dtypes", multiple=True, metavar="[NAME=]float32",
              help="Input dtype: one for all inputs, one per input in order, or NAME=DTYPE.")
@click.option("--input-value", "input_values", multiple=True, metavar="NAME=16000",
              help="A constant argument (a TorchScript int, a Python float), baked into the export; "
                   "for an ONNX input, the value it is always fed.")
@click.option("--calibration", type=click.Path(dir_okay=False), multiple=True,
              help=".npy, or .npz keyed by input name, with representative inputs for INT8 calibration: "
                   "an array [N, *input_shape] holds N samples (batch-first [N, *input_shape[1:]] also works); repeat "
                   "for files of other shapes (sequence lengths) to calibrate over each.")
@click.option("--eval-data", type=click.Path(dir_okay=False),
              help="Like --calibration, plus optional integer `labels` for the accuracy check: class indices [N], "
                   "or for a CTC output the true symbols [N, L] padded with -1.")
@click.option("--format", "formats", multiple=True, type=click.Choice(FORMATS),
              help="Override the profile's formats (repeatable).")
@click.option("--precision", "precisions", multiple=True, type=click.Choice(PRECISIONS),
              help="Override the profile's precisions (repeatable).")
@click.option("--max-accuracy-drop", type=float, metavar="POINTS",
              help="Fail when any artifact loses more than this many percentage points against FP32.")
@click.option("--min-cosine", type=float, metavar="X",
              help="Fail when any artifact's outputs have a cosine similarity to FP32 below X (any output kind).")
@click.option("--output-kind", "output_kinds", multiple=True, metavar="NAME=KIND",
              help="How an output is judged (repeatable): classes, detection, embedding, probability, regression, "
                   "sequence, ctc, mask, state. Inferred from name, shape and values when not given.")
@click.option("--state", "state_pairs", multiple=True, metavar="INPUT=OUTPUT",
              help="A recurrent state the model returns and takes back (repeatable); stateful models are judged "
                   "streamed, each artifact fed its own state. Detected from names and shapes when not given.")
@click.option("--stream-steps", type=click.IntRange(min=2), default=64, show_default=True,
              help="Steps a stateful model is streamed through (at most the evaluation samples).")
@click.option("--metric", metavar="FILE.py:FN",
              help="Your own metric: FN(reference, candidate, labels) -> number, higher is better; outputs come "
                   "as {name: array}.")
@click.option("--max-metric-drop", type=float, metavar="X", help="Fail when an artifact's --metric is more than X below FP32's.")
@click.option("--threads", type=click.IntRange(min=1), help="Threads for host timing (default: the profile's, capped at this machine's cores).")
@click.option("--calibrate-method", type=click.Choice(["minmax", "entropy", "percentile"]), default="minmax",
              show_default=True,
              help="How ONNX INT8 activation ranges are chosen: minmax (each tensor's range), percentile "
                   "(99.999% of its values), entropy (onnxruntime's KL calibrator at its defaults, which "
                   "keeps the whole range, symmetric about 0).")
@click.option("--weights", type=click.Path(dir_okay=False), help="state_dict for a file.py:factory model (loaded with weights_only=True).")
@click.option("--trust-model-code", is_flag=True,
              help="Load a TorchScript MODEL, which runs code when loaded: only for files from a source you trust.")
@click.option("--no-mixed-precision", is_flag=True,
              help="Keep a failed INT8 as it is instead of keeping its most sensitive nodes in float until it passes.")
@click.option("--strict", is_flag=True,
              help="Fail the conversion when any artifact cannot be built or run (by default it is listed as "
                   "failed with its cause and the others go on).")
@click.option("--no-timing", is_flag=True, help="Skip the host timing (the recommendation then falls back to the profile's prediction).")
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON instead of the summary table.")
def convert(model, device, output_dir, input_shapes, input_dtypes, input_values, calibration, eval_data, formats, precisions,
            max_accuracy_drop, min_cosine, output_kinds, state_pairs, stream_steps, metric, max_metric_drop, threads,
            calibrate_method, weights, trust_model_code, no_mixed_precision, strict, no_timing, as_json):
    from edgeopt.api import convert as run
    from edgeopt_converters.progress import ProgressReporter, terminal_progress

    reporter = ProgressReporter() if as_json else terminal_progress()
    kwargs = dict(
        input_shape=list(input_shapes) or None, input_dtype=list(input_dtypes) or None,
        input_value=list(input_values) or None,
        calibration=list(calibration) or None, eval_data=eval_data, formats=formats, precisions=precisions,
        max_accuracy_drop=max_accuracy_drop, min_cosine=min_cosine, output_kinds=list(output_kinds),
        state=list(state_pairs), stream_steps=stream_steps, metric=metric, max_metric_drop=max_metric_drop,
        threads=threads, calibrate_method=calibrate_method,
        weights=weights, trust_model_code=trust_model_code, time_on_host=not no_timing, mixed_precision=not no_mixed_precision,
        strict=strict, progress=reporter,
    )
    if as_json:
        manifest = run(model, device, output_dir, **kwargs)
        click.echo(json.dumps(manifest, indent=2))
        return
    with reporter:
        manifest = run(model, device, output_dir, **kwargs)
    print_summary(manifest, output_dir)


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
    speedup = timing.get("speedup")
    if speedup:
        low, high = speedup["interval"]
        return f"{speedup['estimate']:.2f}x [{low:.2f}, {high:.2f}]"
    return _fmt(timing.get("speedup_vs_fp32"), "{:.2f}x")


def print_summary(manifest: dict, output_dir: str) -> None:
    rows = []
    for a in manifest["artifacts"]:
        acc, timing = a["accuracy"], a["host_timing"] or {}
        rows.append([
            ("* " if a["recommended"] else "  ") + a["key"],
            f"{a['size_bytes'] / 1024:.0f} KiB",
            _verdict(acc),
            _worst(acc),
            _fmt(acc["top1_accuracy"]),
            _fmt(timing.get("p50_ms"), "{:.3f}"),
            _speedup(timing),
        ])
    for failed in manifest.get("failed_artifacts") or []:
        rows.append(["  " + failed["key"], "-", "failed", _clip(failed["cause"], 40), "-", "-", "-"])
    out = console()
    basis = manifest["recommendation"]["basis"]
    where = "measured on this host" if basis == "measured" else f"timings are from this {manifest['host']['machine']} host, not {manifest['device']}"
    out.print(table(["artifact", "size", "verdict", "worst output", "top-1 %", "p50 ms", "vs fp32 (95%)"], rows,
                    title=f"{manifest['device']}: {manifest['model']['source']} ({where})"))
    for a in manifest["artifacts"]:
        if a["scheme"]:
            out.print(f"{a['key']}: {a['scheme']}", markup=False)
        if a.get("float_nodes"):
            out.print(f"{a['key']}: kept in float: {', '.join(a['float_nodes'])}", markup=False)
        if a["accuracy"].get("verdict") != "ok":
            out.print(f"{a['key']}: {a['accuracy'].get('verdict')}: {a['accuracy'].get('reason')}", markup=False)
    for failed in manifest.get("failed_artifacts") or []:
        out.print(f"{failed['key']}: failed: {failed['cause']}", markup=False)
    for note in manifest["notes"]:
        out.print(f"note: {note}", markup=False)
    for warning in manifest["warnings"]:
        out.print(f"warning: {warning}", markup=False)
    rec = manifest["recommendation"]
    out.print(f"recommended: {rec['key'] or 'none'} ({rec['basis']}) — {rec['reason']}", markup=False)
    out.print(f"manifest: {output_dir}/manifest.json", markup=False)
