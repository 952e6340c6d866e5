"""The repair loop runs whenever INT8 is not ok: failed, or unresolved with decisions lost that a split may
win back (issue 36: a detector's INT8 judged unresolved was never searched). Unresolved with nothing lost is
the data's doing: no split changes it, and the note says how many samples would."""
from types import SimpleNamespace

from edgeopt_converters.accuracy.intervals import Bounds
from edgeopt_converters.precision.follow_ups import _can_improve


def _record(verdict, *judged):
    judgements = [SimpleNamespace(verdict=v, loss_points=None if lost is None else Bounds(lost, 0.0, lost + 0.02),
                                  samples_needed=needed) for v, lost, needed in judged]
    accuracy = SimpleNamespace(verdict=verdict, judgements=judgements, metric=None, samples=256)
    return SimpleNamespace(accuracy=accuracy, planned=SimpleNamespace(key="onnx-int8"))


def _ctx():
    return SimpleNamespace(notes=[])


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
