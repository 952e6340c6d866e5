"""The HTML report built from rows shaped like the fleet store's answers: content, safety, rendering."""
from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest

from edgeopt.cli.main import main
from edgeopt.report import ReportData, render_report, write_report
from edgeopt.report.charts import Series, time_chart
from edgeopt.report.compare import result_views
from edgeopt.report.svg import Scale, log_ticks, nice_ticks
from edgeopt.report.text import short

MODEL = "example:digits-cnn"
T0 = 1_767_000_000.0  # a fixed moment, so the report's times are known
EVIL = '<script>alert("x")</script>'


def result(device, profile, key, p50, energy=None, drop=None, ok=True, valid=True, reasons=(), model=MODEL):
    fmt, precision = key.split("-")
    measured = (lambda factor: p50 * factor) if ok else (lambda factor: None)
    return {
        "device_id": device, "profile": profile, "model": model, "artifact_key": key, "format": fmt,
        "precision": precision, "runtime": "onnxruntime" if fmt == "onnx" else "tflite", "ok": ok,
        "error_kind": None if ok else "crash", "error_message": None if ok else "child died with SIGSEGV",
        "p50_ms": measured(1.0), "p90_ms": measured(1.2), "p95_ms": measured(1.3), "p99_ms": measured(1.6),
        "min_ms": measured(0.9), "max_ms": measured(2.5), "mean_ms": measured(1.05),
        "throughput_ips": 1000.0 / p50 if ok else None, "peak_rss_mb": 90.0 if ok else None,
        "energy_per_inference_mj": energy, "power_source": "rpi-pmic" if energy is not None else None,
        "accuracy_drop_points": drop, "valid": valid if ok else None, "invalid_reasons": list(reasons),
        "ts": T0, "job_id": f"job-{device}-{key}",
    }


def fleet_results():
    rows = []
    for device, profile, scale, energy in (("rpi5-01", "rpi5", 3.0, 1.0), ("orin-02", "jetson-orin-nano", 1.0, None)):
        rows += [
            result(device, profile, "onnx-fp32", 2.0 * scale, energy and 5 * energy, 0.0),
            result(device, profile, "onnx-int8", 1.0 * scale, energy and 2 * energy, 0.5,
                   valid=device != "orin-02",
                   reasons=["output_mismatch: logits (cosine 0.2800 < 0.9900, argmax agreement 0.12 < 0.50)"]
                   if device == "orin-02" else []),
            result(device, profile, "tflite-fp32", 1.6 * scale, energy and 4 * energy, 0.0),
            result(device, profile, "tflite-int8", 0.8 * scale, energy and 1.5 * energy, None,
                   valid=device != "rpi5-01", reasons=["throttled: under-voltage"] if device == "rpi5-01" else []),
        ]
    rows.append(result("rpi4-03", "rpi4", "onnx-int8", 1.0, ok=False))
    return rows


def telemetry_rows(devices=("rpi5-01", "orin-02"), count=60, silence=range(20, 40)):
    rows = []
    for n, device in enumerate(devices):
        for i in range(count):
            if device == devices[0] and i in silence:
                continue
            rows.append({"device_id": device, "ts": T0 + 10 * i, "seq": i + 1, "cpu_percent": 20.0 + i % 7,
                         "memory_used_mb": 800.0, "temperature_c": 50.0 + n * 5 + i * 0.1, "power_w": 4.0 + n,
                         "power_source": "rpi-pmic", "body": {}})
    return rows


def devices_rows():
    return [
        {"device_id": "rpi5-01", "profile": "rpi5", "state": "online", "last_seen": T0 + 600, "agent_version": "0.1.0",
         "runtimes": {"onnxruntime": "1.17.1", "ai-edge-litert": "1.2.0"}, "temperature_c": 57.94, "missing_messages": 20},
        {"device_id": "orin-02", "profile": "jetson-orin-nano", "state": "offline", "last_seen": T0 + 300,
         "agent_version": "0.1.0", "runtimes": {"onnxruntime": "1.18.0"}, "temperature_c": None, "missing_messages": 0},
    ]


