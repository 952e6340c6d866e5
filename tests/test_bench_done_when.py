"""The benchmark's done-when summary (realbench.done_when) and the paired task test (realbench.case) on
synthetic rows: no model runs. Rows hold numbers (realbench.results), as a run writes them."""
from __future__ import annotations

import numpy as np
import pytest

from realbench.case import mcnemar_worse_p, not_worse
from realbench.done_when import done_when, done_when_lines
from realbench.report import predicted_text, speed_text
from realbench.results import Interval, measured_speedup, predicted_speedup

KINDS = {"onnx-fp32": [{"name": "out", "kind": "classes", "kind_source": "given", "kind_why": "given"}],
         "onnx-int8": [{"name": "out", "kind": "classes", "kind_source": "given", "kind_why": "given"}]}


def _speed(estimate: float, low: float = None, high: float = None) -> dict:
    return Interval(estimate, estimate if low is None else low, estimate if high is None else high).as_dict()


def _predicted(ms: float, speedup: float = None) -> dict:
    return {"ms": ms, "speedup": speedup}


def _row(speedup: dict, kept: bool = True, predicted: dict = None) -> dict:
    row = {"verdict": "ok", "task": "figure", "task_kept": kept, "speedup": speedup}
    if predicted:
        row["predicted"] = predicted
    return row


def _model(recommended: str, **rows) -> dict:
    return {"fp32": _row(_speed(1.0)), **rows,
            "_edgeopt": {"recommended": recommended, "failed_artifacts": [], "kinds": KINDS}}


def test_mcnemar_counts_only_discordant_samples():
    ref = np.array([True] * 50 + [False] * 10)
    assert mcnemar_worse_p(ref, ref) == 1.0
    lost5 = ref.copy()
    lost5[:5] = False
    assert mcnemar_worse_p(ref, lost5) == pytest.approx(0.5 ** 5)
    assert not_worse(ref, lost5)[0] is False
    lost4 = ref.copy()
    lost4[:4] = False
    assert not_worse(ref, lost4)[0] is True  # 4 of 4 discordant: p = 0.0625, not measurable at 95 %
    lost5_gained2 = lost5.copy()
    lost5_gained2[50:52] = True
    assert mcnemar_worse_p(ref, lost5_gained2) == pytest.approx(29 / 128)


def test_speedups_are_numbers_and_the_table_strings_are_made_from_them():
    assert measured_speedup({"speedup": _speed(1.23, 1.10, 1.30)}) == Interval(1.23, 1.10, 1.30)
    assert speed_text({"speedup": _speed(1.23, 1.10, 1.30)}) == "1.23x [1.10, 1.30]"
    assert measured_speedup({"speedup": _speed(1.0)}) == Interval(1.0, 1.0, 1.0)
    assert speed_text({"speedup": _speed(1.0)}) == "1.00x"
    assert predicted_speedup({"predicted": _predicted(4.1, 2.5)}) == 2.5
    assert predicted_text({"predicted": _predicted(4.1, 2.5)}) == "4.100 ms, 2.50x FP32"
    assert predicted_speedup({"predicted": _predicted(4.1)}) is None
    assert predicted_text({"predicted": _predicted(4.1)}) == "4.100 ms"
    assert measured_speedup({"speedup": "1.23x [1.10, 1.30]"}) is None  # printed text is never read back


def test_pick_reaching_the_fastest_keeping_int8_passes_everything():
    rows = _model("onnx-int8", edgeopt=_row(_speed(1.90, 1.80, 2.00)), **{"edgeopt:onnx-int8": _row(_speed(1.95, 1.85, 2.05))},
                  **{"ort-static": _row(_speed(2.00, 1.90, 2.10)), "ort-dynamic": _row(_speed(3.00, 2.9, 3.1), kept=False)})
    summary = done_when({"m": rows}, "x86-64")
    m = summary["models"]["m"]
    assert [m[c]["pass"] for c in "abcde"] == [True, True, True, True, True]
    assert m["c"]["best"] == "ort-static" and m["c"]["share"] == pytest.approx(0.95)
    assert "ort-dynamic loses the task" in m["d"]["detail"]
    assert summary["overall"] == "PASS"


