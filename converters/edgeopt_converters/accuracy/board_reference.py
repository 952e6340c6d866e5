"""The `reference` a deploy (and `edgeopt bench OUTDIR`) carries: what the FP32 artifact computes
on a few seeded inputs, kept small, with per-output tolerances the artifact earned.

The board makes the same inputs (edgeopt_agent.bench.reference.reference_feeds: the same real
values for a float input and for a quantized one, which the runner quantizes), runs its artifact
and marks a result whose outputs disagree invalid (`output_mismatch`). The tolerances come from
the conversion itself: `record_reference_figures` runs each artifact on these very inputs while
converting and stores how far it was from FP32 (`reference_figures` in its manifest entry); the
board may then be EARNED_MARGIN times as far, plus a slack for another CPU's rounding (CPU_SLACK
of cosine, ERROR_SLACK of the output's range). So a correct artifact passes on any board, and one
that computes something else (a wrong kernel, a changed file) fails. A manifest without those figures (an older convert, other input shapes)
falls back to the verdicts' figures, widened by a run of the artifact on this host.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from edgeopt_agent.bench.reference import plan_stride, reduce_output, reference_feeds, row_argmax, run_reference

from ..manifest import bench_inputs
from ..manifest import read as read_manifest

log = logging.getLogger(__name__)

SAMPLES = 4
SEED = 20261124
FP32_MIN_COSINE = 0.9999
FP32_RELATIVE_ERROR = 1e-3  # of the output's largest magnitude: another CPU's float rounding
EARNED_MARGIN = 2.0  # how many times its own gap from FP32 on the reference inputs an artifact may show
CPU_SLACK = 1e-3  # cosine an artifact may lose on another CPU beyond its own gap (other kernels, rounding)
ERROR_SLACK = 0.02  # of the output's largest magnitude: a quantized output's last step on another CPU
ARGMAX_SLACK = 0.25  # argmax agreement below what the artifact reached at conversion
QUANTIZED_COSINE_FLOOR = 0.5  # fallback only (no recorded figures): the least a tolerance accepts
MARGIN = 4.0  # fallback only: how many times the conversion's gap on its evaluation data the board may show
HOST_MARGIN = 2.0  # fallback only: how many times the artifact's own gap on these inputs, measured on this host


def build_reference(outdir: Path, manifest: Mapping[str, Any], entry: Mapping[str, Any],
                    inputs: Optional[Sequence[Mapping[str, Any]]], samples: int = SAMPLES,
                    seed: int = SEED, host_run: bool = True,
                    fp32_runs: Optional[Dict[Any, Any]] = None) -> Optional[Dict[str, Any]]:
    """The reference for `entry`, or None (with a log line) when no FP32 artifact can compute it here.
    `host_run=False` leaves the fallback tolerances as the verdicts make them; `fp32_runs` (a dict
    the caller keeps) runs the FP32 artifact once for all the entries that share its inputs."""
    computed = _fp32_outputs(outdir, manifest, entry, inputs, samples, seed, fp32_runs)
    if computed is None:
        return None
    fp32_names, produced, ranges = computed
    names = _output_names(entry, fp32_names)
    verdicts = _verdicts(entry, names)
    earned = _earned_figures(entry, inputs, samples, seed)
    outputs = []
    for fp32_name, name in zip(fp32_names, names):
        values = [np.asarray(p[fp32_name]) for p in produced]
        stride = plan_stride(values[0].size)
        reduced = [reduce_output(v, stride, values[0].size) for v in values]
        verdict = verdicts.get(name, {})
        item: Dict[str, Any] = {"name": name, "stride": stride, "values": [[float(x) for x in r] for r in reduced]}
        classes = verdict.get("kind") == "classes"
        if classes:
            item["argmax"] = [row_argmax(v) for v in values]
        scale = max(float(np.max(np.abs(r))) if r.size else 0.0 for r in reduced)
        if earned is not None and name in earned:
            item["tolerance"] = earned_tolerance(entry.get("precision"), earned[name], scale, classes)
        else:
            item["tolerance"] = tolerance(entry.get("precision"), verdict, scale)
        outputs.append(item)
    reference = {"seed": seed, "samples": samples, "outputs": outputs}
    if ranges:
        reference["ranges"] = ranges
    if earned is None and host_run:
        _widen_by_host_run(outdir, entry, reference, inputs)
    return reference


def record_reference_figures(outdir: Path, manifest: Dict[str, Any]) -> None:
    """For each artifact that runs here and is not FP32: its outputs against the FP32 artifact's on
    the seeded reference inputs a board will get, stored as the entry's `reference_figures`."""
    fp32_runs: Dict[Any, Any] = {}
    for entry in manifest.get("artifacts") or []:
        if entry.get("precision") == "fp32" or not entry.get("path"):
            continue
        try:
            _record_figures(outdir, manifest, entry, fp32_runs)
        except Exception as exc:  # the artifacts stand; a board then judges this one by its verdicts' figures
            log.debug("reference figures for %s", entry.get("key"), exc_info=True)
            cause = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
            manifest.setdefault("warnings", []).append(
                f"{entry.get('key')}: no reference figures for the board's output check ({type(exc).__name__}: "
                f"{cause}); a board judges it by its verdicts' figures")


