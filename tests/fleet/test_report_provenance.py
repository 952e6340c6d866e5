"""The report says where each speed figure comes from: measured on the conversion host, predicted for
a board by the roofline, or measured on a board by the fleet; and never shows host speed-ups as a
board's when the host does not stand for it."""
from __future__ import annotations

import copy
import re
import xml.etree.ElementTree as ET

from test_report import manifest, result, section

from edgeopt.report import ReportData, render_report
from edgeopt.report.charts import FONT, Point, scatter_chart
from edgeopt.report.compare import result_views

HOST_SAYS = "measured on the conversion host (x86_64; avx2 fma)"
PREDICTED_SAYS = "predicted for rpi4 (roofline)"


def host_manifest():
    """x86-64 converted on an x86-64 host: its timings stand for the target."""
    m = copy.deepcopy(manifest())
    m["host"] = {"machine": "x86_64", "matches_target": True, "stands_for_target": True, "not_target_because": "",
                 "simd": ["avx2", "fma"], "threads": 2}
    return m


def rpi4_manifest(predictions=True):
    """rpi4 converted on an x86-64 host: timed there, but only the roofline speaks for the board."""
    m = host_manifest()
    m["device"] = "rpi4"
    m["host"].update(matches_target=False, stands_for_target=False,
                     not_target_because="rpi4 is not this machine's architecture")
    m["recommendation"] = {"key": "tflite-int8", "basis": "predicted",
                           "reason": "predicted, not measured: fastest by the roofline of each graph on rpi4"}
    predicted = {"onnx-fp32": (0.9, 1.0, "onnx-fp32"), "tflite-fp32": (0.9, 1.0, "onnx-fp32"),
                 "onnx-int8": (0.36, 2.5, "onnx-int8"), "tflite-int8": (0.36, 2.5, "onnx-int8")}
    for a in m["artifacts"]:
        ms, speedup, graph = predicted[a["key"]]
        a["predicted"] = ({"p50_ms": ms, "speedup_vs_fp32": speedup, "method": "roofline", "graph": graph}
                          if predictions else None)
    return m


def recommended_card(page: str) -> str:
    match = re.search(r'<div class="name">recommended</div><div class="detail">([^<]*)</div>', page)
    assert match, "no recommended card"
    return match.group(1)


def test_host_measured_figures_say_which_host_measured_them():
    page = render_report(ReportData(manifest=host_manifest()))
    assert recommended_card(page) == "measured on the conversion host (x86_64)"  # the flags are in the sections
    accuracy = section(page, "accuracy")
    assert f"{HOST_SAYS} · tflite-int8: 2.08× vs FP32 tflite" in accuracy
    assert "predicted for" not in page
    conversion = section(page, "conversion")
    assert f"Host columns: {HOST_SAYS}, which stands for x86-64." in conversion
    assert "Host latency</h3>" in conversion and "pred. ms" not in conversion


def test_predicted_figures_are_charted_for_a_board_the_host_cannot_stand_for():
    page = render_report(ReportData(manifest=rpi4_manifest()))
    card = recommended_card(page)
    assert card == PREDICTED_SAYS and "conversion host" not in card
    accuracy = section(page, "accuracy")
    assert f"{PREDICTED_SAYS} · tflite-int8: 2.50× vs FP32 tflite" in accuracy
    assert "2.08×" not in accuracy and "0.806×" not in accuracy  # the host's speed-ups are not charted
    assert "host speed-ups are not charted: the conversion host (x86_64) does not stand for rpi4: " \
           "rpi4 is not this machine&#x27;s architecture" in accuracy
    conversion = section(page, "conversion")
    assert "so they say nothing about rpi4&#x27;s speed" in conversion
    assert f"Pred. columns: {PREDICTED_SAYS}" in conversion and ">pred. ms<" in conversion
    assert '<td class="num" title="from the onnx-int8 graph">0.360</td>' in conversion  # tflite-int8's prediction
    assert "Host latency (not rpi4)" in conversion


