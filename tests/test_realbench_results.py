"""The benchmark package's results as data (realbench.results), the BENCHMARKS.md sections made from
them (realbench.report) and the --models selection (realbench.cases): no model runs."""
import json

import pytest

from realbench import results
from realbench.cases import CASES, GROUPS, selected
from realbench.report import replace_section, summary_table


def _file(tmp_path, **models):
    run = {"device": "x86-64", "speed": "measured on this host", "host": "x86_64, test CPU", "load_before": "1.00",
           "load_after": "2.00", "started": "2026-11-27 10:00", "finished": "2026-11-27 10:05"}
    summary = {"overall": "PASS", "counts": {"a": {"PASS": 1, "FAIL": 0}}}
    path = tmp_path / "run.json"
    results.save(path, run, models, summary)
    return path


def test_results_round_trip_as_numbers_and_other_schemas_are_refused(tmp_path):
    rows = {"fp32": {"verdict": "ok", "task_kept": True, "speedup": results.FP32_SPEED.as_dict()},
            "ort-static": {"verdict": "failed", "task_kept": False, "speedup": results.Interval(1.5, 1.4, 1.6).as_dict()}}
    data = results.load(_file(tmp_path, m=rows))
    assert data["schema"] == results.SCHEMA
    assert results.measured_speedup(data["models"]["m"]["ort-static"]) == results.Interval(1.5, 1.4, 1.6)
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"m": {"fp32": {"speedup": "1.00x"}}, "_done_when": {}}))
    with pytest.raises(results.ResultsError, match="schema"):
        results.load(old)


def test_summary_table_reads_the_numbers_and_fills_a_marked_section(tmp_path):
    rows = {"fp32": {"verdict": "ok", "task_kept": True, "speedup": results.FP32_SPEED.as_dict()},
            "edgeopt:onnx-int8": {"verdict": "failed", "task_kept": False, "speedup": results.Interval(4.2, 3.2, 5.4).as_dict()},
            "ort-static": {"verdict": "failed", "task_kept": False, "speedup": results.Interval(1.91, 1.64, 2.63).as_dict()},
            "ort-dynamic": {"error": "failed: RuntimeError: boom"},
            "_edgeopt": {"recommended": "onnx-fp32", "convert_s": 63.4, "failed_artifacts": []}}
    table = summary_table([results.load(_file(tmp_path, centerface=rows))])
    assert ("| centerface | onnx-fp32 1.00x | onnx-int8 loses (failed) 4.20x [3.20, 5.40] | loses 1.91x [1.64, 2.63] | "
            "fails: RuntimeError: boom | 63.4 s | none |") in table
    assert "Done-when on x86-64: issue 26 **PASS**; (a) 1 PASS" in table
    doc = "intro\n<!-- realbench:untuned -->\nold table\n<!-- /realbench:untuned -->\nrest\n"
    assert replace_section(doc, "untuned", table) == f"intro\n<!-- realbench:untuned -->\n{table}\n<!-- /realbench:untuned -->\nrest\n"
    with pytest.raises(ValueError, match="no section 'other'"):
        replace_section(doc, "other", table)


def test_models_select_cases_and_groups_in_order_once():
    assert selected("untuned") == GROUPS["untuned"]
    assert selected("detector,untuned,detector") == ["detector"] + GROUPS["untuned"]
    assert selected("all") == list(CASES)
    assert set(GROUPS["untuned"]) | set(GROUPS["issue26"]) <= set(CASES)
    with pytest.raises(SystemExit, match="unknown model or group 'nope'"):
        selected("nope")


def test_runs_of_one_device_make_one_table_with_the_done_when_over_all(tmp_path):
    from realbench.report import by_device

    def one(model, started, finished):
        rows = {"fp32": {"verdict": "ok", "task_kept": True, "speedup": results.FP32_SPEED.as_dict()},
                "_edgeopt": {"recommended": "onnx-fp32", "failed_artifacts": [], "convert_s": 1.0}}
        data = results.load(_file(tmp_path, **{model: rows}))
        data["run"].update(started=started, finished=finished)
        return data

    merged = by_device([one("b", "10:05", "10:09"), one("a", "10:00", "10:05")])
    assert len(merged) == 1
    assert list(merged[0]["models"]) == ["b", "a"]
    assert (merged[0]["run"]["started"], merged[0]["run"]["finished"]) == ("10:00", "10:09")
    assert set(merged[0]["done_when"]["models"]) == {"a", "b"}