def _record_figures(outdir: Path, manifest: Dict[str, Any], entry: Dict[str, Any], fp32_runs: Dict[Any, Any]) -> None:
    inputs = bench_inputs(entry)
    reference = build_reference(outdir, manifest, entry, inputs, host_run=False, fp32_runs=fp32_runs)
    if reference is None:
        return
    check = _check_here(outdir, entry, reference, inputs, "a board will judge it by its verdicts' figures")
    if check is None:
        return
    entry["reference_figures"] = {
        "seed": SEED, "samples": SAMPLES, "inputs": inputs,
        "outputs": [{k: o.get(k) for k in ("name", "cosine", "max_abs_error", "argmax_agreement")}
                    for o in check["outputs"]],
    }


def earned_tolerance(precision: Optional[str], figures: Mapping[str, Any], scale: float,
                     classes: bool) -> Dict[str, Optional[float]]:
    """How far the board's output may be from FP32's: what the artifact itself was on these inputs
    when converted (its cosine, max error, argmax agreement), EARNED_MARGIN times, plus the slacks."""
    if precision == "fp32":
        return tolerance(precision, {"kind": "classes" if classes else None}, scale)
    cosine = _number(figures.get("cosine"))
    error = _number(figures.get("max_abs_error"))
    agreement = _number(figures.get("argmax_agreement"))
    gap = 1.0 - cosine if cosine is not None else None
    return {
        "min_cosine": None if gap is None else round(max(0.0, 1.0 - max(EARNED_MARGIN * gap, gap + CPU_SLACK)), 6),
        "max_abs_error": None if error is None else round(max(EARNED_MARGIN * error, error + ERROR_SLACK * scale), 9),
        "min_argmax_agreement": round(agreement - ARGMAX_SLACK, 6) if classes and agreement is not None
        and agreement > ARGMAX_SLACK else None,
    }


def _earned_figures(entry: Mapping[str, Any], inputs, samples: int, seed: int) -> Optional[Dict[str, Mapping[str, Any]]]:
    """The entry's recorded figures by output name, when they were measured on these very inputs."""
    figures = entry.get("reference_figures")
    if not isinstance(figures, dict) or figures.get("seed") != seed or figures.get("samples") != samples:
        return None
    if _canonical(figures.get("inputs")) != _canonical(inputs):
        return None
    outputs = figures.get("outputs")
    if not isinstance(outputs, list):
        return None
    return {o["name"]: o for o in outputs if isinstance(o, dict) and isinstance(o.get("name"), str)}


def _canonical(inputs: Any) -> Any:
    if not inputs:
        return None
    return sorted((sorted(d.items()) if isinstance(d, dict) else d for d in inputs), key=repr)


