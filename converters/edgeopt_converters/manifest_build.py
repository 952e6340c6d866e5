"""What a conversion writes into OUTDIR/manifest.json (the format itself: manifest.py), and publishing it."""
from __future__ import annotations

import datetime as _dt
import os
import platform
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

import numpy as np

from edgeopt_agent.errors import UserError
from edgeopt_agent.files import sha256_file

from . import manifest
from .accuracy import Accuracy
from .cost.host_timing import HostTiming
from .cost.timing_evidence import host_simd, predicted_entries
from .options import RECOMMEND_BUDGET
from .recipe import PlannedArtifact, board_config
from .runtime import match_inputs
from .source.tensors import feed_batch

if TYPE_CHECKING:
    from .context import ConversionContext

_TOOLS = ("edgeopt", "torch", "onnx", "onnxruntime", "onnxscript", "litert-torch", "ai-edge-litert", "numpy")


@dataclass
class ArtifactRecord:
    planned: PlannedArtifact
    path: str  # relative to OUTDIR
    accuracy: Accuracy
    io: Dict[str, List[dict]]  # {"inputs": [...], "outputs": [...]}: name, shape, dtype, quantization
    dynamic_batch: bool = False
    host_timing: Optional[HostTiming] = None
    info: Dict[str, Any] = field(default_factory=dict)  # what the steps report: scheme, float nodes, weights, ...
    not_quantized: bool = False  # an INT8 artifact whose weights are not ~4x smaller than FP32's

    @property
    def scheme(self) -> Optional[str]:
        return self.info.get("scheme") or (self.planned.int8.scheme if self.planned.int8 else None)


def tool_versions() -> Dict[str, Optional[str]]:
    versions: Dict[str, Optional[str]] = {"python": platform.python_version()}
    for name in _TOOLS:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def fed_shapes_by_artifact(ctx: "ConversionContext", records) -> Dict[str, Dict[str, list]]:
    """Each artifact's inputs, by its own input names, at the shapes validation fed them (the manifest's
    `example_shape`): what the roofline costs, as `edgeopt analyze` does from the manifest."""
    validated = ctx.evaluation.feed_shapes(feed_batch(ctx.specs))
    return {r.planned.key: {i["name"]: i["example_shape"] for i in described_inputs(r.io["inputs"], ctx.specs, validated)
                            if i.get("example_shape") is not None}
            for r in records}


def data_facts(data) -> Dict[str, Dict[str, Any]]:
    """What the evaluation data fed each input, for a board to feed alike: `value` where every sample held
    one value (a sample rate, a zero initial state), else a float input's `data_range` [low, high]."""
    parts = getattr(data, "parts", None) or [data]
    facts: Dict[str, Dict[str, Any]] = {}
    for name in parts[0].arrays:
        arrays = [np.asarray(p.arrays[name]) for p in parts if name in p.arrays]
        if not all(a.size for a in arrays):
            continue
        first = arrays[0].flat[0]
        if arrays[0].dtype.kind in "biuf" and all(np.all(a == first) for a in arrays):
            facts[name] = {"value": first.item()}
        elif arrays[0].dtype.kind == "f" and all(np.isfinite(a).all() for a in arrays):
            facts[name] = {"data_range": [float(min(a.min() for a in arrays)), float(max(a.max() for a in arrays))]}
    return facts


def described_inputs(io_inputs: List[dict], specs, shapes: Dict[str, tuple],
                     ranges: Optional[Dict[str, Tuple[tuple, tuple]]] = None,
                     facts: Optional[Dict[str, Dict[str, Any]]] = None) -> List[dict]:
    """The artifact's inputs with what feeding them takes: the model's name for each
    (`model_input`), the shape validated (`example_shape`), the smallest and largest shapes the
    data held where they differ from it (`min_shape`, `max_shape`), a constant's `value` (given, or
    the one value the data held: `value_from` "data") and a float input's `data_range`."""
    by_name = {s.name: s for s in specs}
    mapping = match_inputs([i["name"] for i in io_inputs], [s.name for s in specs])
    described = []
    for item in io_inputs:
        entry = dict(item)
        spec = by_name.get(mapping.get(item["name"], ""))
        if spec is not None:
            entry["model_input"] = spec.name
            entry["example_shape"] = list(shapes.get(spec.name, spec.shape))
            low, high = (ranges or {}).get(spec.name, (None, None))
            if low is not None and (list(low) != entry["example_shape"] or list(high) != entry["example_shape"]):
                entry["min_shape"], entry["max_shape"] = list(low), list(high)
            if spec.is_constant:
                entry["value"] = spec.value
            elif "value" in (facts or {}).get(spec.name, {}):
                entry.update(value=facts[spec.name]["value"], value_from="data")
            elif "data_range" in (facts or {}).get(spec.name, {}):
                entry["data_range"] = facts[spec.name]["data_range"]
        described.append(entry)
    return described


