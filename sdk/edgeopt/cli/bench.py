"""`edgeopt bench`: benchmark a model file, or every artifact of a convert output folder, locally."""
from __future__ import annotations

import json
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import click

from edgeopt_agent.bench import BenchmarkSpec, run_benchmark
from edgeopt_agent.runners import resolve_runtime
from edgeopt_agent.wire.bench_options import BenchOptions
from edgeopt_converters.manifest import FILE_NAME as MANIFEST_FILE
from edgeopt_converters.manifest import bench_inputs, board_options
from edgeopt_converters.manifest import read as read_manifest

from ..errors import UserError
from .option_flags import option_flags
from .output import console, table


@click.command()
@click.argument("artifact", type=click.Path(path_type=Path))
@option_flags(BenchOptions)
@click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME=1,512",
              help="Shape of an input with dynamic dims (NAME= for a scalar); repeat per input. "
                   "Artifacts of an `edgeopt convert` folder take the shapes its manifest recorded.")
@click.option("--input-value", "input_values", multiple=True, metavar="NAME=16000",
              help="A constant every feed of input NAME holds (a sample rate); repeat per input.")
@click.option("--no-sensors", is_flag=True, help="Do not read this machine's power and thermal sensors.")
@click.option("--allow-invalid", is_flag=True,
              help="Exit 0 even when an artifact's outputs do not match its FP32 reference (still reported).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
def bench(artifact: Path, no_sensors: bool, as_json: bool, allow_invalid: bool,
          input_shapes: Sequence[str], input_values: Sequence[str], **options: Any) -> None:
    """Benchmark ARTIFACT (.onnx/.tflite, or a folder with manifest.json) on this machine.

    Each benchmark runs in a child process: load time and the first inference are reported
    apart, then latency percentiles, throughput, peak memory and, where this machine has a
    power sensor, energy per inference. For a convert output folder, each artifact's outputs are
    checked against its FP32 artifact's with the tolerance its conversion earned (column "outputs").
    Exits 1 when a benchmark fails or an artifact is invalid (--allow-invalid: only when one fails).
    """
    targets = collect_targets(artifact)
    given = given_inputs(input_shapes, input_values)
    specs = [_spec(path, with_board(options, entry), merge_inputs(entry, given)) for path, entry in targets]
    if artifact.is_dir():  # a convert output folder: check every artifact's outputs against its FP32 artifact
        specs = with_references(artifact, specs, [entry for _, entry in targets])
    for spec in specs:  # a missing or unrecognised file stops everything before anything runs
        resolve_runtime(spec.artifact, spec.runtime)
    sensors = None if no_sensors else local_sensors()

    results = []
    status_console = None if as_json else console(stderr=True)
    for spec, (path, entry) in zip(specs, targets):
        label = path.name
        status = status_console.status(f"{label}: starting") if hasattr(status_console, "status") else nullcontext()
        with status as live:
            update = (lambda text, live=live, label=label: live.update(f"{label}: {text}")) if live else None
            result = run_benchmark(spec, sensors=sensors, progress=update)
        if entry is not None:
            result["manifest_entry"] = entry
        results.append(result)

    if as_json:
        payload = {"artifacts": results} if artifact.is_dir() else results[0]
        click.echo(json.dumps(payload, indent=2))
    else:
        show(results)
    if not all(r["ok"] for r in results) or (not allow_invalid and not all(r.get("valid", True) for r in results)):
        click.get_current_context().exit(1)


def collect_targets(artifact: Path) -> List[Tuple[Path, Optional[Dict[str, Any]]]]:
    """(model path, manifest entry or None) for a model file or a convert output folder."""
    if not artifact.exists():
        raise UserError(f"artifact not found: {artifact}")
    if artifact.is_file():
        return [(artifact, None)]
    if not (artifact / MANIFEST_FILE).is_file():
        raise UserError(f"{artifact} is a folder without {MANIFEST_FILE}; give a .onnx/.tflite file or an `edgeopt convert` output folder")
    manifest = read_manifest(artifact, require_schema=False)
    if not manifest.artifacts:
        raise UserError(f"{manifest.path} lists no artifacts (expected an \"artifacts\" list of entries with \"path\")")
    targets = []
    for number, entry in enumerate(manifest.artifacts, start=1):
        if entry.path is None:
            raise UserError(f"{manifest.path}: artifact #{number} has no \"path\"")
        targets.append((artifact / entry.path, dict(entry.data)))
    return targets


def local_sensors():
    """This machine's sensors, when the sensors package is installed."""
    try:
        from edgeopt_agent.sensors import discover
    except ModuleNotFoundError as exc:
        if (exc.name or "").startswith("edgeopt_agent.sensors"):
            return None
        raise
    return discover()


def given_inputs(shapes: Sequence[str], values: Sequence[str]) -> Dict[str, Dict[str, Any]]:
    """--input-shape NAME=SHAPE / --input-value NAME=NUMBER as partial input descriptions by name."""
    from edgeopt_converters.source.tensors import parse_shape, parse_value, split_named

    result: Dict[str, Dict[str, Any]] = {}
    for option, items in (("--input-shape", shapes), ("--input-value", values)):
        positional, named = split_named(items, option)
        if positional:
            raise UserError(f"{option} '{positional[0]}' needs the input's name: write NAME=..., like "
                            f"{option} input_ids=1,128")
        for name, text in named.items():
            entry = result.setdefault(name, {"name": name})
            if option == "--input-shape":
                entry["shape"] = list(parse_shape(text, f"--input-shape {name}="))
            else:
                entry["value"] = parse_value(text, name)
    return result


def merge_inputs(entry: Optional[Dict[str, Any]], given: Dict[str, Dict[str, Any]]) -> Optional[List[Dict[str, Any]]]:
    """The input descriptions of one artifact: what its manifest entry recorded, overridden by
    what the command line gives (matched by the artifact's input name or the model's)."""
    recorded = bench_inputs(entry) if entry is not None else None
    if not given:
        return recorded
    merged = {d["name"]: dict(d) for d in recorded or ()}
    aliases = {d.get("alias"): d["name"] for d in recorded or () if d.get("alias")}
    for name, override in given.items():
        target = aliases.get(name, name)
        item = merged.setdefault(target, {"name": target})
        item.update({k: v for k, v in override.items() if k != "name"})
        item.setdefault("shape", [])  # a value alone is a scalar
    return list(merged.values())


def with_references(outdir: Path, specs: List[BenchmarkSpec], entries: List[Dict[str, Any]]) -> List[BenchmarkSpec]:
    import dataclasses

    from edgeopt_converters.accuracy.board_reference import build_reference

    manifest = read_manifest(outdir, require_schema=False).data
    fp32_runs: Dict[Any, Any] = {}  # the FP32 artifact runs once for all the artifacts that share its inputs
    return [dataclasses.replace(spec, reference=build_reference(outdir, manifest, entry, spec.inputs,
                                                                fp32_runs=fp32_runs))
            for spec, entry in zip(specs, entries)]


def with_board(options: Dict[str, Any], entry: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """The options for one artifact: a convert folder's artifact runs as its manifest entry planned
    for the board (runtime, engine precision, threads, fallback runtimes) unless --runtime,
    --precision or --threads say otherwise; a plain file takes the options as given."""
    if entry is None:
        return options
    values = dict(options)
    planned = board_options(entry, runtime=values.pop("runtime"), precision=values.pop("precision"),
                            threads=values.pop("threads"))
    return {**values, "runtime": None, "precision": None, "threads": None, **planned}


def _spec(path: Path, options: Dict[str, Any], inputs: Optional[List[Dict[str, Any]]] = None) -> BenchmarkSpec:
    return BenchmarkSpec(artifact=str(path), **dict(options, inputs=inputs))


def show(results: Sequence[Dict[str, Any]]) -> None:
    out = console()
    rows, problems, notes = [], [], []
    for result in results:
        name = Path(result["artifact"]).name
        if not result["ok"]:
            problems.append(f"{name}: {result['error']['kind']}: {result['error']['message']}")
        for entry in result.get("batches", []):
            if entry.get("ok"):
                rows.append(_row(name, result, entry))
            elif result["ok"]:
                problems.append(f"{name} batch {entry['batch']}: {entry['error']['kind']}: {entry['error']['message']}")
        if result["ok"]:
            notes.extend(f"{name}: {line}" for line in _notes(result) if not line.startswith(UNMEASURED))
    if rows:
        headers = ["artifact", "batch", "p50 ms", "p90 ms", "p99 ms", "inf/s", "RSS MB", "mJ/inf", "outputs"]
        out.print(table(headers, rows))
    for line in notes:
        out.print(line, markup=False)
    unmeasured = sorted({line for r in results if r["ok"] for line in _notes(r) if line.startswith(UNMEASURED)})
    for line in unmeasured:  # the same for every artifact on this machine: said once
        out.print(line, markup=False)
    for line in problems:
        click.echo(f"failed: {line}", err=True)


def _row(name: str, result: Dict[str, Any], entry: Dict[str, Any]) -> List[str]:
    lat = entry["latency_ms"]
    return [
        name,
        str(entry["batch"]),
        _num(lat["p50"]),
        _num(lat["p90"]),
        _num(lat["p99"]),
        _num(entry["throughput_ips"]),
        _num(entry.get("peak_rss_mb")),
        _num(entry.get("energy_per_inference_mj")),
        validity(result),
    ]


def validity(result: Dict[str, Any]) -> str:
    """'valid' when the outputs matched the FP32 reference, 'INVALID' when they did not or the result
    was invalid otherwise, '-' when nothing checked them."""
    if not result.get("valid", True):
        return "INVALID"
    return "valid" if result.get("output_check") else "-"


def _notes(result: Dict[str, Any]) -> List[str]:
    backend = ", ".join(result.get("providers") or []) or ("XNNPACK" if result.get("xnnpack") else "")
    lines = [
        f"{result['runtime']} {result.get('runtime_version') or ''} {f'({backend}) ' if backend else ''}"
        f"threads {result['threads']}, load {_num(result.get('load_ms'))} ms, "
        f"first inference {_num(result.get('first_inference_ms'))} ms, {result['runs']} runs, "
        f"latency mean {_num(result['latency_ms']['mean'])} ± {_num(result['latency_ms']['std'])} ms, "
        f"model +{_num(result.get('model_rss_mb'))} MB RSS, "
        f"output sha256 {str(result.get('output_sha256'))[:16]}"
    ]
    if "latency_budget_ms" in result:
        best = result.get("max_batch_within_budget")
        lines.append(
            f"largest batch with p90 <= {result['latency_budget_ms']:g} ms: {best}" if best is not None else result["budget_reason"]
        )
    if result.get("avg_power_w") is not None:
        lines.append(
            f"power {result['avg_power_w']:.2f} W ({result.get('power_source')}, {result.get('power_rail') or 'total'}), "
            f"idle {_num(result.get('idle_power_w'))} W"
        )
    else:
        lines.append(f"{UNMEASURED} ({result.get('power_reason')})")
    check = result.get("output_check")
    if check:
        lines.append(f"outputs vs FP32 reference ({check['samples']} samples): " + ", ".join(
            f"{o['name']} cosine {_num(o.get('cosine'))} max error {_num(o.get('max_abs_error'))}"
            + (f" argmax {_num(o['argmax_agreement'])}" if o.get("argmax_agreement") is not None else "")
            + ("" if o["ok"] else " MISMATCH") for o in check["outputs"]))
    if not result.get("valid", True):
        lines.append("INVALID: " + "; ".join(result["invalid_reasons"]))
    lines.extend(result.get("notes") or [])
    return lines


UNMEASURED = "power: not measured on this machine"


def _num(value: Optional[float]) -> str:
    """Short and still telling: 1234, 12.35, 0.00436."""
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"
