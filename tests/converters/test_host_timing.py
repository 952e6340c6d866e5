"""Host timing opens every ONNX artifact so that a session waiting for its turn leaves the cores alone."""
import contextlib
from types import SimpleNamespace

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h

from edgeopt_converters.cost import time_artifacts
from edgeopt_converters.cost.host_timing import ORT_SIDE_BY_SIDE, drift, ratio_interval, time_interleaved
from edgeopt_converters.runtime import open_predictor


def test_onnxruntime_runs_a_model_with_the_side_by_side_settings(tmp_path):
    graph = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 4])],
                         [h.make_tensor_value_info("y", T.FLOAT, [1, 4])])
    path = tmp_path / "relu.onnx"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), str(path))
    predictor = open_predictor(path, 1, ORT_SIDE_BY_SIDE)
    (out,) = predictor.predict({"x": np.array([[-1, 0, 2, -3]], np.float32)})
    assert out.tolist() == [[0, 0, 2, 0]]
    assert predictor.runner.session_config == ORT_SIDE_BY_SIDE


def test_timed_onnx_artifacts_stop_spinning_between_runs_and_others_get_no_onnx_settings(monkeypatch, tmp_path):
    opened = {}

    def fake_open(path, threads, session_config=None):
        opened[path.name] = session_config
        return SimpleNamespace(bound_call=lambda feed: (lambda: None), close=lambda: None)

    monkeypatch.setattr(time_artifacts, "open_predictor", fake_open)
    records = [SimpleNamespace(planned=SimpleNamespace(key=f"{fmt}-{p}", format=fmt, precision=p), path=f"{fmt}-{p}",
                               host_timing=None)
               for fmt, p in (("onnx", "fp32"), ("onnx", "int8"), ("tflite", "int8"))]
    ctx = SimpleNamespace(work=tmp_path, threads=1, batch=1, evaluation=SimpleNamespace(first_feed=lambda batch: {}))
    progress = SimpleNamespace(step=lambda *a: contextlib.nullcontext(lambda: None))
    time_artifacts.time_artifacts(ctx, records, progress, max_rounds=5)
    assert opened == {"onnx-fp32": ORT_SIDE_BY_SIDE, "onnx-int8": ORT_SIDE_BY_SIDE, "tflite-int8": None}
    assert all(r.host_timing is not None for r in records)


def test_a_few_rounds_taken_by_another_process_do_not_move_the_speedup():
    rng = np.random.default_rng(0)
    baseline = list(10.0 * (1 + 0.02 * rng.standard_normal(20)))
    candidate = [b / 2.0 for b in baseline]
    for i in (3, 9, 15):  # the baseline's turn ran while something else held a core
        baseline[i] *= 5
    measured = ratio_interval(baseline, candidate)
    assert 1.9 < measured.estimate < 2.1
    assert measured.low <= 2.0 <= measured.high
    mean_of_logs = float(np.exp(np.mean(np.log(np.array(baseline) / np.array(candidate)))))
    assert mean_of_logs > 2.5, "the mean of the log ratios, used before, is pulled far off by those rounds"


def test_a_speedup_that_moves_while_it_is_measured_is_called_drift():
    baseline = [10.0] * 16
    candidate = [5.0] * 8 + [3.33] * 8
    assert abs(drift(baseline, candidate) - 0.5) < 0.01
    assert drift([10.0] * 6, [5.0] * 6) is None, "too few rounds to split"
    assert drift([10.0] * 12, [5.0] * 12) == 0.0


def test_each_round_starts_with_another_variant_and_the_load_is_recorded():
    order = []
    runs = {key: (lambda k: (lambda: order.append(k)))(key) for key in ("a", "b", "c")}
    timings = time_interleaved(runs, {"b": "a", "c": "a"}, min_rounds=3, max_rounds=3, warmup=0, min_round_s=0.0)
    assert order == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert timings["a"].load is not None and len(timings["a"].load) == 2
    assert "load" in timings["b"].to_dict() and timings["b"].speedup.baseline == "a"


def _noisy_runs(monkeypatch, ratio, spread, seed=1):
    """A baseline and a candidate `ratio` times faster, each call's time drawn with `spread`; the module's
    clock advances by what each call 'took', so rounds and caps are counted without waiting."""
    from edgeopt_converters.cost import host_timing

    clock = [0.0]
    rng = np.random.default_rng(seed)
    monkeypatch.setattr(host_timing.time, "perf_counter", lambda: clock[0])

    def run(ms):
        def call():
            clock[0] += ms * rng.uniform(1 - spread, 1 + spread) / 1000
        return call

    return {"fp32": run(100.0), "int8": run(100.0 / ratio)}


def test_a_speedup_the_rounds_have_not_decided_gets_more_rounds(monkeypatch):
    """On a busy host a real 1.2x can still hold 1.05 in its interval when the minute is up: rounds go on
    (up to twice the caps) while more of them may decide it, and stop at the caps once nothing is left open."""
    runs = _noisy_runs(monkeypatch, ratio=1.2, spread=0.45)
    plain = time_interleaved(runs, {"int8": "fp32"}, max_rounds=10, max_seconds=3.0, min_round_s=0.0)
    assert plain["int8"].rounds == 10 and plain["int8"].speedup.low < 1.05, "the cap ends it undecided"
    runs = _noisy_runs(monkeypatch, ratio=1.2, spread=0.45)
    more = time_interleaved(runs, {"int8": "fp32"}, max_rounds=10, max_seconds=3.0, min_round_s=0.0,
                            decide_at=1.05, extra_seconds=60.0)
    assert more["int8"].rounds > 10
    clear = time_interleaved(_noisy_runs(monkeypatch, ratio=3.0, spread=0.01), {"int8": "fp32"}, max_rounds=10,
                             max_seconds=3.0, min_round_s=0.0, decide_at=1.05, extra_seconds=60.0)
    assert clear["int8"].rounds == 5, "known within 5 % after the minimum rounds: nothing to add"