def _artifact_entry(record: ArtifactRecord, work: Path, fp32_p50: Dict[str, float], recommended: Optional[str],
                    specs=(), shapes: Optional[Dict[str, tuple]] = None,
                    ranges: Optional[Dict[str, Tuple[tuple, tuple]]] = None, profile=None,
                    facts: Optional[Dict[str, Dict[str, Any]]] = None) -> Dict[str, Any]:
    path = work / record.path
    item = record.planned
    entry: Dict[str, Any] = {
        "key": item.key,
        "path": record.path,
        "format": item.format,
        "precision": item.precision,
        "scheme": record.scheme,
        "why": item.why,
        "steps": record.info.get("steps", []),
        "preprocess": record.info.get("preprocess", []),
        "float_nodes": record.info.get("float_nodes", []),
        "float_nodes_guarded": record.info.get("float_nodes_guarded", 0),
        "mixed_precision": record.info.get("mixed_precision"),
        "quantizer_repair": record.info.get("quantizer_repair"),
        "weights": record.info.get("weights"),
        "fp16_sensitive_nodes": record.info.get("fp16_sensitive_nodes"),
        "not_quantized": record.not_quantized,
        "sha256": sha256_file(path),
        "size_bytes": path.stat().st_size,
        "inputs": described_inputs(record.io["inputs"], specs, shapes or {}, ranges, facts),
        "outputs": record.io["outputs"],
        "dynamic_batch": record.dynamic_batch,
        "accuracy": record.accuracy.to_dict(),
        "host_timing": None,
        "recommended": item.key == recommended,
        # How the board runs it (runtime, engine precision, threads, fallbacks): what
        # deploy sends and `edgeopt bench OUTDIR` uses; see manifest.board_options.
        "board": board_config(profile, item) if profile is not None else None,
    }
    if record.host_timing is not None:
        timing = record.host_timing.to_dict()
        base = fp32_p50.get(item.format)
        speedup = record.host_timing.speedup
        # Paired per-round ratios where there are some (drift cancels); FP32 against itself is 1.
        timing["speedup_vs_fp32"] = round(speedup.estimate, 3) if speedup else (
            round(base / record.host_timing.p50_ms, 3) if base else None)
        entry["host_timing"] = timing
    return entry


def _model_inputs(ctx) -> List[dict]:
    """Every input of the model as used, with the shape the model itself declares (-1: dynamic)."""
    declared = {s.name: s.shape for s in ctx.source.input_specs}
    inputs = []
    for spec in ctx.model_specs or ctx.specs:
        entry = spec.to_dict()
        if declared.get(spec.name) is not None:
            entry["declared_shape"] = list(declared[spec.name])
        inputs.append(entry)
    return inputs


def shape_ranges(shape_sets: List[Dict[str, tuple]]) -> Dict[str, Tuple[tuple, tuple]]:
    """Per input, the smallest and largest size of each axis over the shape sets the data held."""
    ranges: Dict[str, Tuple[tuple, tuple]] = {}
    for shapes in shape_sets:
        for name, shape in shapes.items():
            low, high = ranges.get(name, (tuple(shape), tuple(shape)))
            if len(low) != len(shape):
                continue
            ranges[name] = (tuple(map(min, low, shape)), tuple(map(max, high, shape)))
    return ranges


