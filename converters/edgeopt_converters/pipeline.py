"""The conversion pipeline: model in -> validated artifacts + manifest out.

export -> quantize with calibration data -> validate against the FP32 reference -> time on the
host -> recommend -> write artifacts and manifest. Everything is built in a private folder inside
OUTDIR and moved into place only when the whole conversion succeeded, so a failure leaves no
manifest and no half-written artifact behind.
"""
from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np


from edgeopt_agent.errors import UserError, require
from edgeopt_agent.profiles import DeviceProfile, load_profile

from . import accuracy as acc
from .accuracy.streaming import check_pairs, find_state_pairs, stream
from .accuracy.user_metric import UserMetric, load_metric
from .source.hashing import update_with_weights
from .precision.host_int8 import validation_session_config
from .cost.host_timing import ORT_SIDE_BY_SIDE, time_interleaved
from .manifest_build import ArtifactRecord, build_manifest, publish
from .precision.architecture import classify
from .accuracy.board_reference import record_reference_figures
from .source.input_specs import concrete_specs, resolve_specs, shapes_from_data, tensor_inputs
from .precision.mixed_precision import search_mixed_precision
from .source.model_source import bind_constants, load_source, module_source
from .passes._quiet import captured_output, quiet_libraries
from .passes.base import StepCall, StepContext
from .passes.errors import StepFailed
from .progress import ProgressReporter
from .precision.quant_check import check_weights
from .precision.sensitivity import node_sensitivity
from .source.source_model import SourceModel
from .recipe import (PlannedArtifact, architecture_variants, make_plan, repair_dynamic_variant, tflite_dynamic_variant,
                     with_exclusions)
from .recommend import recommend
from .cost.roofline import predict_artifacts
from .runtime import open_predictor, reference_predictor
from .source.tensors import Dataset, DatasetParts, InputSpec, feed_batch, load_datasets, random_dataset

log = logging.getLogger("edgeopt.convert")
DEFAULT_MAX_CALIBRATION = 256
DEFAULT_MAX_EVAL = 1000
MAX_OUTPUT_BYTES = 512 * 2**20  # float32 outputs kept for the reference, and again per artifact


@dataclass
class ConvertOptions:
    device: str
    output_dir: Path
    input_shapes: Sequence[str] = ()
    input_dtypes: Sequence[str] = ()
    input_values: Sequence[str] = ()  # NAME=NUMBER: constant arguments
    calibration: Union[Path, Sequence[Path], None] = None  # several files: several shapes per input
    eval_data: Union[Path, Sequence[Path], None] = None
    formats: Sequence[str] = ()
    precisions: Sequence[str] = ()
    max_accuracy_drop: Optional[float] = None
    min_cosine: Optional[float] = None
    recommend_budget: float = 1.0  # percentage points an artifact may lose and still be recommended
    output_kinds: Mapping[str, str] = field(default_factory=dict)  # output name -> kind (accuracy.KINDS)
    state_pairs: Mapping[str, str] = field(default_factory=dict)  # input name -> output that returns its state
    stream_steps: int = 64  # steps a stateful model is streamed through for its verdict
    metric: Optional[str] = None  # file.py:function, a user metric (higher is better)
    max_metric_drop: Optional[float] = None
    threads: Optional[int] = None
    calibrate_method: str = "minmax"
    max_calibration_samples: int = DEFAULT_MAX_CALIBRATION
    max_eval_samples: int = DEFAULT_MAX_EVAL
    weights: Optional[Path] = None
    trust_model_code: bool = False  # TorchScript files run code when loaded
    opset: int = 18
    time_on_host: bool = True
    mixed_precision: bool = True  # a failed static INT8 keeps its most sensitive nodes in float until it passes
    strict: bool = False  # an artifact that cannot be built or run fails the whole conversion


@dataclass
class _Context:
    profile: DeviceProfile
    source: SourceModel
    specs: List[InputSpec]
    calibration: Dataset
    evaluation: Dataset
    threads: int
    work: Path
    notes: List[str] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)
    tolerances: acc.Tolerances = field(default_factory=acc.Tolerances)
    metric: Optional[UserMetric] = None
    judging: Optional["_Judging"] = None  # decided from the reference and the first artifact's names
    model_specs: List[InputSpec] = field(default_factory=list)  # every input, constants and dynamic dims included
    failed: List[Dict[str, Any]] = field(default_factory=list)  # artifacts that could not be built or run, with why


