"""The repair loop runs whenever INT8 is not ok: failed, or unresolved with decisions lost that a split may
win back (issue 36: a detector's INT8 judged unresolved was never searched). Unresolved with nothing lost is
the data's doing: no split changes it, and the note says how many samples would."""
from types import SimpleNamespace

from edgeopt_converters.accuracy.intervals import Bounds
from edgeopt_converters.context import ConversionContext
from edgeopt_converters.precision.follow_ups import _can_improve


def _record(verdict, *judged, trials=1000):
    judgements = [SimpleNamespace(name="output", verdict=v, samples_needed=needed, trials=trials,
                                  loss_points=None if lost is None else Bounds(lost, 0.0, lost + 0.02))
                  for v, lost, needed in judged]
    accuracy = SimpleNamespace(verdict=verdict, judgements=judgements, metric=None, samples=256, reason="open")
    return SimpleNamespace(accuracy=accuracy, planned=SimpleNamespace(key="onnx-int8"))


class FakeContext(SimpleNamespace):
    """The few fields a test gives, written through the real context's recording methods."""

    note, warn, extend_reference = ConversionContext.note, ConversionContext.warn, ConversionContext.extend_reference


def _ctx():
    return FakeContext(notes=[], tolerances=SimpleNamespace(budget_points=1.0))


def test_failed_and_unresolved_with_losses_are_searched():
    ctx = _ctx()
    assert _can_improve(ctx, _record("failed", ("failed", 0.05, None)))
    assert _can_improve(ctx, _record("unresolved", ("unresolved", 0.015, 739), ("ok", 0.0, None)))
    assert _can_improve(ctx, _record("unresolved", ("unresolved", None, None)))  # a continuous figure in doubt
    assert ctx.notes == []


def test_ok_is_not_searched_and_unresolved_without_losses_says_why():
    ctx = _ctx()
    assert not _can_improve(ctx, _record("ok", ("ok", 0.0, None)))
    assert not _can_improve(ctx, _record("unresolved", ("unresolved", 0.0, 268), ("ok", 0.0, None)))
    assert ctx.notes == ["onnx-int8: unresolved with no decision lost on 256 samples: no split can change that; "
                         "about 268 evaluation samples would decide it"]


def test_unresolved_on_too_few_decisions_for_none_lost_to_decide_is_not_searched():
    """A detector that found 6 objects in the evaluation images: even 0 of 6 missed bounds the loss at 31 %,
    so no split can make it ok; a search there only optimises noise (seen: 104 s, 191 nodes kept in float)."""
    ctx = _ctx()
    assert not _can_improve(ctx, _record("unresolved", ("unresolved", 1 / 6, 268), trials=6))
    assert ctx.notes[0].startswith("onnx-int8: unresolved with too few decisions for the data to decide even with "
                                   "none lost (output: 6): no split can change that")
    assert _can_improve(_ctx(), _record("unresolved", ("unresolved", 0.01, 900), trials=600))


def test_a_verdict_left_open_is_judged_again_on_the_data_max_eval_samples_left_out(monkeypatch, tmp_path):
    import contextlib

    import numpy as np

    from edgeopt_converters import pipeline, validation
    from edgeopt_converters.host_work import AccuracyRuns
    from edgeopt_converters.phase_clock import PhaseClock
    from edgeopt_converters.source.tensors import Dataset

    rows = np.arange(40, dtype=np.float32).reshape(40, 1)
    whole = Dataset({"x": rows}, None, "eval.npz")
    seen = []

    def judge(ctx, item, target, advance=None):
        seen.append((ctx.evaluation.size, [len(r) for r in ctx.reference]))
        return SimpleNamespace(verdict="ok", reason="decided", judgements=()), {}

    monkeypatch.setattr(validation, "validate", judge)
    open_ = _record("unresolved", ("unresolved", 0.01, 300))
    open_.path, open_.planned.key = "model.int8.onnx", "onnx-int8"
    settled = _record("ok", ("ok", 0.0, None))
    ctx = FakeContext(evaluation=whole.subset(slice(None, 10)), evaluation_all=whole, batch=1,
                          reference=[rows[:10] * 2], reference_predict=lambda feed: [feed["x"] * 2],
                          accuracy_runs=AccuracyRuns(1, 4), clock=PhaseClock(), work=tmp_path, notes=[])
    progress = SimpleNamespace(step=lambda *a: contextlib.nullcontext(lambda n=1: None))
    pipeline._judge_open_verdicts_on_more_data(ctx, [open_, settled], progress)
    assert seen == [(40, [40])], "judged once, on all 40 samples, the reference extended to them"
    assert np.array_equal(ctx.reference[0], rows * 2)
    assert open_.accuracy.verdict == "ok" and settled.accuracy.verdict == "ok"
    assert ctx.notes and ctx.notes[0].startswith("onnx-int8: unresolved on 10 evaluation samples")


def test_a_follow_up_that_raises_leaves_the_artifact_as_built_and_judged(monkeypatch):
    from edgeopt_converters.precision import follow_ups

    def broken(ctx, record, validate, progress):
        raise ValueError("the sensitivity pass met a graph it cannot read")

    monkeypatch.setitem(follow_ups.FOLLOW_UPS, "quantize-onnx-static", broken)
    record = _record("failed", ("failed", 0.05, None))
    record.planned.main_step = SimpleNamespace(name="quantize-onnx-static")
    record.info = {"inputs_of": {}}
    ctx = FakeContext(options=SimpleNamespace(strict=False), warnings=[])
    assert follow_ups.follow_up(ctx, record, None, None) == (record, [])
    assert ctx.warnings == ["onnx-int8: what follows its verdict failed (ValueError: the sensitivity pass met a graph "
                            "it cannot read); it stands as built and judged"]