def _fp32_outputs(outdir: Path, manifest: Mapping[str, Any], entry: Mapping[str, Any], inputs, samples: int, seed: int,
                  runs: Optional[Dict[Any, Any]] = None):
    """(the FP32 artifact's output names, its outputs per sample, the input ranges), or None; from
    `runs` where the same FP32 artifact already ran on the same inputs."""
    fp32 = _fp32_entry(manifest, entry)
    if fp32 is None:
        log.warning("no FP32 artifact in the manifest: the board's outputs go unchecked")
        return None
    key = (fp32["path"], json.dumps(inputs, sort_keys=True), json.dumps(input_ranges(entry), sort_keys=True),
           samples, seed)
    if runs is not None and key in runs:
        return runs[key]
    computed = _run_fp32(outdir, fp32, entry, inputs, samples, seed)
    if runs is not None:
        runs[key] = computed
    return computed


def _run_fp32(outdir: Path, fp32: Mapping[str, Any], entry: Mapping[str, Any], inputs, samples: int, seed: int):
    from edgeopt_agent.errors import UserError
    from edgeopt_agent.runners import open_runner

    try:
        runner = open_runner(str(Path(outdir) / fp32["path"]), threads=1)
        runner.load()
    except (UserError, RuntimeError, OSError) as exc:
        log.warning("cannot run the FP32 artifact here (%s): the board's outputs go unchecked", exc)
        return None
    ranges = input_ranges(entry)
    try:
        fp32_names = [o.name for o in runner.outputs()]
        produced = [runner.infer(reference_feeds(runner.inputs(), inputs, seed, s, ranges)) for s in range(samples)]
    finally:
        runner.close()
    return fp32_names, produced, ranges


def tolerance(precision: Optional[str], verdict: Mapping[str, Any], scale: float) -> Dict[str, Optional[float]]:
    """How far the board's output may be from FP32's: FP32 by float rounding only; others, where no
    figures were recorded on the reference inputs, by the conversion's gap on its evaluation data
    (its worst cosine, its max error) times MARGIN."""
    classes = verdict.get("kind") == "classes"
    if precision == "fp32":
        return {"min_cosine": FP32_MIN_COSINE, "max_abs_error": round(FP32_RELATIVE_ERROR * scale + 1e-5, 9),
                "min_argmax_agreement": 0.75 if classes else None}
    cosine = _number(verdict.get("worst_cosine")) or _number(verdict.get("cosine_similarity")) or 0.99
    error = _number(verdict.get("max_abs_error"))
    return {
        "min_cosine": round(max(QUANTIZED_COSINE_FLOOR, 1.0 - max(MARGIN * (1.0 - cosine), 0.01)), 6),
        "max_abs_error": round(max(MARGIN * error, 0.1 * scale), 9) if error is not None else None,
        "min_argmax_agreement": 0.5 if classes else None,
    }


def _check_here(outdir: Path, entry: Mapping[str, Any], reference: Mapping[str, Any], inputs,
                unchecked: str) -> Optional[Dict[str, Any]]:
    """The entry's artifact run here on the reference's inputs and compared with it, as a board does
    (`run_reference`); None, with a log line saying what follows (`unchecked`), where it does not run."""
    from edgeopt_agent.errors import UserError
    from edgeopt_agent.runners import open_runner

    try:
        runner = open_runner(str(Path(outdir) / entry["path"]), threads=1)
        runner.load()
    except (UserError, RuntimeError, OSError) as exc:
        log.info("%s does not run here (%s): %s", entry.get("key"), exc, unchecked)
        return None
    try:
        return run_reference(runner, reference, inputs)
    finally:
        runner.close()


def _widen_by_host_run(outdir: Path, entry: Mapping[str, Any], reference: Dict[str, Any], inputs) -> None:
    """Where the artifact itself runs here, make room for what it does on these very inputs: a
    random input lies outside the calibration data, so INT8 may drift more than the verdicts saw."""
    if entry.get("precision") == "fp32":
        return
    check = _check_here(outdir, entry, reference, inputs, "its tolerances come from the verdicts alone")
    if check is None:
        return
    for item, seen in zip(reference["outputs"], check["outputs"]):
        limits = item["tolerance"]
        if seen.get("cosine") is not None:
            limits["min_cosine"] = round(max(QUANTIZED_COSINE_FLOOR, min(
                limits["min_cosine"], 1.0 - HOST_MARGIN * (1.0 - seen["cosine"]))), 6)
        if seen.get("max_abs_error") is not None and limits.get("max_abs_error") is not None:
            limits["max_abs_error"] = round(max(limits["max_abs_error"], HOST_MARGIN * seen["max_abs_error"]), 9)
        if seen.get("argmax_agreement") is not None and limits.get("min_argmax_agreement") is not None:
            floor = seen["argmax_agreement"] - 0.25  # where the host itself flips most argmaxes, they say nothing
            limits["min_argmax_agreement"] = round(min(limits["min_argmax_agreement"], floor), 6) if floor > 0 else None