def test_an_older_manifest_without_predictions_charts_no_host_speedups_for_another_board():
    """Before `stands_for_target` and `predicted`, the recommendation's basis tells the host did not stand for rpi4."""
    old = rpi4_manifest(predictions=False)
    for a in old["artifacts"]:
        del a["predicted"]
    for key in ("stands_for_target", "not_target_because", "simd"):
        del old["host"][key]
    page = render_report(ReportData(manifest=old))
    assert recommended_card(page) == PREDICTED_SAYS.replace("x86_64; avx2 fma", "x86_64")
    accuracy = section(page, "accuracy")
    assert "<svg" not in accuracy
    assert "the conversion host (x86_64) does not stand for rpi4: rpi4 is not x86_64" in accuracy
    assert "manifest holds no prediction for rpi4" in accuracy


def test_board_measured_figures_name_the_board_and_the_fleet():
    rows = [result("rpi4-03", "rpi4", key, p50) for key, p50 in
            (("onnx-fp32", 9.0), ("onnx-int8", 4.0), ("tflite-fp32", 7.0), ("tflite-int8", 3.5))]
    page = render_report(ReportData(results=rows, manifest=rpi4_manifest()))
    accuracy = section(page, "accuracy")
    assert "measured on rpi4-03 by the fleet · example:digits-cnn · onnx-int8: 2.25× vs onnx-fp32" in accuracy
    assert '</svg>measured on rpi4-03 by the fleet</span>' in accuracy  # the legend's key
    assert f"{PREDICTED_SAYS} · onnx-int8: 2.50×" in accuracy  # the prediction beside the measurement
    assert "measured on the named board by the fleet" in section(page, "results")


def test_a_missing_speedup_says_why():
    lone = [result("quickstart-x86", "x86-64", "tflite-int8", 0.05, drop=0.75)]
    [view] = result_views(lone)
    assert view.speedup is None and view.speedup_missing == "no FP32 baseline measured on this board"
    results = section(render_report(ReportData(results=lone)), "results")
    assert 'title="no FP32 baseline measured on this board">-</span>' in results
    assert '<div class="sub">no FP32 baseline measured on this board</div>' in results
    [failed] = result_views([result("b", "rpi4", "onnx-int8", 1.0, ok=False)])
    assert failed.speedup_missing == "not measured: the benchmark failed"


def test_labels_of_points_on_top_of_each_other_are_one_label_off_the_reference_lines():
    points = [Point(1.0, 0.0, "#000", label="onnx-fp32"), Point(1.0, 0.0, "#111", label="tflite-fp32"),
              Point(1.0, 0.0, "#222", label="onnx-fp32"), Point(2.0, 0.5, "#000", label="onnx-int8")]
    svg = ET.fromstring(scatter_chart(points, "t", "x", "y", x_ref=1.0, y_ref=0.0))
    ns = "{http://www.w3.org/2000/svg}"
    labels = {t.text: t for t in svg.iter(f"{ns}text") if t.get("paint-order") == "stroke"}
    assert set(labels) == {"onnx-fp32, tflite-fp32", "onnx-int8"}  # each name once at the shared spot
    dashed = [line for line in svg.iter(f"{ns}line") if line.get("stroke-dasharray")]
    vertical = next(float(line.get("x1")) for line in dashed if line.get("x1") == line.get("x2"))
    horizontal = next(float(line.get("y1")) for line in dashed if line.get("y1") == line.get("y2"))
    shared = labels["onnx-fp32, tflite-fp32"]
    assert shared.get("stroke") == "#ffffff"  # a halo, drawn after the lines, over them
    assert abs(float(shared.get("y")) - horizontal) > (FONT + 2) / 2  # clear of the zero line
    assert shared.get("text-anchor") == "start" and float(shared.get("x")) > vertical  # and of the 1× line


def test_what_the_manifest_says_about_its_host_is_escaped():
    evil = '<script>alert("x")</script>'
    m = rpi4_manifest()
    m["device"], m["host"]["machine"], m["host"]["simd"] = evil, evil, [evil]
    m["host"]["not_target_because"] = evil
    page = render_report(ReportData(manifest=m, results=[result("b", "rpi4", "onnx-int8", 1.0)]))
    assert evil not in page and "&lt;script&gt;" in section(page, "accuracy")


def test_counts_are_said_in_the_right_number():
    from edgeopt.report.text import count

    assert [count(1, "artifact"), count(2, "artifact"), count(0, "device"), count(1, "telemetry sample")] == [
        "1 artifact", "2 artifacts", "0 devices", "1 telemetry sample"]