def manifest(model=MODEL, timing=True):
    def artifact(key, drop, p50, speedup, recommended=False):
        fmt, precision = key.split("-")
        return {
            "key": key, "path": f"model.{precision}.{fmt}", "format": fmt, "precision": precision,
            "scheme": "QDQ U8S8" if precision == "int8" and fmt == "onnx" else None, "size_bytes": 30000,
            "accuracy": {"top1_accuracy": 98.0 - drop, "top1_agreement": 99.5, "cosine_similarity": 0.9998,
                         "max_abs_error": 0.1, "drop_points": drop},
            "host_timing": {"p50_ms": p50, "p90_ms": p50 * 1.1, "runs": 1000, "speedup_vs_fp32": speedup} if timing else None,
            "recommended": recommended,
        }

    return {
        "schema": "edgeopt.manifest/1", "created": "2026-01-01T00:00:00+00:00",
        "model": {"source": model, "kind": "module", "sha256": "0" * 64},
        "device": "x86-64", "host": {"machine": "x86_64", "matches_target": True, "threads": 2},
        "recommended": "tflite-int8",
        "recommendation": {"key": "tflite-int8", "basis": "measured", "reason": "fastest within budget"},
        "notes": ["calibrated on the bundled data"], "warnings": [],
        "artifacts": [
            artifact("onnx-fp32", 0.0, 0.0116, 1.0), artifact("tflite-fp32", 0.0, 0.0083, 1.0),
            artifact("onnx-int8", -0.25, 0.0144, 0.806), artifact("tflite-int8", 0.75, 0.004, 2.075, recommended=True),
        ],
    }


def full_data(**changes):
    values = dict(results=fleet_results(), devices=devices_rows(), telemetry=telemetry_rows(),
                  gaps=[{"device_id": "rpi5-01", "kind": "telemetry", "first_missing_seq": 21, "last_missing_seq": 40,
                         "detected_at": T0 + 400, "filled": False}],
                  stats={"stored": {"telemetry": 100, "results": 9}, "duplicate": {"results": 2},
                         "rejected": {"oversized": 1}},
                  manifest=manifest(), sources=["fleet store sqlite:///fleet.db"], generated_at=T0 + 700)
    values.update(changes)
    return ReportData(**values)


def section(page: str, anchor: str) -> str:
    match = re.search(rf'<section id="{anchor}">(.*?)</section>', page, re.S)
    assert match, f"no section #{anchor}"
    return match.group(1)


class TagBalance(HTMLParser):
    """Checks that every element closes in order (void elements excepted)."""

    VOID = {"meta", "br", "img", "input", "link", "hr"}

    def __init__(self):
        super().__init__()
        self.stack, self.errors = [], []

    def handle_starttag(self, tag, attrs):
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1] if self.stack else 'nothing'}")
        else:
            self.stack.pop()


# --- content -----------------------------------------------------------------------------------


def test_full_report_has_every_section_and_the_numbers():
    page = render_report(full_data())
    for anchor in ("results", "latency", "energy", "accuracy", "conversion", "telemetry", "devices", "ingest"):
        assert f'<section id="{anchor}">' in page
    results = section(page, "results")
    assert results.split("<tbody>")[1].count("<tr>") == 9  # one row per stored result
    assert "failed</span> crash: child died with SIGSEGV" in results
    assert "throttled: under-voltage" in results
    assert "invalid</span><div class=\"sub\">output_mismatch: logits (cosine 0.2800 &lt; 0.9900" in results
    devices = section(page, "devices")
    assert "57.9 °C" in devices and "onnxruntime 1.17.1" in devices and ">offline<" in devices
    ingest = section(page, "ingest")
    assert "21–40" in ingest and ">missing<" in ingest and "oversized" in ingest


