"""The conversion pipeline: model in -> validated artifacts + manifest out.

export -> quantize with calibration data -> validate against the FP32 reference -> time on the
host -> recommend -> write artifacts and manifest. Everything is built in a private folder inside
OUTDIR and moved into place only when the whole conversion succeeded, so a failure leaves no
manifest and no half-written artifact behind.
"""
from __future__ import annotations

import inspect
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence


from edgeopt_agent.errors import UserError
from edgeopt_agent.profiles import DeviceProfile, load_profile

from . import accuracy as acc
from .host_timing import time_interleaved
from .manifest import ArtifactRecord, build_manifest, write_manifest
from .model_source import SourceModel, load_source
from .passes._quiet import captured_output
from .passes.export_onnx import ExportOnnx, OnnxExportOptions
from .passes.export_tflite import ExportTflite, TfliteOptions
from .passes.fp16_onnx import ConvertOnnxFp16
from .passes.quantize_onnx import QuantizeOnnxInt8
from .progress import Progress
from .recipe import PlannedArtifact, make_plan
from .recommend import recommend
from .runtime import open_predictor, reference_predictor
from .tensors import Dataset, InputSpec, load_dataset, make_specs, random_dataset

log = logging.getLogger("edgeopt.convert")
DEFAULT_MAX_CALIBRATION = 256
DEFAULT_MAX_EVAL = 1000


@dataclass
class ConvertOptions:
    device: str
    output_dir: Path
    input_shapes: Sequence[str] = ()
    input_dtypes: Sequence[str] = ()
    calibration: Optional[Path] = None
    eval_data: Optional[Path] = None
    formats: Sequence[str] = ()
    precisions: Sequence[str] = ()
    max_accuracy_drop: Optional[float] = None
    recommend_budget: float = 1.0  # percentage points an artifact may lose and still be recommended
    threads: Optional[int] = None
    calibrate_method: str = "minmax"
    max_calibration_samples: int = DEFAULT_MAX_CALIBRATION
    max_eval_samples: int = DEFAULT_MAX_EVAL
    weights: Optional[Path] = None
    opset: int = 18
    time_on_host: bool = True


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


def _forward_names(source: SourceModel) -> List[str]:
    """Input names for a PyTorch model: its forward() parameter names."""
    if source.module is None or source.kind == "torchscript":
        return []
    try:
        params = inspect.signature(source.module.forward).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def resolve_specs(source: SourceModel, shapes: Sequence[str], dtypes: Sequence[str]) -> List[InputSpec]:
    if shapes:
        known_names = [s.name for s in source.input_specs]
        if known_names and len(shapes) != len(known_names):
            raise UserError(f"the model has {len(known_names)} inputs ({', '.join(known_names)}), "
                            f"got {len(shapes)} --input-shape values")
        names = known_names or _forward_names(source)
        specs = make_specs(shapes, dtypes, names if len(names) == len(shapes) else [])
        for given, known in zip(specs, source.input_specs):
            fixed = [(i, d) for i, d in enumerate(known.shape) if d > 0]
            if len(known.shape) != len(given.shape) or any(given.shape[i] != d for i, d in fixed):
                raise UserError(f"--input-shape {list(given.shape)} does not fit input '{known.name}' "
                                f"of shape {['?' if d < 0 else d for d in known.shape]}")
        return specs
    if not source.input_specs:
        raise UserError(f"give the input shape of {source.description}, e.g. --input-shape 1,3,224,224 "
                        f"(repeat the option for each input)")
    specs = []
    for spec in source.input_specs:
        if any(d < 0 for d in spec.shape[1:]):
            raise UserError(f"input '{spec.name}' has unknown dimensions {list(spec.shape)}; give --input-shape")
        specs.append(replace(spec, shape=(1,) + tuple(spec.shape[1:]) if spec.shape[0] < 0 else spec.shape))
    return specs


def _datasets(source: SourceModel, specs: List[InputSpec], opts: ConvertOptions, notes: List[str], warnings: List[str]):
    calibration = load_dataset(opts.calibration, specs, "calibration", allow_labels=False) if opts.calibration else None
    evaluation = load_dataset(opts.eval_data, specs, "eval-data", allow_labels=True) if opts.eval_data else None
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
        evaluation = calibration
        warnings.append("no --eval-data given: validating on the calibration samples, so the accuracy figures are optimistic")
    calibration = _head(calibration, opts.max_calibration_samples)
    evaluation = _head(evaluation, opts.max_eval_samples)
    return calibration, evaluation


def _head(data: Dataset, limit: int) -> Dataset:
    if limit <= 0 or data.size <= limit:
        return data
    return Dataset({k: v[:limit] for k, v in data.arrays.items()},
                   None if data.labels is None else data.labels[:limit], data.source)


