"""The conversion pipeline: model in -> validated artifacts + manifest out.

load the model -> choose its data -> plan the artifacts from the board's profile -> FP32 reference ->
build and judge each artifact (failures repaired or isolated, follow-ups by the step that wrote it) ->
time on the host or predict for the board -> recommend -> write artifacts and manifest. Everything is
built in a private folder inside OUTDIR and moved into place only when the whole conversion succeeded,
so a failure leaves no manifest and no half-written artifact behind.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from edgeopt_agent.errors import UserError, require
from edgeopt_agent.profiles import DeviceProfile, load_profile

from . import accuracy as acc
from .accuracy.board_reference import record_reference_figures
from .accuracy.gates import apply_gates, unresolved_warnings
from .accuracy.user_metric import UserMetric, load_metric
from .build import build_artifact, with_dynamic_axes
from .context import ConversionContext
from .host_work import AccuracyRuns, batch_for, choose_threads, probe_sample_axes, same_per_sample
from .cost.roofline import artifact_costs, roofline_ms
from .cost.time_artifacts import time_artifacts
from .manifest_build import ArtifactRecord, build_manifest, fed_shapes_by_artifact, publish
from .options import RECOMMEND_BUDGET, ConvertOptions
from .passes._quiet import quiet_libraries
from .precision.follow_ups import follow_up
from .progress import ProgressReporter
from .recipe import PlannedArtifact, make_plan, one_shape_per_input
from .recommend import MIN_SPEEDUP, recommend
from .repair import after_failure
from .runtime import reference_predictor
from .source.data import choose_datasets, data_shapes, fit_outputs_in_memory, labelled_shapes, shape_sets
from .source.hashing import update_with_weights
from .source.input_specs import concrete_specs, resolve_specs, tensor_inputs
from .source.model_source import bind_constants, load_source, module_source
from .source.source_model import SourceModel
from .source.tensors import feed_batch

__all__ = ["ConvertOptions", "convert"]


def convert(model: Any, opts: ConvertOptions, progress: ProgressReporter = ProgressReporter()) -> Dict[str, Any]:
    """Convert `model` (a spec string, or an nn.Module) for `opts.device`; returns the manifest."""
    started = time.monotonic()  # --time-budget counts the whole conversion, model loading included
    quiet_libraries()
    if opts.max_metric_drop is not None and not opts.metric:
        raise UserError("--max-metric-drop needs --metric file.py:function")
    unknown = sorted(set(opts.output_kinds.values()) - set(acc.KINDS))
    if unknown:
        raise UserError(f"unknown output kind {', '.join(unknown)}; choose one of {', '.join(acc.KINDS)}")
    profile = load_profile(opts.device)
    metric = load_metric(opts.metric, opts.max_metric_drop) if opts.metric else None
    source = _source(model, opts, progress)
    try:
        return _convert(source, profile, metric, opts, progress, started)
    finally:
        source.close()


def _convert(source: SourceModel, profile: DeviceProfile, metric: Optional[UserMetric], opts: ConvertOptions,
             progress: ProgressReporter, started: float) -> Dict[str, Any]:
    shapes, data_file = data_shapes(source, opts)
    model_specs = resolve_specs(source, opts.input_shape, opts.input_dtype, opts.input_value, shapes)
    source = bind_constants(source, model_specs)
    fed = tensor_inputs(model_specs, baked=source.kind != "onnx")
    notes = labelled_shapes(model_specs, shapes, data_file)
    warnings = list(source.warnings)
    calibration, evaluation, evaluation_all = choose_datasets(source, fed, opts, notes, warnings)
    specs = concrete_specs(fed, calibration.feed_shapes(feed_batch(fed)))
    plan = make_plan(profile, opts.formats, opts.precisions, source.kind, opts.calibrate_method, opts.opset)
    notes.extend(plan.notes)
    one_shape_per_input(plan, shape_sets(calibration, evaluation, feed_batch(fed)), opts.formats, notes)
    threads = _threads(profile, opts, notes)
    for warning in warnings:
        progress.note(f"warning: {warning}")

    out = Path(opts.output_dir)
    created = _output_folder(out)
    work = Path(tempfile.mkdtemp(prefix=".edgeopt-build-", dir=out))
    done = False
    try:
        ctx = ConversionContext(opts, profile, source, specs, calibration, evaluation, threads, work, plan,
                                model_specs=model_specs, notes=notes, warnings=warnings,
                                tolerances=acc.Tolerances(budget_points=_budget(opts)),
                                metric=metric, started=started, evaluation_all=evaluation_all)
        _reference(ctx, progress)
        records = _build_all(ctx, progress)
        _judge_open_verdicts_on_more_data(ctx, records, progress)
        gated, warned = [], []
        records = apply_gates(records, opts, gated, warned)
        ctx.fail(*gated)
        ctx.warn(*warned)
        if opts.time_on_host:
            with ctx.clock.phase("timing"):
                time_artifacts(ctx, records, progress, decide_at=MIN_SPEEDUP)
        ctx.warn(*unresolved_warnings(records))
        measured, why_not = _measured_on_host(profile, opts.time_on_host)
        with ctx.clock.phase("prediction"):
            costs = {} if measured else artifact_costs({r.planned.key: work / r.path for r in records},
                                                        fed_shapes_by_artifact(ctx, records))
            predicted = roofline_ms(profile, costs)
        rec = recommend(records, profile, measured=measured, why_predicted=why_not, predicted_ms=predicted,
                        board_costs=costs)
        manifest = build_manifest(ctx, records, rec, stands_for_target=(measured, why_not), predicted_ms=predicted)
        with ctx.clock.phase("board reference"):
            record_reference_figures(work, manifest)  # never fails the conversion: a warning per artifact it misses
        manifest["phases"] = ctx.clock.totals()
        publish(out, work, [r.path for r in records], manifest)
        done = True
        return manifest
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if not done and created:
            shutil.rmtree(out, ignore_errors=True)


def _reference(ctx: ConversionContext, progress: ProgressReporter) -> None:
    """The FP32 source model's outputs on the evaluation data, which every artifact is judged against,
    computed with the threads and samples per run that suit this host (`host_work`)."""
    with ctx.clock.phase("reference"):
        runs, predict = _accuracy_runs(ctx)
        notes = [runs.describe()]
        evaluation = fit_outputs_in_memory(ctx.evaluation, predict, ctx.batch, notes)
        ctx.note(*notes)
        with progress.step("FP32 reference", evaluation.size) as advance:
            outputs = acc.collect_outputs(predict, evaluation, ctx.batch * runs.batch, advance, runs.sample_axes)
        ctx.take_reference(runs, predict, evaluation, outputs)


def _accuracy_runs(ctx: ConversionContext) -> Tuple[AccuracyRuns, Any]:
    """Threads measured on the source model's first feed; samples per run by input size, kept only where
    the model gives each sample of a batch what it gives it alone. With the reference predictor set up so."""
    feed = ctx.evaluation.first_feed(ctx.batch)
    predictors: Dict[int, Any] = {}

    def predictor(threads: int):
        if threads not in predictors:
            predictors[threads] = reference_predictor(ctx.source, ctx.specs, threads)
        return predictors[threads]

    ran: Dict[int, Any] = {}  # each thread count's outputs on the first feed, kept from the thread probe

    def run_first(threads: int) -> None:
        ran[threads] = predictor(threads)(feed)

    threads, why = choose_threads(lambda t: (lambda: run_first(t)))
    batch, axes = 1, ()
    if ctx.batch == 1 and not ctx.evaluation.whole and ctx.evaluation.size > 1:
        batch = min(batch_for(sum(int(np.prod(v.shape[1:])) for v in feed.values())), ctx.evaluation.size)
        alone = ran[threads] if threads in ran else predictor(threads)(feed)
        axes = probe_sample_axes(predictor(threads), alone, ctx.evaluation.first_feed(2))
    if batch > 1:
        batched, _ = next(ctx.evaluation.batches(batch))
        try:
            same = same_per_sample(predictor(threads), batched, batch, ctx.batch, axes)
        except UserError:  # the model takes one sample at a time
            same = False
        if not same:
            batch, why = 1, why + ("; " if why else "") + "the model does not take several samples per run alike"
    return AccuracyRuns(threads, batch, why, axes), predictor(threads)


def _build_all(ctx: ConversionContext, progress: ProgressReporter) -> List[ArtifactRecord]:
    """Each planned artifact built and judged in turn; what a verdict or a failure calls for next
    (a repair, a fallback mode, INT8 modes for the architecture) is queued as it comes."""
    axes = ctx.varying_axes()
    if axes:  # sizes that differ across the data files stay dynamic in the export
        ctx.plan.artifacts[:] = [with_dynamic_axes(a, axes) for a in ctx.plan.artifacts]
    queue = list(ctx.plan.artifacts)
    records: List[ArtifactRecord] = []

    def validate(item: PlannedArtifact, target: Path, advance=None):
        from .validation import validate as judge

        return judge(ctx, item, target, advance)

    while queue:
        item = queue.pop(0)
        try:
            record, extra = _build_and_judge(ctx, item, validate, progress)
        except Exception as exc:  # reported as this artifact's failure, with its cause; the others go on
            queue[:0] = after_failure(ctx, item, exc)
            continue
        if record is not None:
            records.append(record)
        ctx.plan.artifacts.extend(extra)
        queue.extend(extra)
    if not records:
        causes = "; ".join(f"{f['key']}: {f['cause']}" for f in ctx.failed) or "; ".join(ctx.warnings)
        raise UserError(f"no artifact could be built and run: {causes}")
    return records


def _judge_open_verdicts_on_more_data(ctx: ConversionContext, records: List[ArtifactRecord],
                                      progress: ProgressReporter) -> None:
    """Verdicts still unresolved with decisions lost, after the search, judged again on the evaluation data
    --max-eval-samples left out (the rest of it, as far as memory allows), the FP32 reference extended to it."""
    open_ = [r for r in records if r.accuracy.verdict == acc.UNRESOLVED and any(
        j.loss_points is not None and j.loss_points.estimate > 0 for j in r.accuracy.judgements)]
    whole = ctx.evaluation_all
    if not open_ or whole is None or whole.whole or whole.size <= ctx.evaluation.size:
        return
    more = fit_outputs_in_memory(whole, ctx.reference_predict, ctx.batch, [])
    before = ctx.evaluation.size
    if more.size <= before:
        return
    extra = more.subset(slice(before, None))
    with ctx.clock.phase("reference"), progress.step(f"FP32 reference on {extra.size} more samples", extra.size) as advance:
        added = acc.collect_outputs(ctx.reference_predict, extra, ctx.batch * ctx.accuracy_runs.batch, advance,
                                    ctx.accuracy_runs.sample_axes)
    ctx.extend_reference(more, added)
    from .validation import validate

    for record in open_:
        was = record.accuracy.reason
        with ctx.clock.phase("validate"), progress.step(f"validate {record.planned.key} on {more.size} samples",
                                                        more.size) as advance:
            record.accuracy, _ = validate(ctx, record.planned, ctx.work / record.path, advance)
        ctx.note(f"{record.planned.key}: unresolved on {before} evaluation samples ({was}); judged again on "
                         f"{more.size}: {record.accuracy.verdict}")


def _build_and_judge(ctx: ConversionContext, item: PlannedArtifact, validate,
                     progress: ProgressReporter) -> Tuple[Optional[ArtifactRecord], List[PlannedArtifact]]:
    """Build `item` (or take the file a repair already built for it), judge it, and follow up on the
    verdict. A step that cannot make the artifact raises: the caller repairs or lists it."""
    target = ctx.work / item.filename
    prebuilt = ctx.take_prebuilt(item.key)
    if prebuilt is not None:
        path, info = prebuilt
        os.replace(path, target)
        info = dict(info, steps=[c.name for c in item.steps])
    else:
        info = _build(ctx, item, target, progress)
    ctx.record_built(item.key, target, info)
    with ctx.clock.phase("validate"), progress.step(f"validate {item.key}", ctx.evaluation.size) as advance:
        accuracy, io = validate(item, target, advance)
    record = ArtifactRecord(item, item.filename, accuracy, io,
                            dynamic_batch=ctx.dynamic_batch if item.format == "onnx" else False, info=info)
    return follow_up(ctx, record, validate, progress)


def _build(ctx: ConversionContext, item: PlannedArtifact, target: Path, progress: ProgressReporter) -> Dict[str, Any]:
    _same_exporter_failed(ctx, item)
    total = ctx.calibration.size if item.calibrates else 1
    with ctx.clock.phase("calibrate" if item.calibrates else "export"), progress.step(item.label, total) as advance:
        info = build_artifact(ctx, item, target, advance)
        if total == 1:
            advance()
    return info


def _same_exporter_failed(ctx: ConversionContext, item: PlannedArtifact) -> None:
    """An artifact whose format's FP32 export already failed in the same exporter step is not built (nor
    calibrated for minutes first): it would fail the same way."""
    from .passes.errors import StepFailed

    first = item.steps[0].name if item.steps else ""
    failed = next((f for f in ctx.failed if f["format"] == item.format and f["precision"] == "fp32"
                   and f.get("step") == first), None)
    if failed is not None and item.precision != "fp32":
        raise StepFailed(f"not built: the {item.format} FP32 export failed in the same step ({failed['cause'][:160]})")


def _budget(opts: ConvertOptions) -> float:
    """Points an artifact may lose and still be recommended: the user's gate, else the default."""
    return opts.max_accuracy_drop if opts.max_accuracy_drop is not None else RECOMMEND_BUDGET


def _threads(profile: DeviceProfile, opts: ConvertOptions, notes: List[str]) -> int:
    threads = max(1, min(opts.threads or profile.default_threads, os.cpu_count() or 1))
    if (opts.threads or profile.default_threads) > threads:
        notes.append(f"host timing uses {threads} threads (this machine's cores), the profile asks for {profile.default_threads}")
    return threads


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


def _source(model: Any, opts: ConvertOptions, progress: ProgressReporter) -> SourceModel:
    if isinstance(model, (str, os.PathLike)):
        return load_source(str(model), opts.weights, opts.trust_model_code, progress)
    torch = require("torch", "convert")
    if isinstance(model, torch.nn.Module):
        digest = hashlib.sha256()
        update_with_weights(digest, model)
        return module_source(model, type(model).__name__, digest.hexdigest())
    raise UserError(f"model must be a path/spec string or a torch.nn.Module, got {type(model).__name__}")