def test_rows_are_sorted_by_model_then_board_fastest_first_failures_last():
    views = result_views(fleet_results() + [result("rpi5-01", "rpi5", "onnx-fp32", 9.0, model="another-model")])
    assert [v.model for v in views][-1] == MODEL and views[0].model == "another-model"
    mine = [(v.device, v.artifact) for v in views if v.model == MODEL]
    assert mine[:4] == [("orin-02", "tflite-int8"), ("orin-02", "onnx-int8"), ("orin-02", "tflite-fp32"),
                        ("orin-02", "onnx-fp32")]
    assert mine[4] == ("rpi4-03", "onnx-int8")  # boards sort by profile: jetson-orin-nano, rpi4, rpi5
    assert mine[5:] == [("rpi5-01", "tflite-int8"), ("rpi5-01", "onnx-int8"), ("rpi5-01", "tflite-fp32"),
                        ("rpi5-01", "onnx-fp32")]


def test_speedup_is_against_fp32_of_the_same_format_on_the_same_board():
    views = {(v.device, v.artifact): v for v in result_views(fleet_results())}
    assert views[("rpi5-01", "onnx-int8")].speedup == pytest.approx(2.0)  # 6.0 / 3.0
    assert views[("rpi5-01", "onnx-int8")].speedup_basis == "onnx-fp32"
    assert views[("orin-02", "tflite-int8")].speedup == pytest.approx(2.0)  # 1.6 / 0.8
    assert views[("rpi4-03", "onnx-int8")].speedup is None  # failed, and no FP32 on that board


def test_speedup_falls_back_to_the_fastest_fp32_of_any_format():
    rows = [result("b", "rpi4", "onnx-fp32", 4.0), result("b", "rpi4", "tflite-fp32", 3.0), result("b", "rpi4", "tensorrt-int8", 1.0)]
    views = {v.artifact: v for v in result_views(rows)}
    assert views["tensorrt-int8"].speedup == pytest.approx(3.0)
    assert views["tensorrt-int8"].speedup_basis == "tflite-fp32"


def test_accuracy_drop_comes_from_the_job_else_from_the_manifest():
    views = {(v.device, v.artifact): v for v in result_views(fleet_results(), manifest())}
    assert views[("rpi5-01", "onnx-int8")].accuracy_drop == 0.5  # sent with the job
    assert views[("rpi5-01", "onnx-int8")].accuracy_from == "job"
    assert views[("rpi5-01", "tflite-int8")].accuracy_drop == 0.75  # the job had none: manifest
    assert views[("rpi5-01", "tflite-int8")].accuracy_from == "manifest"
    other = result_views(fleet_results(), manifest(model="some-other-model"))
    assert {v.accuracy_drop for v in other if v.artifact == "tflite-int8"} == {None}


def test_latency_chart_has_a_row_per_board_and_artifact_on_a_log_axis_when_spread():
    latency = section(render_report(full_data()), "latency")
    labels = re.findall(r'<text [^>]*text-anchor="end"[^>]*>([^<]*·[^<]*)</text>', latency)
    assert len(labels) == 8  # 2 boards × 4 artifacts; the failed one has nothing to draw
    assert "rpi5-01 · onnx-fp32" in labels
    assert "log scale" not in latency  # 0.72 to 15 ms is within 30×
    wide = [result("b", "rpi4", "onnx-fp32", 0.05), result("b", "rpi4", "onnx-int8", 40.0)]
    assert "log scale" in section(render_report(ReportData(results=wide)), "latency")


def test_energy_plot_needs_energy_and_says_so_when_there_is_none():
    energy = section(render_report(full_data()), "energy")
    assert energy.count("mJ/inference") == 4  # the tooltips of rpi5-01's four points
    no_energy = [dict(r, energy_per_inference_mj=None) for r in fleet_results()]
    text = section(render_report(ReportData(results=no_energy)), "energy")
    assert "<svg" not in text and "No energy figures yet" in text