@dataclass(frozen=True)
class _Judging:
    """How every artifact's outputs are judged: the same names, kinds and state pairs for all."""

    names: List[str]
    kinds: List[acc.OutputKind]
    state_pairs: Dict[str, str]
    stream_steps: int


def _datasets(source: SourceModel, specs: List[InputSpec], opts: ConvertOptions, notes: List[str], warnings: List[str]):
    calibration = load_datasets(_paths(opts.calibration), specs, "calibration", False) if opts.calibration else None
    evaluation = load_datasets(_paths(opts.eval_data), specs, "eval-data", True) if opts.eval_data else None
    if calibration is None and evaluation is None and source.calibration is not None:
        calibration, evaluation = source.calibration, source.eval_data
        notes.append(f"calibration and evaluation use the data bundled with {source.description}")
    if calibration is None and evaluation is None:
        calibration, evaluation = random_dataset(specs, seed=0), random_dataset(specs, seed=1)
        warnings.append(
            "no --calibration data: INT8 is calibrated on random data and validated on random data, so the "
            "accuracy figures are meaningless; pass --calibration (and --eval-data) from your real inputs"
        )
    elif calibration is None:
        calibration = evaluation
        warnings.append("no --calibration given: calibrating on the --eval-data samples, so the accuracy figures are optimistic")
    elif evaluation is None:
        evaluation = calibration.parts[0] if isinstance(calibration, DatasetParts) else calibration
        which = f"the samples of {evaluation.source}" if evaluation is not calibration else "the calibration samples"
        warnings.append(f"no --eval-data given: validating on {which}, so the accuracy figures are optimistic")
    calibration = _head(calibration, opts.max_calibration_samples)
    evaluation = _head(evaluation, opts.max_eval_samples)
    return calibration, evaluation


def _paths(value) -> List[Path]:
    return [Path(value)] if isinstance(value, (str, os.PathLike)) else [Path(v) for v in value]


def _shape_sets(calibration, evaluation, batch: int) -> List[Dict[str, Tuple[int, ...]]]:
    return calibration.shapes(batch) + evaluation.shapes(batch)


def _one_shape_for_tflite(plan, calibration: Dataset, evaluation: Dataset, specs: List[InputSpec],
                          asked: bool, notes: List[str]) -> None:
    """TFLite artifacts (litert-torch) take one shape per input: data of several shapes leaves
    them out (or, when asked for by --format tflite, is an error)."""
    sets = _shape_sets(calibration, evaluation, feed_batch(specs))
    differ = [n for n in sets[0] if len({tuple(s.get(n, ())) for s in sets}) > 1]
    if not differ or not any(a.format == "tflite" for a in plan.artifacts):
        return
    name = differ[0]
    seen = " and ".join(str(list(shape)) for shape in dict.fromkeys(tuple(s[name]) for s in sets if name in s))
    why = f"input '{name}' is {seen} in the data, and TFLite artifacts take one shape per input"
    if asked:
        raise UserError(f"{why}; give data of one shape, or --format onnx (which keeps the dim dynamic)")
    plan.artifacts[:] = [a for a in plan.artifacts if a.format != "tflite"]
    notes.append(f"TFLite artifacts skipped: {why}")


def _head(data: Dataset, limit: int) -> Dataset:
    if limit <= 0 or data.size <= limit:
        return data
    return data.subset(slice(None, limit))


def _check_options(opts: ConvertOptions) -> None:
    if opts.max_accuracy_drop is not None and opts.max_accuracy_drop < 0:
        raise UserError(f"--max-accuracy-drop must be 0 or more percentage points, got {opts.max_accuracy_drop}")
    if opts.min_cosine is not None and not -1.0 <= opts.min_cosine <= 1.0:
        raise UserError(f"--min-cosine must be between -1 and 1, got {opts.min_cosine}")
    if opts.threads is not None and opts.threads < 1:
        raise UserError(f"--threads must be at least 1, got {opts.threads}")
    if opts.max_metric_drop is not None and not opts.metric:
        raise UserError("--max-metric-drop needs --metric file.py:function")
    if opts.stream_steps < 2:
        raise UserError(f"--stream-steps must be at least 2, got {opts.stream_steps}")
    unknown = sorted(set(opts.output_kinds.values()) - set(acc.KINDS))
    if unknown:
        raise UserError(f"unknown output kind {', '.join(unknown)}; choose one of {', '.join(acc.KINDS)}")