def build_manifest(ctx: ConversionContext, records: List[ArtifactRecord], recommendation, stands_for_target: Tuple[bool, str] = (False, ""),
                   predicted_ms: Optional[Dict[str, float]] = None) -> Dict[str, Any]:
    """stands_for_target: (whether host timings say how fast the target is, why not); predicted_ms:
    the roofline's latency on the board by artifact key, recorded per artifact as `predicted`."""
    fp32_p50 = {r.planned.format: r.host_timing.p50_ms for r in records
                if r.planned.precision == "fp32" and r.host_timing is not None}
    profile, opts = ctx.profile, ctx.options
    validated = ctx.evaluation.feed_shapes(feed_batch(ctx.specs))
    predicted = predicted_entries([(r.planned.key, r.planned.format, r.planned.precision) for r in records],
                                  predicted_ms or {})
    facts = {} if ctx.evaluation.is_random else data_facts(ctx.evaluation)
    content = {
        "schema": manifest.SCHEMA,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "model": {
            "source": ctx.source.description,
            "kind": ctx.source.kind,
            "sha256": ctx.source.sha256,
            "inputs": _model_inputs(ctx),
        },
        "input_shapes": {  # the shapes each input was fed with, per data file of other shapes
            "calibration": [{k: list(v) for k, v in shapes.items()}
                            for shapes in ctx.calibration.shapes(feed_batch(ctx.specs))],
            "evaluation": [{k: list(v) for k, v in validated.items()}],
        },
        "device": profile.name,
        "profile": {
            "name": profile.name,
            "description": profile.description,
            "cpu": f"{profile.cpu.cores}x {profile.cpu.model} ({profile.cpu.arch})",
            "runtimes": list(profile.runtimes),
            "default_threads": profile.default_threads,
        },
        "host": {
            "machine": platform.machine(),
            "matches_target": profile.matches_host(),
            "stands_for_target": stands_for_target[0],
            "not_target_because": stands_for_target[1],
            "simd": host_simd(),
            "threads": ctx.threads,
        },
        "tool_versions": tool_versions(),
        "options": {
            "formats": list(opts.formats),
            "precisions": list(opts.precisions),
            "calibrate_method": opts.calibrate_method,
            "max_accuracy_drop": opts.max_accuracy_drop,
            "recommend_budget": RECOMMEND_BUDGET,
            "output_kinds": dict(opts.output_kinds),
            "state_pairs": dict(ctx.judging.state_pairs) if ctx.judging else {},
            "metric": opts.metric,
            "max_metric_drop": opts.max_metric_drop,
            "opset": opts.opset,
            "time_budget": opts.time_budget,
        },
        "calibration": {"source": ctx.calibration.source, "samples": ctx.calibration.size, "random": ctx.calibration.is_random},
        "evaluation": {
            "source": ctx.evaluation.source,
            "samples": ctx.evaluation.size,
            "labels": ctx.evaluation.labels is not None,
            "random": ctx.evaluation.is_random,
        },
        "recommended": recommendation.key,
        "recommendation": recommendation.to_dict(),
        "notes": list(ctx.notes),
        "warnings": list(ctx.warnings),
        "failed_artifacts": list(ctx.failed),  # {key, format, precision, cause[, step, repaired]}: built or run, they failed
        "phases": ctx.clock.totals(),  # seconds per phase; --time-budget limits "search"
        "seconds": round(time.monotonic() - ctx.started, 1),
        "artifacts": [dict(_artifact_entry(r, ctx.work, fp32_p50, recommendation.key, ctx.specs, validated,
                                           shape_ranges(ctx.calibration.shapes(feed_batch(ctx.specs)) + [validated]),
                                           profile, facts), predicted=predicted[r.planned.key])
                      for r in records],
    }
    # Which build this is (fleet compare and the report name it): the identity of model, options, edgeopt
    # version and profile, and the version the user gave it.
    content["build"] = {"id": manifest.build_id(content), "version": opts.build_version}
    return content


def _listed_files(manifest_path: Path) -> List[str]:
    if not manifest_path.is_file():
        return []
    try:
        old = manifest.read(manifest_path, require_schema=False)
    except UserError:
        return []
    return [a.path for a in old.artifacts if a.path is not None]


def publish(out: Path, work: Path, paths: List[str], content: Dict[str, Any]) -> None:
    """Move finished artifacts from `work` into `out` and write the manifest last.

    The previous manifest goes first, so an interruption leaves no manifest rather than an old
    one describing new files; artifacts only the previous manifest listed are removed after.
    """
    target = out / manifest.FILE_NAME
    previous = _listed_files(target)
    target.unlink(missing_ok=True)
    for name in paths:
        os.replace(work / name, out / name)
    manifest.write(content, target)
    for name in set(previous) - set(paths):
        stale = out / name
        if Path(name).name == name and stale.is_file():  # only plain files the old manifest listed
            stale.unlink()
