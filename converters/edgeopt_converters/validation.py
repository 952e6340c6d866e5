"""Judging one artifact against the FP32 reference: its outputs on the evaluation data, per output kind,
streamed through its own state where the model is stateful."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np

from . import accuracy as acc
from .accuracy.streaming import check_pairs, find_state_pairs, stream
from .context import ConversionContext, Judging
from .passes._quiet import captured_output
from .precision.host_int8 import validation_session_config
from .recipe import PlannedArtifact
from .runtime import accuracy_predictor

Io = Dict[str, List[dict]]


def validate(ctx: ConversionContext, item: PlannedArtifact, target: Path, advance=None) -> Tuple[acc.Accuracy, Io]:
    """The artifact's accuracy verdict against FP32 and its inputs/outputs as the runtime reports them."""
    session_config = _exact_int8_config(ctx, item)
    with captured_output(f"load {item.key}"):  # runtimes announce delegates on fd 2
        predictor = accuracy_predictor(target, ctx.accuracy_runs.threads, session_config)
    axes = () if predictor.samples_on_axis_0 else ctx.accuracy_runs.sample_axes  # ncnn's runner stacks them itself
    try:
        outputs = acc.collect_outputs(predictor.predict, ctx.evaluation, _samples_per_run(ctx, item, predictor),
                                      advance, axes)
        io = predictor.io()
        judging = ctx.judging_for(lambda: _decide_judging(ctx, item, io))
        accuracy = acc.compare(ctx.reference, outputs, ctx.evaluation.labels, judging.names, judging.kinds,
                               ctx.tolerances, ctx.metric)
        if judging.state_pairs:
            accuracy = _judge_streamed(ctx, judging, accuracy, predictor.predict, axes)
    finally:
        predictor.close()
    return accuracy, io


def _samples_per_run(ctx: ConversionContext, item: PlannedArtifact, predictor) -> int:
    """The reference's samples per run where the artifact takes any batch size and computes each sample
    alone (not an INT8 whose activation scales come from the whole run); else the model's own batch."""
    runs = ctx.accuracy_runs.batch
    if runs == 1 or item.scales_per_run:
        return ctx.batch
    takes_any = all(i.get("shape") and not (isinstance(i["shape"][0], int) and i["shape"][0] >= 0)
                    for i in predictor.io()["inputs"])
    return ctx.batch * runs if takes_any else ctx.batch


def _exact_int8_config(ctx: ConversionContext, item: PlannedArtifact) -> Dict[str, str]:
    """Session settings that make this host compute a static INT8 artifact as its target will."""
    if item.int8 is None:
        return {}
    config = validation_session_config(item.precision, item.format, item.int8.reduce_range)
    note = ("INT8 ONNX artifacts with 8-bit weights are validated with quantize/dequantize unfused: this host's "
            "onnxruntime INT8 kernels (x86 without VNNI) saturate such weights, the target's do not")
    if config and note not in ctx.notes:
        ctx.note(note)
    return config


def _decide_judging(ctx: ConversionContext, item: PlannedArtifact, io: Io) -> Judging:
    """Output names (ONNX names where the first artifact is ONNX), their kinds, and state pairs."""
    opts = ctx.options
    reference = ctx.reference
    names = [o["name"] for o in io["outputs"]] if item.format == "onnx" and len(io["outputs"]) == len(reference) \
        else [f"output_{i}" for i in range(len(reference))]
    given = acc.kinds.check_output_names(opts.output_kinds, names)
    feed, _ = next(ctx.evaluation.batches(ctx.batch))
    pairs = dict(opts.state)
    check_pairs(pairs, list(feed), names)
    if not pairs:
        step = dict(zip(names, (np.asarray(o) for o in ctx.reference_predict(feed))))
        pairs = find_state_pairs(feed, step)
        if pairs:
            ctx.note("stateful model: " + ", ".join(f"output {o} feeds input {i}" for i, o in pairs.items())
                             + f"; artifacts are also judged streamed through up to {opts.stream_steps} steps "
                               f"(override with --state INPUT=OUTPUT)")
    if pairs and ctx.evaluation.size < 2:
        ctx.warn("the model is stateful but the evaluation data has one sample: nothing to stream")
        pairs = {}
    kinds = acc.decide_kinds(names, reference, given, list(pairs.values()),
                             producers=acc.graph_evidence(ctx.float_artifact("onnx")), labels=ctx.evaluation.labels,
                             input_hw=acc.image_input_hw([s.shape for s in ctx.specs]))
    return Judging(names, kinds, pairs, min(opts.stream_steps, ctx.evaluation.size // ctx.batch))


def _judge_streamed(ctx: ConversionContext, judging: Judging, accuracy: acc.Accuracy, predict,
                    axes) -> acc.Accuracy:
    """`accuracy` with the streamed judgement added: `predict` streamed through its own state, its outputs'
    samples moved first from `axes`, against the reference's (moved from the reference's own axes)."""
    steps = judging.stream_steps
    reference = ctx.streamed_reference_for(lambda: stream(ctx.reference_predict, ctx.evaluation, ctx.batch,
                                                          judging.state_pairs, judging.names, steps,
                                                          ctx.accuracy_runs.sample_axes))
    candidate = stream(predict, ctx.evaluation, ctx.batch, judging.state_pairs, judging.names, steps, axes)
    streamed = acc.judge_all([f"{n}@stream" for n in judging.names], judging.kinds, reference,
                             candidate, None, ctx.tolerances)
    return replace(accuracy, streamed=streamed, stream_steps=steps)