def input_ranges(entry: Mapping[str, Any]) -> Dict[str, List[float]]:
    """For each quantized 8-bit input of the artifact, the part of [0, 1) it represents (all of
    its range where they do not overlap): data outside it saturates, and INT8 would be judged on
    inputs it was never calibrated for. For a float input, the range its evaluation data held."""
    ranges = {}
    for item in entry.get("inputs") or []:
        q = item.get("quantization") if isinstance(item, dict) else None
        seen = item.get("data_range") if isinstance(item, dict) else None
        if not isinstance(q, dict) or item.get("dtype") not in ("int8", "uint8"):
            if _is_range(seen) and str(item.get("dtype", "")).startswith("float"):
                ranges[item["name"]] = [round(float(seen[0]), 9), round(float(seen[1]), 9)]  # what the data fed
            continue
        info = np.iinfo(np.dtype(item["dtype"]))
        low, high = q["scale"] * (info.min - q["zero_point"]), q["scale"] * (info.max - q["zero_point"])
        inside = (max(low, 0.0), min(high, 1.0))
        chosen = inside if inside[1] - inside[0] > 0.1 * (high - low) else (low, high)
        ranges[item["name"]] = [round(float(chosen[0]), 9), round(float(chosen[1]), 9)]
    return ranges


def _is_range(value: Any) -> bool:
    return (isinstance(value, list) and len(value) == 2 and all(_number(v) is not None for v in value)
            and value[0] <= value[1])


def _fp32_entry(manifest: Mapping[str, Any], entry: Mapping[str, Any]) -> Optional[Mapping[str, Any]]:
    candidates = [e for e in manifest.get("artifacts") or [] if isinstance(e, dict)
                  and e.get("precision") == "fp32" and e.get("format") in ("onnx", "tflite") and e.get("path")]
    same_format = [e for e in candidates if e.get("format") == entry.get("format")]
    onnx = [e for e in candidates if e.get("format") == "onnx"]
    chosen = (onnx or same_format or candidates)
    return chosen[0] if chosen else None


def _output_names(entry: Mapping[str, Any], fp32_names: List[str]) -> List[str]:
    """The target artifact's output names, in the FP32 artifact's order (by position where they differ)."""
    listed = [o.get("name") for o in entry.get("outputs") or [] if isinstance(o, dict)]
    if len(listed) != len(fp32_names) or set(listed) == set(fp32_names):
        return fp32_names
    return listed


def _verdicts(entry: Mapping[str, Any], names: Sequence[str]) -> Dict[str, Mapping[str, Any]]:
    """The conversion's verdict per output name; by position where the artifact renamed its outputs
    (a TFLite file's serving_default_output_0 for the model's `logits`)."""
    accuracy = entry.get("accuracy") if isinstance(entry.get("accuracy"), dict) else {}
    judged = [o for o in accuracy.get("outputs") or [] if isinstance(o, dict) and "name" in o]
    by_name = {o["name"]: o for o in judged}
    if not set(names) & set(by_name) and len(judged) == len(names):
        return dict(zip(names, judged))
    return by_name


def _number(value: Any) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value) else None


def reference_for_artifact(outdir: Path, key: str, inputs: Optional[Sequence[Mapping[str, Any]]]) -> Optional[Dict[str, Any]]:
    """The reference for artifact `key` of a convert output folder (its manifest already checked)."""
    manifest = read_manifest(outdir, require_schema=False).data
    entry = next(e for e in manifest["artifacts"] if e.get("key") == key)
    return build_reference(Path(outdir), manifest, entry, inputs)