def test_a_board_whose_power_sensor_cannot_be_read_is_said_to_be_so():
    """An x86 profile expects RAPL; on a virtual machine the agent finds it unreadable and says so in its
    telemetry: the report repeats that, instead of telling the user that boards need a power sensor."""
    no_energy = [dict(r, energy_per_inference_mj=None) for r in fleet_results()]
    boards = sorted({r["device_id"] for r in no_energy})
    unreadable = ("no rapl power sensor found on this x86-64: rapl disabled (cannot read "
                  "/sys/class/powercap/intel-rapl:0/energy_uj: Permission denied)")
    telemetry = [{"device_id": boards[0], "ts": 1.0, "body": {"power": {"watts": 3.0, "source": "rapl"}}},
                 {"device_id": boards[0], "ts": 2.0, "body": {"power": {"watts": None, "reason": unreadable}}}]
    text = section(render_report(ReportData(results=no_energy, telemetry=telemetry)), "energy")
    assert f"{boards[0]}: {unreadable}" in html.unescape(text)
    assert f"{', '.join(boards[1:])}: no power sensor reported" in html.unescape(text)
    assert "Boards need a power sensor" not in text


def test_accuracy_plot_from_a_manifest_alone_uses_its_host_timing():
    page = render_report(ReportData(manifest=manifest()))
    accuracy = section(page, "accuracy")
    assert "measured on the conversion host (x86_64) · tflite-int8: 2.08× vs FP32 tflite" in accuracy
    assert 'id="results"' not in page and 'id="telemetry"' not in page
    untimed = section(render_report(ReportData(manifest=manifest(timing=False))), "accuracy")
    assert "<svg" not in untimed and "no host timing" in untimed


def test_telemetry_lines_break_where_a_device_went_quiet():
    rows = telemetry_rows()
    chart = time_chart([Series("a", "#000", [(r["ts"], r["temperature_c"]) for r in rows if r["device_id"] == "rpi5-01"])],
                       "t", "°C", (T0, T0 + 600), zero=False)
    assert chart.count("<path") == 2
    steady = time_chart([Series("a", "#000", [(T0 + i, 1.0) for i in range(50)])], "t", "x", (T0, T0 + 50))
    assert steady.count("<path") == 1


def test_long_telemetry_is_thinned_to_a_few_hundred_points():
    points = [(T0 + i, float(i % 50)) for i in range(20000)]
    chart = time_chart([Series("a", "#000", points)], "t", "x", (T0, T0 + 20000))
    path = re.search(r' d="([^"]+)"', chart).group(1)
    assert 100 < path.count("L") < 400


def test_empty_data_gives_a_page_that_says_so():
    page = render_report(ReportData(sources=["fleet store sqlite:///fleet.db"]))
    assert "Nothing to report yet" in page and "<svg" not in page
    assert "edgeopt deploy" in page


def test_values_of_the_wrong_type_show_as_missing_instead_of_crashing():
    junk = dict(result("b", "rpi4", "onnx-int8", 1.0), p90_ms="fast", p99_ms=float("nan"), max_ms=True,
                throughput_ips=[1], invalid_reasons="not json", valid=2, ts="yesterday")
    page = render_report(ReportData(results=[junk], devices=[{"device_id": None, "runtimes": "onnxruntime",
                                                              "last_seen": "soon", "temperature_c": {}}],
                                    telemetry=[{"device_id": "b", "ts": T0, "cpu_percent": "x"}],
                                    gaps=[{"device_id": "b", "first_missing_seq": "1"}], stats={"rejected": [1]}))
    results = section(page, "results")
    assert ">-<" in results and ">unknown<" in results  # p90 shown as missing; validity 2 is not a flag
    assert "No device reported cpu load" in section(page, "telemetry")
    assert not tag_errors(page)