def convert(model: Any, opts: ConvertOptions, progress: Progress = Progress()) -> Dict[str, Any]:
    """Convert `model` (a spec string, or an nn.Module) for `opts.device`; returns the manifest."""
    profile = load_profile(opts.device)
    source = _source(model, opts)
    specs = resolve_specs(source, opts.input_shapes, opts.input_dtypes)
    notes: List[str] = []
    warnings: List[str] = []
    calibration, evaluation = _datasets(source, specs, opts, notes, warnings)
    plan = make_plan(profile, opts.formats, opts.precisions, source.kind, opts.calibrate_method)
    notes.extend(plan.notes)
    threads = max(1, min(opts.threads or profile.default_threads, os.cpu_count() or 1))
    if (opts.threads or profile.default_threads) > threads:
        notes.append(f"host timing uses {threads} threads (this machine's cores), the profile asks for {profile.default_threads}")
    for warning in warnings:
        progress.note(f"warning: {warning}")

    out = Path(opts.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".edgeopt-build-", dir=out))
    try:
        ctx = _Context(profile, source, specs, calibration, evaluation, threads, work, notes, warnings)
        records = _build_all(ctx, plan.artifacts, opts, progress)
        _check_budget(records, opts.max_accuracy_drop)
        rec = recommend(records, profile, opts.recommend_budget, measured=opts.time_on_host and profile.matches_host())
        manifest = build_manifest(ctx, records, rec, opts)
        for record in records:
            os.replace(work / record.path, out / record.path)
        write_manifest(manifest, out / "manifest.json")
        return manifest
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _source(model: Any, opts: ConvertOptions) -> SourceModel:
    if isinstance(model, (str, os.PathLike)):
        return load_source(str(model), opts.weights)
    from edgeopt_agent.errors import require

    torch = require("torch", "convert")
    if isinstance(model, torch.nn.Module):
        import hashlib

        digest = hashlib.sha256()
        for tensor in model.state_dict().values():
            digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
        return SourceModel("module", type(model).__name__, digest.hexdigest(), module=model.eval())
    raise UserError(f"model must be a path/spec string or a torch.nn.Module, got {type(model).__name__}")


def _build_all(ctx: _Context, planned: List[PlannedArtifact], opts: ConvertOptions, progress: Progress) -> List[ArtifactRecord]:
    eval_batch = ctx.specs[0].shape[0]
    with progress.step("FP32 reference", ctx.evaluation.size) as advance:
        reference = acc.collect_outputs(reference_predictor(ctx.source, ctx.specs), ctx.evaluation, eval_batch, advance)
    records: List[ArtifactRecord] = []
    onnx_fp32: Optional[Path] = None
    onnx_dynamic = False
    for item in planned:
        target = ctx.work / item.filename
        if item.format == "onnx" and item.precision == "fp32":
            with progress.step("export ONNX FP32", 1) as advance:
                result = ExportOnnx(OnnxExportOptions(opset=opts.opset)).run(ctx.source, ctx.specs, target)
                onnx_fp32, onnx_dynamic = result.path, result.dynamic_batch
                advance()
        elif item.format == "onnx" and item.precision == "int8":
            with progress.step(f"calibrate ONNX INT8 ({item.int8.scheme})", ctx.calibration.size) as advance:
                QuantizeOnnxInt8(item.int8).run(onnx_fp32, ctx.calibration, target, eval_batch, advance)
        elif item.format == "onnx" and item.precision == "fp16":
            with progress.step("convert ONNX FP16", 1) as advance:
                ConvertOnnxFp16().run(onnx_fp32, target)
                advance()
        elif item.format == "tflite":
            total = ctx.calibration.size if item.precision == "int8" else 1
            label = "calibrate TFLite INT8 (PT2E)" if item.precision == "int8" else "export TFLite FP32"
            with progress.step(label, total) as advance:
                ExportTflite(TfliteOptions(item.precision)).run(
                    ctx.source, ctx.specs, target, ctx.calibration if item.precision == "int8" else None, advance)
                if item.precision == "fp32":
                    advance()
        else:
            raise UserError(f"{item.format} {item.precision} artifacts are not supported")
        with progress.step(f"validate {item.key}", ctx.evaluation.size) as advance:
            with captured_output(f"load {item.key}"):  # runtimes announce delegates on fd 2
                predictor = open_predictor(target, ctx.threads)
            try:
                outputs = acc.collect_outputs(predictor.predict, ctx.evaluation, eval_batch, advance)
                io = predictor.io()
            finally:
                predictor.close()
        accuracy = acc.compare(reference, outputs, ctx.evaluation.labels)
        records.append(ArtifactRecord(item, item.filename, accuracy, io,
                                      dynamic_batch=onnx_dynamic if item.format == "onnx" else False))
    if opts.time_on_host:
        _time_all(ctx, records, progress)
    return records


def _time_all(ctx: _Context, records: List[ArtifactRecord], progress: Progress, rounds: int = 7) -> None:
    feed = {k: v[: ctx.specs[0].shape[0]] for k, v in ctx.evaluation.arrays.items()}
    with captured_output("load artifacts for timing"):
        predictors = {r.planned.key: open_predictor(ctx.work / r.path, ctx.threads) for r in records}
    try:
        runs = {key: p.bound_call(feed) for key, p in predictors.items()}
        with progress.step(f"time on host (batch {ctx.specs[0].shape[0]}, {ctx.threads} threads)", rounds) as advance:
            timings = time_interleaved(runs, rounds=rounds, on_round=advance)
    finally:
        for p in predictors.values():
            p.close()
    for record in records:
        record.host_timing = timings[record.planned.key]


def _check_budget(records: List[ArtifactRecord], max_drop: Optional[float]) -> None:
    if max_drop is None:
        return
    over = [(r.planned.key, r.accuracy.drop_points) for r in records
            if r.accuracy.drop_points is not None and r.accuracy.drop_points > max_drop]
    if over:
        detail = ", ".join(f"{key} lost {drop:.2f} points" for key, drop in over)
        raise UserError(f"accuracy budget exceeded (--max-accuracy-drop {max_drop}): {detail}; "
                        f"try more representative --calibration data or --calibrate-method entropy/percentile")