def test_fp32_pick_behind_a_keeping_default_int8_fails_c_and_d():
    rows = _model("onnx-fp32", **{"edgeopt:onnx-int8": _row(_speed(1.10, 1.0, 1.2)), "ort-static": _row(_speed(1.50, 1.40, 1.60)),
                                  "ort-dynamic": {"error": "failed: crash"}})
    summary = done_when({"m": rows}, "x86-64")
    m = summary["models"]["m"]
    assert m["b"]["pass"] is True
    assert m["c"]["pass"] is False and m["c"]["share"] == pytest.approx(1 / 1.5)
    assert m["d"]["pass"] is False and "ort-dynamic did not run" in m["d"]["detail"]
    assert summary["overall"] == "FAIL"
    assert done_when_lines(summary)[-1].startswith("overall FAIL")


def test_measured_default_within_the_picks_interval_is_not_ahead():
    rows = _model("onnx-int8", edgeopt=_row(_speed(1.40, 1.30, 1.55)), **{"ort-static": _row(_speed(1.50, 1.45, 1.55))})
    assert done_when({"m": rows}, "x86-64")["models"]["m"]["d"]["pass"] is True


def test_recommended_artifact_that_loses_the_task_fails_b():
    rows = _model("onnx-int8", edgeopt=_row(_speed(2.00, 1.9, 2.1), kept=False))
    m = done_when({"m": rows}, "x86-64")["models"]["m"]
    assert m["b"]["pass"] is False
    assert m["c"]["pass"] is True and m["c"]["best"] is None


def test_board_rows_are_compared_on_predicted_speed():
    rows = _model("onnx-int8", edgeopt=_row(_speed(0.80, 0.7, 0.9), predicted=_predicted(1, 2.00)),
                  **{"ort-static": _row(_speed(3.00, 2.9, 3.1), predicted=_predicted(0.9, 2.10))})
    rows["fp32"]["predicted"] = _predicted(2, 1.00)
    summary = done_when({"m": rows}, "rpi4")
    m = summary["models"]["m"]
    assert summary["speed"].startswith("predicted")
    assert m["c"]["pass"] is True and m["c"]["share"] == pytest.approx(2.0 / 2.1)
    assert m["d"]["pass"] is True  # 2.00 >= 0.9 x 2.10


def test_failed_conversion_and_missing_kind_evidence_fail():
    failed = {"fp32": _row(_speed(1.00)), "_edgeopt": {"recommended": None, "error": "failed: RuntimeError: exit 2"}}
    no_why = _model("onnx-fp32")
    no_why["_edgeopt"]["kinds"] = {"onnx-fp32": [{"name": "out", "kind": "tensor", "kind_source": "inferred", "kind_why": ""}]}
    summary = done_when({"broken": failed, "quiet": no_why}, "x86-64")
    assert summary["models"]["broken"]["a"]["pass"] is False
    assert summary["models"]["quiet"]["e"]["pass"] is False
    assert summary["counts"]["a"] == {"PASS": 1, "FAIL": 1, "UNKNOWN": 0, "n/a": 0}


def test_baselines_only_run_is_not_judged():
    rows = {"fp32": _row(_speed(1.00)), "ort-static": _row(_speed(1.5, 1.4, 1.6)),
            "_edgeopt": {"recommended": None, "error": "not run (--no-edgeopt)"}}
    summary = done_when({"m": rows}, "rpi4")
    assert all(summary["models"]["m"][c]["pass"] is None for c in "abcde")
    assert summary["overall"].startswith("n/a")


def test_task_result_prints_its_figure_and_decision():
    from realbench.case import TaskResult

    assert str(TaskResult("top-1 0.91", False, "McNemar")) == "top-1 0.91 (does not keep the task)"
    assert type(TaskResult("", np.float64(0.99) >= 0.98, "").kept) is bool


def test_results_from_before_task_judgements_are_unknown_not_passed():
    rows = {"fp32": {"verdict": "ok", "speedup": _speed(1.00)}, "edgeopt": {"verdict": "ok", "speedup": _speed(1.5, 1.4, 1.6)},
            "ort-static": {"verdict": "ok", "speedup": _speed(1.6, 1.5, 1.7)},
            "_edgeopt": {"recommended": "onnx-int8", "failed_artifacts": []}}
    summary = done_when({"m": rows}, "x86-64")
    assert [summary["models"]["m"][c]["pass"] for c in "bce"] == ["unknown"] * 3
    assert summary["overall"] == "UNKNOWN"