# --- safety --------------------------------------------------------------------------------------


def tag_errors(page: str):
    checker = TagBalance()
    checker.feed(page)
    checker.close()
    return checker.errors + [f"<{tag}> never closed" for tag in checker.stack]


def test_strings_from_the_data_are_escaped_everywhere():
    hostile = 'x" onmouseover="alert(1)'
    rows = [dict(r, model=EVIL, artifact_key=f"{r['artifact_key']}{hostile}", runtime=EVIL, error_message=EVIL,
                 invalid_reasons=[EVIL]) for r in fleet_results()]
    devices = [dict(d, profile=EVIL, agent_version=hostile, runtimes={EVIL: hostile}) for d in devices_rows()]
    bad_manifest = manifest(model=EVIL)
    bad_manifest["notes"] = [EVIL]
    bad_manifest["recommendation"]["reason"] = EVIL
    page = render_report(full_data(results=rows, devices=devices, manifest=bad_manifest,
                                   stats={"rejected": {EVIL: 1}}, sources=[EVIL]), title=EVIL)
    assert "<script" not in page
    assert "&lt;script&gt;" in page
    assert 'onmouseover="' not in page
    assert not tag_errors(page)


def test_page_is_self_contained_and_runs_nothing():
    page = render_report(full_data())
    assert "<script" not in page and "<link" not in page and "<img" not in page and "@import" not in page
    assert " src=" not in page and "url(" not in page
    assert set(re.findall(r"https?://[^\s\"'<>]*", page)) == {"http://www.w3.org/2000/svg"}  # a namespace, not a fetch
    assert "Content-Security-Policy" in page and "default-src 'none'" in page


def test_every_chart_is_well_formed_svg():
    page = render_report(full_data())
    charts = re.findall(r"<svg .*?</svg>", page, re.S)
    assert len(charts) >= 7  # latency, energy, accuracy, host latency, three telemetry metrics
    for chart in charts:
        ET.fromstring(chart)
    assert not tag_errors(page)


# --- axes and numbers ---------------------------------------------------------------------------


def test_ticks_are_round_numbers_inside_the_range():
    assert nice_ticks(0, 10, 5) == [0, 2, 4, 6, 8, 10]
    assert nice_ticks(0.13, 0.91, 4) == [0.2, 0.4, 0.6, 0.8]
    assert log_ticks(0.3, 40) == [0.5, 1, 2, 5, 10, 20]
    assert log_ticks(0.001, 1000) == [0.001, 0.01, 0.1, 1, 10, 100, 1000]
    scale = Scale(1, 100, 0, 200, log=True)
    assert scale(10) == pytest.approx(100)


def test_short_numbers_keep_three_significant_digits():
    assert [short(v) for v in (1234.5, 12.345, 0.9, 0.0116, 0, None, "7", True)] == \
        ["1234", "12.35", "0.900", "0.0116", "0", "-", "-", "-"]


# --- writing and the command --------------------------------------------------------------------


def test_write_report_replaces_the_file_whole(tmp_path):
    target = tmp_path / "report.html"
    target.write_text("old")
    write_report(full_data(), target)
    assert target.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]  # no temporary left behind


def test_cli_writes_a_report_from_a_conversion_folder(tmp_path, capsys):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "manifest.json").write_text(json.dumps(manifest()), encoding="utf-8")
    target = tmp_path / "r.html"
    assert main(["report", str(tmp_path / "out"), "-o", str(target)]) == 0
    assert "4 converted artifacts" in capsys.readouterr().out
    page = target.read_text(encoding="utf-8")
    assert 'id="conversion"' in page and "★ tflite-int8" in page