def _output_folder(path: Path) -> bool:
    """Create OUTDIR if needed; True when this run created it (and should remove it on failure)."""
    if path.exists() and not path.is_dir():
        raise UserError(f"output folder {path} is a file; give -o a folder")
    existed = path.exists()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create output folder {path}: {exc.strerror}") from None
    return not existed


def _measured_on_host(profile: DeviceProfile, timed: bool) -> Tuple[bool, str]:
    """Whether host timings say something about the target, and if not, why."""
    if not timed:
        return False, "host timing was skipped (--no-timing)"
    if not profile.matches_host():
        return False, f"{profile.name} is not this machine's architecture"
    if profile.has_gpu:
        return False, f"{profile.name} runs these artifacts on its GPU ({profile.runtimes[0]}), which CPU timings here do not predict"
    return True, ""


def convert(model: Any, opts: ConvertOptions, progress: ProgressReporter = ProgressReporter()) -> Dict[str, Any]:
    """Convert `model` (a spec string, or an nn.Module) for `opts.device`; returns the manifest."""
    quiet_libraries()
    _check_options(opts)
    profile = load_profile(opts.device)
    metric = load_metric(opts.metric, opts.max_metric_drop) if opts.metric else None
    source = _source(model, opts)
    try:
        return _convert(source, profile, metric, opts, progress)
    finally:
        source.close()


def _convert(source: SourceModel, profile, metric, opts: ConvertOptions, progress: ProgressReporter) -> Dict[str, Any]:
    data_shapes, data_file = _shapes_from_data(source, opts)
    model_specs = resolve_specs(source, opts.input_shapes, opts.input_dtypes, opts.input_values, data_shapes)
    source = bind_constants(source, model_specs)
    fed = tensor_inputs(model_specs, baked=source.kind != "onnx")
    notes: List[str] = [f"input '{s.name}' takes its shape {','.join(map(str, s.shape))} from {data_file} "
                        f"(N samples of {list(s.shape[1:])})" for s in model_specs
                        if s.name in data_shapes and s.shape == data_shapes[s.name]]
    warnings: List[str] = list(source.warnings)
    calibration, evaluation = _datasets(source, fed, opts, notes, warnings)
    specs = concrete_specs(fed, calibration.feed_shapes(feed_batch(fed)))
    plan = make_plan(profile, opts.formats, opts.precisions, source.kind, opts.calibrate_method, opts.opset)
    notes.extend(plan.notes)
    _one_shape_for_tflite(plan, calibration, evaluation, fed, "tflite" in opts.formats, notes)
    threads = max(1, min(opts.threads or profile.default_threads, os.cpu_count() or 1))
    if (opts.threads or profile.default_threads) > threads:
        notes.append(f"host timing uses {threads} threads (this machine's cores), the profile asks for {profile.default_threads}")
    for warning in warnings:
        progress.note(f"warning: {warning}")

    out = Path(opts.output_dir)
    created = _output_folder(out)
    work = Path(tempfile.mkdtemp(prefix=".edgeopt-build-", dir=out))
    done = False
    try:
        budget = opts.max_accuracy_drop if opts.max_accuracy_drop is not None else opts.recommend_budget
        ctx = _Context(profile, source, specs, calibration, evaluation, threads, work, notes, warnings,
                       tolerances=acc.Tolerances(budget_points=budget), metric=metric, model_specs=model_specs)
        records = _build_all(ctx, plan, opts, progress)
        _check_budget(records, opts)
        _note_unresolved(ctx, records)
        measured, why_not = _measured_on_host(profile, opts.time_on_host)
        predicted = {} if measured else predict_artifacts(profile, {r.planned.key: work / r.path for r in records})
        rec = recommend(records, profile, measured=measured, why_predicted=why_not, predicted_ms=predicted)
        manifest = build_manifest(ctx, records, rec, opts)
        record_reference_figures(work, manifest)
        publish(out, work, [r.path for r in records], manifest)
        done = True
        return manifest
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if not done and created:
            shutil.rmtree(out, ignore_errors=True)