def test_a_keeping_artifact_without_a_speed_leaves_c_unknown():
    """A board run whose baseline the roofline could not read: (c) cannot say nothing was faster."""
    rows = _model("onnx-fp32", **{"ort-static": _row(_speed(3.00, 2.9, 3.1))})
    rows["fp32"]["predicted"] = _predicted(2, 1.00)
    summary = done_when({"m": rows}, "rpi4", predicted=True)
    c = summary["models"]["m"]["c"]
    assert c["pass"] == "unknown" and "no speed for ort-static" in c["detail"]


def test_the_speed_mode_is_the_callers_not_guessed_from_rows():
    rows = _model("onnx-int8", edgeopt=_row(_speed(1.50, 1.4, 1.6)))
    assert done_when({"m": rows}, "rpi4", predicted=True)["speed"].startswith("predicted")
    assert done_when({"m": rows}, "x86-64", predicted=False)["speed"] == "measured on this host"


def _issue36(**edgeopt) -> dict:
    return {"artifacts": [{"key": "onnx-fp32", "format": "onnx", "precision": "fp32"},
                          {"key": "onnx-int8", "format": "onnx", "precision": "int8"}], **edgeopt}


def test_issue36_passes_when_the_pick_is_the_fastest_keeping_int8_and_everything_is_listed():
    rows = _model("onnx-int8", edgeopt=_row(_speed(1.9, 1.8, 2.0)), **{"edgeopt:onnx-int8": _row(_speed(1.95, 1.85, 2.05))},
                  **{"ort-static": _row(_speed(2.0, 1.9, 2.1)), "ort-dynamic": _row(_speed(0.5), kept=False)})
    rows["_edgeopt"].update(_issue36(int8={"onnx-int8": {"verdict": "ok", "tries": []}}))
    summary = done_when({"m": rows}, "x86-64")
    m = summary["models"]["m"]
    assert [m[c]["pass"] for c in "fgh"] == [True, True, True]
    assert m["h"]["best"] == "ort-static" and m["h"]["share"] == pytest.approx(0.95)
    assert summary["overall_by_issue"] == {"issue 26": "PASS", "issue 36": "PASS"}
    assert done_when_lines(summary)[-1].startswith("overall PASS (issue 36)")


def test_an_int8_neither_built_nor_listed_fails_f():
    rows = _model("onnx-fp32")
    rows["_edgeopt"].update(artifacts=[{"key": "onnx-fp32", "format": "onnx", "precision": "fp32"}], failed_artifacts=[])
    m = done_when({"m": rows}, "x86-64")["models"]["m"]
    assert m["f"]["pass"] is False and m["f"]["unaccounted"] == ["int8"]
    rows["_edgeopt"]["failed_artifacts"] = [{"key": "onnx-int8", "format": "onnx", "precision": "int8",
                                             "cause": "quantize_static failed"}]
    assert done_when({"m": rows}, "x86-64")["models"]["m"]["f"]["pass"] is True


def test_a_keeping_default_int8_with_no_search_fails_g_and_a_slow_fp32_pick_fails_h():
    rows = _model("onnx-fp32", **{"edgeopt:onnx-int8": _row(_speed(2.0), kept=False), "ort-static": _row(_speed(1.5))})
    rows["_edgeopt"].update(_issue36(int8={"onnx-int8": {"verdict": "unresolved", "tries": [],
                                                         "mixed": "stopped at the time budget after 0 attempts"}}))
    summary = done_when({"m": rows}, "x86-64")
    m = summary["models"]["m"]
    assert m["g"]["pass"] is False and "0 attempts" in m["g"]["detail"]
    assert m["h"]["pass"] is False and m["h"]["best"] == "ort-static" and m["h"]["share"] == pytest.approx(1 / 1.5)
    assert summary["overall_by_issue"]["issue 36"] == "FAIL"
    rows["_edgeopt"]["int8"]["onnx-int8"]["tries"] = [{"stage": "per-tensor", "verdict": "failed"}]
    assert done_when({"m": rows}, "x86-64")["models"]["m"]["g"]["pass"] is True


def test_where_no_int8_keeps_the_task_g_and_h_do_not_apply():
    rows = _model("onnx-fp32", **{"edgeopt:onnx-int8": _row(_speed(2.0), kept=False), "ort-static": _row(_speed(1.5), kept=False)})
    rows["_edgeopt"].update(_issue36(int8={"onnx-int8": {"verdict": "failed", "tries": []}}))
    m = done_when({"m": rows}, "x86-64")["models"]["m"]
    assert m["g"]["pass"] is None and m["h"]["pass"] is None