@pytest.mark.parametrize("problem, setup, message", [
    ("missing folder", lambda d: d / "nope", "conversion output not found"),
    ("folder without manifest", lambda d: d, "has no manifest.json"),
    ("not JSON", lambda d: _write(d / "manifest.json", "{oops"), "cannot read"),
    ("not a manifest", lambda d: _write(d / "manifest.json", '{"schema": "other/1"}'), "is not an edgeopt manifest"),
])
def test_cli_bad_input_is_one_line_and_keeps_the_old_report(tmp_path, capsys, problem, setup, message):
    target = tmp_path / "report.html"
    target.write_text("previous report")
    source = setup(tmp_path)
    assert main(["report", str(source), "-o", str(target)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and err.startswith("error: ")
    assert target.read_text() == "previous report"


def test_cli_rejects_a_bad_since_and_a_folder_as_output(tmp_path, capsys):
    _write(tmp_path / "manifest.json", json.dumps(manifest()))
    assert main(["report", str(tmp_path), "--since", "soon", "-o", str(tmp_path / "r.html")]) == 2
    assert "--since takes an age" in capsys.readouterr().err
    assert main(["report", str(tmp_path), "-o", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


def _write(path: Path, content: str) -> Path:
    path.write_text(content, encoding="utf-8")
    return path.parent


# --- rendered in a browser ---------------------------------------------------------------------


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("no Chromium binary on PATH (apt-get install -y chromium); the screenshot test needs one")


def screenshot(page: Path, png: Path, profile: Path) -> None:
    command = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               f"--user-data-dir={profile}", f"--screenshot={png}", "--window-size=1280,2000", page.as_uri()]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and png.is_file(), done.stderr[-2000:]


@pytest.mark.slow
def test_report_renders_in_headless_chromium(tmp_path):
    image = pytest.importorskip("PIL.Image", reason="Pillow reads the screenshot back")
    page = write_report(full_data(), tmp_path / "report.html")
    png = tmp_path / "report.png"
    screenshot(page, png, tmp_path / "profile")
    with image.open(png) as shot:
        assert shot.size == (1280, 2000)
        pixels = shot.convert("RGB")
        colours = pixels.getcolors(maxcolors=1 << 20)
        assert len(colours) > 50  # text, tables and charts, not a blank or error page
        blue = sum(n for n, (r, g, b) in colours if abs(r - 0x00) < 40 and abs(g - 0x72) < 40 and abs(b - 0xB2) < 40)
        assert blue > 200  # the first board's colour: the latency chart's boxes were drawn


def test_an_invalid_result_is_crossed_out_in_every_chart_and_never_the_fastest():
    """orin-02's onnx-int8 is made its fastest artifact, but its outputs did not match FP32."""
    rows = [dict(r, p50_ms=0.1, min_ms=0.09) if (r["device_id"], r["artifact_key"]) == ("orin-02", "onnx-int8") else r
            for r in fleet_results()]
    page = render_report(full_data(results=rows))
    for anchor in ("latency", "accuracy"):
        part = section(page, anchor)
        assert "onnx-int8 ✗ invalid" in part
        assert "INVALID: output_mismatch: logits" in part  # the reason, in the point's tooltip
    energy = section(page, "energy")  # rpi5-01's tflite-int8 is invalid (throttled) and has energy figures
    assert "tflite-int8 ✗ invalid" in energy and "#C0392B" in energy
    bold = [row for row in section(page, "results").split("<tr>") if '<td class="num"><b>' in row]
    orin = [row for row in bold if "orin-02" in row]
    assert len(orin) == 1 and ">onnx-int8<" not in orin[0] and ">tflite-int8<" in orin[0]


def test_an_artifact_that_failed_to_build_is_listed_with_its_cause():
    data = full_data(manifest=dict(manifest(), failed_artifacts=[
        {"key": "onnx-int8-x", "format": "onnx", "precision": "int8", "cause": f"Node (If_0) refused {EVIL}"}]))
    conversion = section(render_report(data), "conversion")
    assert "Artifacts that failed" in conversion and "onnx-int8-x" in conversion
    assert "Node (If_0) refused &lt;script&gt;" in conversion and EVIL not in conversion
