"""--time-budget bounds the mixed-precision search: an attempt that would end past it is not started,
the search keeps its best split so far and says why it stopped. The budget is the search's: exports, the
reference and the first verdicts before it do not spend it."""
from types import SimpleNamespace

from edgeopt_converters.options import ConvertOptions
from edgeopt_converters.passes.base import StepCall
from edgeopt_converters.passes.quantize_onnx import OnnxInt8Options
from edgeopt_converters.precision import mixed_precision
from edgeopt_converters.recipe import PlannedArtifact


def _search(tmp_path, seconds_left):
    planned = PlannedArtifact("onnx", "int8", "test", steps=(StepCall("quantize-onnx-static", OnnxInt8Options()),))
    accuracy = SimpleNamespace(verdict="failed", drop_points=5.0, reason="lost 5 points", min_cosine=0.9)
    record = SimpleNamespace(planned=planned, accuracy=accuracy, info={})
    ctx = SimpleNamespace(work=tmp_path, tolerances=SimpleNamespace(budget_points=1.0),
                          options=ConvertOptions(device="x86-64", time_budget=60), seconds_left=seconds_left)
    return mixed_precision._Search(ctx, record, tmp_path / "prepared.onnx", validate=None)


def test_an_attempt_that_would_overrun_the_budget_is_not_started(tmp_path, monkeypatch):
    left = iter([100.0, 5.0])
    search = _search(tmp_path, lambda: next(left))
    started = []

    def attempt(*args):
        started.append(args[0])
        return False

    monkeypatch.setattr(search, "_attempt", attempt)
    search.seconds = [30.0]  # one attempt so far took 30 s
    assert search.attempt(["a"], "sensitivity") is False, "100 s left: a 30 s attempt fits"
    assert search.attempt(["a", "b"], "sensitivity") is None, "5 s left: it would not"
    assert started == [["a"]] and search.out_of_time
    assert search.tries[-1]["verdict"] == "not tried" and "--time-budget 60 s" in search.tries[-1]["reason"]
    assert search.attempt(["c"], "sensitivity") is None and started == [["a"]], "once out of time, it stays out"


def test_no_budget_never_stops_the_search(tmp_path):
    search = _search(tmp_path, lambda: float("inf"))
    search.seconds = [1e9]
    assert not search._would_overrun()


def _judged(search, floats, stage, method, verdict="failed"):
    search.tries.append({"float_nodes": floats, "stage": stage, "verdict": verdict, "reason": "lost points",
                         "drop_points": 3.0, "cosine": 0.95, "calibrate_method": method})


def test_a_search_the_budget_stopped_says_what_it_tried_not_every_calibrator(tmp_path):
    left = iter([100.0, 100.0, 1.0])
    search = _search(tmp_path, lambda: next(left))
    search._attempt = lambda nodes, stage, method, *rest: _judged(search, len(nodes), stage, method) or False
    search.attempt(["tail"], "post-processing tail: its most sensitive node")
    search.seconds = [30.0]
    search.attempt(["tail"], "calibrator percentile", "percentile")
    search.attempt(["tail", "a", "b", "c", "d"], "calibrator entropy", "entropy")  # 1 s left: not started
    assert search.out_of_time

    text = mixed_precision.no_split_found(search, 10)
    assert "every calibrator" not in text
    assert ("no split found: in 3 judged attempts (the whole graph's included), with up to 1 of 10 quantized nodes "
            "in float and minmax and percentile calibration only (not entropy), no verdict was ok (the best: failed)") in text
    assert text.endswith("; --time-budget 60 s stopped the search before its calibrator entropy attempt, "
                         "so nothing after it was tried")


def test_a_search_that_ran_its_course_names_every_calibrator_it_judged(tmp_path):
    search = _search(tmp_path, lambda: float("inf"))
    _judged(search, 0, "calibrator percentile", "percentile")
    search.tries.append({"float_nodes": 9, "stage": "sensitivity", "verdict": "not built", "reason": "x",
                         "calibrate_method": "minmax"})
    _judged(search, 4, "calibrator entropy", "entropy")
    text = mixed_precision.no_split_found(search, 10)
    assert ("in 3 judged attempts (the whole graph's included), with up to 4 of 10 quantized nodes in float and "
            "every calibrator (minmax, percentile, entropy), no verdict was ok (the best: failed)") in text
    assert "time-budget" not in text


def test_the_budget_counts_the_search_not_what_came_before_it(monkeypatch):
    from edgeopt_converters import phase_clock
    from edgeopt_converters.context import ConversionContext

    now = [1000.0]
    monkeypatch.setattr(phase_clock.time, "monotonic", lambda: now[0])
    ctx = ConversionContext.__new__(ConversionContext)
    ctx.options = ConvertOptions(device="x86-64", time_budget=600)
    ctx.clock = phase_clock.PhaseClock()
    with ctx.clock.phase("export"):
        now[0] += 2000  # a long export and reference: 2000 s, more than the whole budget
    assert ctx.seconds_left() == 600
    with ctx.clock.phase(phase_clock.SEARCH):
        now[0] += 100
        with ctx.clock.phase("validate"):  # a search's own validation is search time
            now[0] += 50
        assert ctx.seconds_left() == 450, "an open search phase counts as it runs"
    assert ctx.seconds_left() == 450
    assert ctx.clock.totals() == {"export": 2000.0, "search": 150.0}