def _shapes_from_data(source: SourceModel, opts: ConvertOptions) -> Tuple[Dict[str, tuple], str]:
    """({input: shape}, the file) for inputs whose shape neither the model nor the options give and
    the first data file fixes (a file.py:factory's forward() declares names, not shapes)."""
    unknown = [s.name for s in source.input_specs if s.shape is None and s.tensor]
    files = list(opts.calibration or ()) or ([opts.eval_data] if opts.eval_data else [])
    if not unknown or not files:
        return {}, ""
    from .source.tensors import read_data_arrays

    found = shapes_from_data(read_data_arrays(Path(files[0]), "calibration"), [s.name for s in source.input_specs])
    return {name: shape for name, shape in found.items() if name in unknown}, str(files[0])


def _source(model: Any, opts: ConvertOptions) -> SourceModel:
    if isinstance(model, (str, os.PathLike)):
        return load_source(str(model), opts.weights, opts.trust_model_code)
    torch = require("torch", "convert")
    if isinstance(model, torch.nn.Module):
        digest = hashlib.sha256()
        update_with_weights(digest, model)
        return module_source(model, type(model).__name__, digest.hexdigest())
    raise UserError(f"model must be a path/spec string or a torch.nn.Module, got {type(model).__name__}")


def _fit_outputs_in_memory(ctx: _Context, predict, batch: int) -> None:
    """Keep the evaluation set small enough that two copies of its outputs fit in memory."""
    feed, _ = next(ctx.evaluation.batches(batch))
    per_sample = sum(np.asarray(o).size for o in predict(feed)) * 4 / batch
    limit = max(batch, int(MAX_OUTPUT_BYTES // max(per_sample, 1)) // batch * batch)
    if ctx.evaluation.size > limit:
        ctx.notes.append(f"validation uses the first {limit} of {ctx.evaluation.size} evaluation samples: the "
                         f"outputs take {per_sample / 2**20:.1f} MiB per sample")
        ctx.evaluation = _head(ctx.evaluation, limit)


def _step_label(item: PlannedArtifact) -> str:
    if item.format == "tflite":
        if item.precision == "int8":
            return "TFLite dynamic-range INT8 (PT2E)" if item.variant else "calibrate TFLite INT8 (PT2E)"
        return "export TFLite FP32"
    if item.precision == "fp32":
        return "export ONNX FP32"
    if item.precision == "fp16":
        return "convert ONNX FP16"
    return f"{'calibrate ' if item.int8 else ''}ONNX INT8 ({item.int8.scheme if item.int8 else item.variant})"


def build_artifact(ctx: _Context, item: PlannedArtifact, built: Dict[str, Path], target: Path,
                   advance=None) -> Dict[str, Any]:
    """Run the artifact's steps in order; intermediate files stay in the work folder. Returns their facts."""
    batch = feed_batch(ctx.specs)
    step_ctx = StepContext(ctx.source, ctx.specs, ctx.calibration, batch, advance,
                           example=ctx.calibration.first_feed(batch), fix_dims=not _data_axes(ctx))
    current = built.get(item.base) if item.base else None
    if item.base and current is None:
        raise StepFailed(f"needs {item.base}, which was not built")
    info: Dict[str, Any] = {"steps": [c.name for c in item.steps]}
    last_here = max((i for i, c in enumerate(item.steps) if not c.on_target), default=-1)  # writes the artifact
    for index, call in enumerate(item.steps):
        if call.on_target:
            info.setdefault("on_target_steps", []).append(call.name)
            continue
        output = target if index == last_here else ctx.work / ".steps" / f"{item.key}.{index}.{call.name}.onnx"
        output.parent.mkdir(exist_ok=True)
        result = call.build().run(step_ctx, current, output)
        info.setdefault("inputs_of", {})[call.name] = current
        for key, value in result.info.items():
            info[key] = info[key] + value if isinstance(value, list) and isinstance(info.get(key), list) else value
        current = result.path
    if item.format == "onnx" and item.base and item.base in built:
        _carry_metadata(built[item.base], target)
    return info


def _with_dynamic_axes(item: PlannedArtifact, axes) -> PlannedArtifact:
    steps = tuple(StepCall(c.name, replace(c.options, dynamic_axes=axes)) if c.name == "export-onnx" else c
                  for c in item.steps)
    return replace(item, steps=steps)


def _carry_metadata(source: Path, target: Path) -> None:
    onnx = require("onnx", "convert")
    from .passes.preprocess_onnx import copy_metadata

    src = onnx.load(str(source), load_external_data=False)
    if not src.metadata_props:
        return
    out = onnx.load(str(target))
    before = len(out.metadata_props)
    copy_metadata(src, out)
    if len(out.metadata_props) != before:
        onnx.save(out, str(target))


def _exact_int8_config(ctx: _Context, item: PlannedArtifact) -> Dict[str, str]:
    """Session settings that make this host compute a static INT8 artifact as its target will."""
    if item.int8 is None:
        return {}
    config = validation_session_config(item.precision, item.format, item.int8.reduce_range)
    note = ("INT8 ONNX artifacts with 8-bit weights are validated with quantize/dequantize unfused: this host's "
            "onnxruntime INT8 kernels (x86 without VNNI) saturate such weights, the target's do not")
    if config and note not in ctx.notes:
        ctx.notes.append(note)
    return config


def _build_all(ctx: _Context, plan, opts: ConvertOptions, progress: ProgressReporter) -> List[ArtifactRecord]:
    eval_batch = feed_batch(ctx.specs)
    reference_predict = reference_predictor(ctx.source, ctx.specs)
    _fit_outputs_in_memory(ctx, reference_predict, eval_batch)
    with progress.step("FP32 reference", ctx.evaluation.size) as advance:
        reference = acc.collect_outputs(reference_predict, ctx.evaluation, eval_batch, advance)
    streamed_reference: Dict[str, List[np.ndarray]] = {}  # filled once, on first use
    records: List[ArtifactRecord] = []
    built: Dict[str, Path] = {}
    dynamic_batch = False
    axes = _data_axes(ctx)
    if axes:  # sizes that differ across the data files stay dynamic in the export
        plan.artifacts[:] = [_with_dynamic_axes(a, axes) for a in plan.artifacts]
    queue = list(plan.artifacts)

    def validate(item: PlannedArtifact, target: Path, advance=None):
        session_config = _exact_int8_config(ctx, item)
        with captured_output(f"load {item.key}"):  # runtimes announce delegates on fd 2
            predictor = open_predictor(target, ctx.threads, session_config)
        try:
            outputs = acc.collect_outputs(predictor.predict, ctx.evaluation, eval_batch, advance)
            io = predictor.io()
            judging = ctx.judging or _decide_judging(ctx, opts, reference_predict, reference, item, io, eval_batch)
            ctx.judging = judging
            accuracy = acc.compare(reference, outputs, ctx.evaluation.labels, judging.names, judging.kinds,
                                   ctx.tolerances, ctx.metric)
            if judging.state_pairs:
                accuracy = _judge_streamed(ctx, judging, accuracy, predictor.predict, reference_predict,
                                           streamed_reference, eval_batch)
        finally:
            predictor.close()
        return accuracy, io

    def build_and_judge(item: PlannedArtifact) -> Optional[ArtifactRecord]:
        nonlocal dynamic_batch
        target = ctx.work / item.filename
        total = ctx.calibration.size if item.precision == "int8" and (item.int8 or item.format == "tflite") else 1
        try:
            with progress.step(_step_label(item), total) as advance:
                info = build_artifact(ctx, item, built, target, advance)
                if total == 1:
                    advance()
        except StepFailed as exc:
            ctx.warnings.append(f"{item.key} not built: {exc}")
            return None
        built[item.key] = target
        if item.key == "onnx-fp32":
            dynamic_batch = bool(info.get("dynamic_batch"))
            arch = classify(target)
            ctx.notes.append(f"architecture: {arch.kind} ({arch.why})")
            extra = [v for v in architecture_variants(plan, arch, ctx.profile) if v.key not in {a.key for a in plan.artifacts}]
            plan.artifacts.extend(extra)
            queue.extend(extra)
        with progress.step(f"validate {item.key}", ctx.evaluation.size) as advance:
            accuracy, io = validate(item, target, advance)
        record = ArtifactRecord(item, item.filename, accuracy, io,
                                dynamic_batch=dynamic_batch if item.format == "onnx" else False, info=info)
        if item.format == "onnx" and item.precision == "int8":
            record = _check_int8(ctx, record, built, validate, progress, opts.mixed_precision)
        elif item.key == "onnx-fp16" and record.accuracy.verdict == acc.FAILED:
            _blame_fp16(ctx, record, built)
        elif item.key == "tflite-int8" and record.accuracy.verdict == acc.FAILED and opts.mixed_precision:
            fallback = tflite_dynamic_variant(item)
            plan.artifacts.append(fallback)
            queue.append(fallback)
        if item.format == "tflite" and item.precision == "int8":
            _check_tflite_size(ctx, record, built.get("tflite-fp32"), target)
        return record

    while queue:
        item = queue.pop(0)
        try:
            record = build_and_judge(item)
        except Exception as exc:  # reported as this artifact's failure, with its cause; the others go on
            repaired = None if opts.strict else _repaired(ctx, item, built, exc)
            if repaired is not None:
                queue.insert(0, repaired)
                continue
            _artifact_failed(ctx, item, built, exc, opts.strict)
            if item.int8 is not None and not any(a.key == "onnx-int8-dynamic" for a in plan.artifacts):
                variant = repair_dynamic_variant(item, _one_line(exc)[:120])
                plan.artifacts.append(variant)
                queue.insert(0, variant)
            continue
        if record is not None:
            records.append(record)
    if not records:
        causes = "; ".join(f"{f['key']}: {f['cause']}" for f in ctx.failed) or "; ".join(ctx.warnings)
        raise UserError(f"no artifact could be built and run: {causes}")
    if opts.time_on_host:
        _time_all(ctx, records, progress)
    return records


def _artifact_failed(ctx: _Context, item: PlannedArtifact, built: Dict[str, Path], exc: Exception,
                     strict: bool) -> None:
    """An artifact that could not be built, loaded or judged: listed as failed with its one-line
    cause (manifest, table, warnings) while the conversion goes on; its file is not published.
    The traceback is logged for -v. With --strict the conversion stops here."""
    cause = _one_line(exc)
    log.debug("%s failed", item.key, exc_info=True)
    if strict:
        raise UserError(f"{item.key} failed: {cause} (--strict stops at the first artifact that fails)") from exc
    built.pop(item.key, None)
    (ctx.work / item.filename).unlink(missing_ok=True)
    ctx.failed.append({"key": item.key, "format": item.format, "precision": item.precision, "cause": cause})
    ctx.warnings.append(f"{item.key} failed and is left out: {cause}")


_NAMED_NODE = re.compile(r"Node \(([^()\s]+)\)")
MAX_REPAIRS = 3


def _repaired(ctx: _Context, item: PlannedArtifact, built: Dict[str, Path], exc: Exception) -> Optional[PlannedArtifact]:
    """A static ONNX INT8 that a runtime refused, naming a node of the graph (onnxruntime's `Node (If_0)`):
    the same artifact with that node kept in float, at most MAX_REPAIRS times. None: nothing to repair."""
    if item.int8 is None or "onnx-fp32" not in built:
        return None
    kept = list(item.int8.nodes_to_exclude or ())
    if len(kept) >= MAX_REPAIRS:
        return None
    import onnx

    graph_nodes = {n.name for n in onnx.load(str(built["onnx-fp32"]), load_external_data=False).graph.node}
    named = [n for n in _NAMED_NODE.findall(str(exc)) if n in graph_nodes and n not in kept]
    if not named:
        return None
    built.pop(item.key, None)
    ctx.notes.append(f"{item.key}: the runtime refused it at node {named[0]} ({_one_line(exc)[:160]}); "
                     f"built again with {named[0]} kept in float")
    return with_exclusions(item, kept + named[:1])


def _one_line(exc: Exception) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0] if lines else ""
    if not isinstance(exc, UserError):
        text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if len(text) <= 2000 else text[:1997] + "..."


TFLITE_INT8_MAX_SIZE = 0.6  # of the FP32 file: INT8 weights take about a quarter


def _check_tflite_size(ctx: _Context, record: ArtifactRecord, fp32: Optional[Path], int8: Path) -> None:
    """A TFLite 'INT8' whose file is nearly FP32's size kept its weights in float (an LSTM litert-torch
    does not quantize): warned about, and not recommended at 0.9x or more, as for ONNX."""
    if fp32 is None or not fp32.is_file():
        return
    ratio = int8.stat().st_size / max(fp32.stat().st_size, 1)
    record.info.setdefault("weights", {"ratio": round(ratio, 3), "measured_by": "file size against the FP32 TFLite",
                                       "quantized": ratio <= TFLITE_INT8_MAX_SIZE})
    if ratio > TFLITE_INT8_MAX_SIZE:
        record.not_quantized = True
        ctx.warnings.append(f"{record.planned.key} is not really quantized: its file is {ratio:.2f}x the FP32 "
                            f"TFLite's (INT8 weights should make it about 0.25x)")


def _blame_fp16(ctx: _Context, record: ArtifactRecord, built: Dict[str, Path]) -> None:
    """A failed FP16 names the nodes whose outputs lose the most against FP32."""
    feeds = [feed for feed, _ in ctx.evaluation.batches(feed_batch(ctx.specs))][:4]
    try:
        ranked = [s for s in node_sensitivity(built["onnx-fp32"], ctx.work / record.path, feeds, ctx.threads)
                  if s.drop_db > 1.0][:5]
    except Exception as exc:  # the verdict stands; only the diagnosis is missing
        ctx.warnings.append(f"{record.planned.key}: could not measure which ops lose precision ({exc})")
        return
    record.info["fp16_sensitive_nodes"] = [s.to_dict() for s in ranked]
    if ranked:
        ctx.warnings.append(f"{record.planned.key} failed; the ops losing most precision in FP16: "
                            + ", ".join(f"{s.name} ({s.op_type}, -{s.drop_db:.0f} dB)" for s in ranked)
                            + " (keep them in FP32 with ConvertOnnxFp16's node_block_list)")


def _check_int8(ctx: _Context, record: ArtifactRecord, built: Dict[str, Path], validate, progress: ProgressReporter,
                mixed: bool) -> ArtifactRecord:
    """Weights really INT8? Verdict failed? Then keep the most sensitive nodes in float until it passes."""
    if mixed and record.accuracy.verdict == acc.FAILED and record.planned.int8 is not None:
        prepared = record.info["inputs_of"]["quantize-onnx-static"]
        with progress.step(f"mixed precision for {record.planned.key}", 1) as advance:
            record = search_mixed_precision(ctx, record, prepared, validate)
            advance()
    weights = check_weights(built["onnx-fp32"], ctx.work / record.path)
    record.info["weights"] = weights.to_dict()
    if not weights.quantized:
        record.not_quantized = True
        kept = len(record.info.get("float_nodes") or [])
        ctx.warnings.append(f"{record.planned.key} is not really quantized: {weights.describe()}"
                            + (f" ({kept} nodes kept in float)" if kept else ""))
    record.info.pop("inputs_of", None)
    return record
def _data_axes(ctx: _Context) -> Tuple[Tuple[str, int, str], ...]:
    """Axes (besides the batch) whose size differs across the data files (calibration parts and
    evaluation): they stay dynamic in the export. Axes that vary alike across inputs share one size."""
    sets = _shape_sets(ctx.calibration, ctx.evaluation, feed_batch(ctx.specs))
    groups: Dict[Tuple[int, Tuple[int, ...]], str] = {}
    axes = []
    for name, shape in sets[0].items():
        for axis in range(len(shape)):
            sizes = tuple(s[name][axis] for s in sets if name in s)
            if len(set(sizes)) > 1 and not (axis == 0 and not ctx.calibration.whole):
                group = groups.setdefault((axis, sizes), f"dim{len(groups)}")
                axes.append((name, axis, group))
    return tuple(axes)


def _time_all(ctx: _Context, records: List[ArtifactRecord], progress: ProgressReporter, max_rounds: int = 40) -> None:
    """Interleaved rounds until every speed-up over FP32 of its format is known within 5 % (or a minute)."""
    feed = ctx.evaluation.first_feed(feed_batch(ctx.specs))
    fp32 = {r.planned.format: r.planned.key for r in records if r.planned.precision == "fp32"}
    baselines = {r.planned.key: fp32[r.planned.format] for r in records if r.planned.format in fp32}
    with captured_output("load artifacts for timing"):
        predictors = {r.planned.key: open_predictor(ctx.work / r.path, ctx.threads,
                                                    ORT_SIDE_BY_SIDE if r.planned.format == "onnx" else None)
                      for r in records}
    try:
        runs = {key: p.bound_call(feed) for key, p in predictors.items()}
        with progress.step(f"time on host (batch {feed_batch(ctx.specs)}, {ctx.threads} threads)", max_rounds) as advance:
            timings = time_interleaved(runs, baselines, max_rounds=max_rounds, on_round=advance)
    finally:
        for p in predictors.values():
            p.close()
    for record in records:
        record.host_timing = timings[record.planned.key]


def _decide_judging(ctx: _Context, opts: ConvertOptions, reference_predict, reference: List[np.ndarray],
                    item: PlannedArtifact, io: Dict[str, List[dict]], batch: int) -> _Judging:
    """Output names (ONNX names where the first artifact is ONNX), their kinds, and state pairs."""
    names = [o["name"] for o in io["outputs"]] if item.format == "onnx" and len(io["outputs"]) == len(reference) \
        else [f"output_{i}" for i in range(len(reference))]
    acc.kinds.check_output_names(opts.output_kinds, names)
    feed, _ = next(ctx.evaluation.batches(batch))
    pairs = dict(opts.state_pairs)
    check_pairs(pairs, list(feed), names)
    if not pairs:
        step = dict(zip(names, (np.asarray(o) for o in reference_predict(feed))))
        pairs = find_state_pairs(feed, step)
        if pairs:
            ctx.notes.append("stateful model: " + ", ".join(f"output {o} feeds input {i}" for i, o in pairs.items())
                             + f"; artifacts are also judged streamed through up to {opts.stream_steps} steps "
                               f"(override with --state INPUT=OUTPUT)")
    if pairs and ctx.evaluation.size < 2:
        ctx.warnings.append("the model is stateful but the evaluation data has one sample: nothing to stream")
        pairs = {}
    kinds = acc.decide_kinds(names, reference, opts.output_kinds, list(pairs.values()))
    return _Judging(names, kinds, pairs, min(opts.stream_steps, ctx.evaluation.size // batch))


def _judge_streamed(ctx: _Context, judging: _Judging, accuracy: acc.Accuracy, predict, reference_predict,
                    streamed_reference: Dict[str, List[np.ndarray]], batch: int) -> acc.Accuracy:
    steps = judging.stream_steps
    if "outputs" not in streamed_reference:
        streamed_reference["outputs"] = stream(reference_predict, ctx.evaluation, batch, judging.state_pairs,
                                               judging.names, steps)
    candidate = stream(predict, ctx.evaluation, batch, judging.state_pairs, judging.names, steps)
    streamed = acc.judge_all([f"{n}@stream" for n in judging.names], judging.kinds, streamed_reference["outputs"],
                             candidate, None, ctx.tolerances)
    return replace(accuracy, streamed=streamed, stream_steps=steps)


def _check_budget(records: List[ArtifactRecord], opts: ConvertOptions) -> None:
    """The user's gates: a failed verdict (with a budget or metric limit given) or a low cosine fails the run."""
    failures = []
    if opts.max_accuracy_drop is not None or opts.max_metric_drop is not None:
        for r in records:
            a = r.accuracy
            if a.verdict == acc.FAILED:
                lost = f"lost {a.drop_points:.2f} points" if a.drop_points is not None else "failed"
                failures.append(f"{r.planned.key} {lost} ({a.reason})")
    if opts.min_cosine is not None:
        failures += [f"{r.planned.key} has cosine similarity {r.accuracy.min_cosine:.5f}" for r in records
                     if r.accuracy.min_cosine < opts.min_cosine]
    if failures:
        limits = " and ".join(x for x in (
            f"--max-accuracy-drop {opts.max_accuracy_drop}" if opts.max_accuracy_drop is not None else "",
            f"--max-metric-drop {opts.max_metric_drop}" if opts.max_metric_drop is not None else "",
            f"--min-cosine {opts.min_cosine}" if opts.min_cosine is not None else "") if x)
        raise UserError(f"accuracy budget exceeded ({limits}): {'; '.join(failures)}; "
                        f"try more representative --calibration data or --calibrate-method entropy/percentile")


def _note_unresolved(ctx: _Context, records: List[ArtifactRecord]) -> None:
    for r in records:
        if r.accuracy.verdict == acc.UNRESOLVED:
            ctx.warnings.append(f"{r.planned.key}: accuracy unresolved: {r.accuracy.reason}")
