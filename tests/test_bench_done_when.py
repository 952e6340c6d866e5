"""The benchmark's done-when summary (scripts/done_when.py) and the paired task test (scripts/bench_case.py)
on synthetic rows: no model runs."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from bench_case import mcnemar_worse_p, not_worse  # noqa: E402
from done_when import done_when, done_when_lines, measured_speedup, predicted_speedup  # noqa: E402

KINDS = {"onnx-fp32": [{"name": "out", "kind": "classes", "kind_source": "given", "kind_why": "given"}],
         "onnx-int8": [{"name": "out", "kind": "classes", "kind_source": "given", "kind_why": "given"}]}


def _row(speedup: str, kept: bool = True, predicted: str = None) -> dict:
    row = {"verdict": "ok", "task": "figure", "task_kept": kept, "speedup": speedup}
    if predicted:
        row["predicted"] = predicted
    return row


def _model(recommended: str, **rows) -> dict:
    return {"fp32": _row("1.00x"), **rows,
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


def test_speedups_parse_from_the_table_strings():
    assert measured_speedup({"speedup": "1.23x [1.10, 1.30]"}) == (1.23, 1.10, 1.30)
    assert measured_speedup({"speedup": "1.00x"}) == (1.0, 1.0, 1.0)
    assert predicted_speedup({"predicted": "4.100 ms, 2.50x FP32"}) == 2.5
    assert predicted_speedup({"predicted": "4.100 ms"}) is None


def test_pick_reaching_the_fastest_keeping_int8_passes_everything():
    rows = _model("onnx-int8", edgeopt=_row("1.90x [1.80, 2.00]"), **{"edgeopt:onnx-int8": _row("1.95x [1.85, 2.05]")},
                  **{"ort-static": _row("2.00x [1.90, 2.10]"), "ort-dynamic": _row("3.00x [2.9, 3.1]", kept=False)})
    summary = done_when({"m": rows}, "x86-64")
    m = summary["models"]["m"]
    assert [m[c]["pass"] for c in "abcde"] == [True, True, True, True, True]
    assert m["c"]["best"] == "ort-static" and m["c"]["share"] == pytest.approx(0.95)
    assert "ort-dynamic loses the task" in m["d"]["detail"]
    assert summary["overall"] == "PASS"


def test_fp32_pick_behind_a_keeping_default_int8_fails_c_and_d():
    rows = _model("onnx-fp32", **{"edgeopt:onnx-int8": _row("1.10x [1.0, 1.2]"), "ort-static": _row("1.50x [1.40, 1.60]"),
                                  "ort-dynamic": {"error": "failed: crash"}})
    summary = done_when({"m": rows}, "x86-64")
    m = summary["models"]["m"]
    assert m["b"]["pass"] is True
    assert m["c"]["pass"] is False and m["c"]["share"] == pytest.approx(1 / 1.5)
    assert m["d"]["pass"] is False and "ort-dynamic did not run" in m["d"]["detail"]
    assert summary["overall"] == "FAIL"
    assert done_when_lines(summary)[-1].startswith("overall FAIL")


def test_measured_default_within_the_picks_interval_is_not_ahead():
    rows = _model("onnx-int8", edgeopt=_row("1.40x [1.30, 1.55]"), **{"ort-static": _row("1.50x [1.45, 1.55]")})
    assert done_when({"m": rows}, "x86-64")["models"]["m"]["d"]["pass"] is True


def test_recommended_artifact_that_loses_the_task_fails_b():
    rows = _model("onnx-int8", edgeopt=_row("2.00x [1.9, 2.1]", kept=False))
    m = done_when({"m": rows}, "x86-64")["models"]["m"]
    assert m["b"]["pass"] is False
    assert m["c"]["pass"] is True and m["c"]["best"] is None


def test_board_rows_are_compared_on_predicted_speed():
    rows = _model("onnx-int8", edgeopt=_row("0.80x [0.7, 0.9]", predicted="1 ms, 2.00x FP32"),
                  **{"ort-static": _row("3.00x [2.9, 3.1]", predicted="0.9 ms, 2.10x FP32")})
    rows["fp32"]["predicted"] = "2 ms, 1.00x FP32"
    summary = done_when({"m": rows}, "rpi4")
    m = summary["models"]["m"]
    assert summary["speed"].startswith("predicted")
    assert m["c"]["pass"] is True and m["c"]["share"] == pytest.approx(2.0 / 2.1)
    assert m["d"]["pass"] is True  # 2.00 >= 0.9 x 2.10


def test_failed_conversion_and_missing_kind_evidence_fail():
    failed = {"fp32": _row("1.00x"), "_edgeopt": {"recommended": None, "error": "failed: RuntimeError: exit 2"}}
    no_why = _model("onnx-fp32")
    no_why["_edgeopt"]["kinds"] = {"onnx-fp32": [{"name": "out", "kind": "tensor", "kind_source": "inferred", "kind_why": ""}]}
    summary = done_when({"broken": failed, "quiet": no_why}, "x86-64")
    assert summary["models"]["broken"]["a"]["pass"] is False
    assert summary["models"]["quiet"]["e"]["pass"] is False
    assert summary["counts"]["a"] == {"PASS": 1, "FAIL": 1, "UNKNOWN": 0, "n/a": 0}


def test_baselines_only_run_is_not_judged():
    rows = {"fp32": _row("1.00x"), "ort-static": _row("1.5x [1.4, 1.6]"),
            "_edgeopt": {"recommended": None, "error": "not run (--no-edgeopt)"}}
    summary = done_when({"m": rows}, "rpi4")
    assert all(summary["models"]["m"][c]["pass"] is None for c in "abcde")
    assert summary["overall"].startswith("n/a")


def test_task_result_prints_its_figure_and_decision():
    from bench_case import TaskResult

    assert str(TaskResult("top-1 0.91", False, "McNemar")) == "top-1 0.91 (does not keep the task)"
    assert type(TaskResult("", np.float64(0.99) >= 0.98, "").kept) is bool


def test_results_from_before_task_judgements_are_unknown_not_passed():
    rows = {"fp32": {"verdict": "ok", "speedup": "1.00x"}, "edgeopt": {"verdict": "ok", "speedup": "1.5x [1.4, 1.6]"},
            "ort-static": {"verdict": "ok", "speedup": "1.6x [1.5, 1.7]"},
            "_edgeopt": {"recommended": "onnx-int8", "failed_artifacts": []}}
    summary = done_when({"m": rows}, "x86-64")
    assert [summary["models"]["m"][c]["pass"] for c in "bce"] == ["unknown"] * 3
    assert summary["overall"] == "UNKNOWN"


def test_a_keeping_artifact_without_a_speed_leaves_c_unknown():
    """A board run whose baseline the roofline could not read: (c) cannot say nothing was faster."""
    rows = _model("onnx-fp32", **{"ort-static": _row("3.00x [2.9, 3.1]")})
    rows["fp32"]["predicted"] = "2 ms, 1.00x FP32"
    summary = done_when({"m": rows}, "rpi4", predicted=True)
    c = summary["models"]["m"]["c"]
    assert c["pass"] == "unknown" and "no speed for ort-static" in c["detail"]


def test_the_speed_mode_is_the_callers_not_guessed_from_rows():
    rows = _model("onnx-int8", edgeopt=_row("1.50x [1.4, 1.6]"))
    assert done_when({"m": rows}, "rpi4", predicted=True)["speed"].startswith("predicted")
    assert done_when({"m": rows}, "x86-64", predicted=False)["speed"] == "measured on this host"
