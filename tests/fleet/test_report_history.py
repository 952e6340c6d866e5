"""The report's release history: each board's p50 across a model's builds, regressions marked, runtime and
agent version changes beside them; drawn from the fleet store, escaped, and rendered in a real browser."""
from __future__ import annotations

import random
import re
import xml.etree.ElementTree as ET

import pytest
from fleet_simulator import LatencyModel, SimulatedDevice
from test_report import TagBalance, screenshot, section

from edgeopt.fleet.release_history import release_history
from edgeopt.fleet.store import open_store
from edgeopt.report import ReportData, load_report_data, render_report, write_report

MODEL = 'detector <script>alert("x")</script>'
# (version, build id, how much slower than v1, onnxruntime version, agent version)
BUILDS = (("v1", "a" * 16, 1.0, "1.31.1", "0.1.0"), ("v2", "b" * 16, 1.0, "1.31.1", "0.1.0"),
          ("v3", "c" * 16, 1.25, "1.32.0", "0.1.0"), ("v4", "d" * 16, 1.25, "1.32.0", "0.2.0"))


@pytest.fixture
def store_url(tmp_path):
    url = f"sqlite:///{tmp_path}/fleet.db"
    rng = random.Random(11)
    boards = {"rpi-01": ("rpi5", 8.0), "orin-01": ("jetson-orin-nano", 3.0)}
    devices = {name: SimulatedDevice(name, profile=profile) for name, (profile, _) in boards.items()}
    with open_store(url) as store:
        for device in devices.values():
            store.ingest(*_sent(device.status()))
        for version, build_id, factor, runtime, agent in BUILDS:
            for name, (profile, p50) in boards.items():
                device = devices[name]
                device.agent_version = agent  # the board's agent was upgraded for v4
                if version == "v2" and name == "orin-01":
                    continue  # this board skipped v2
                meta = {"model": MODEL, "build_id": build_id, "build_version": version, "artifact_key": "onnx-int8"}
                durations = LatencyModel(p50, run_shift=0.0).durations(rng, 400, factor)
                store.ingest(*_sent(device.measured(f"{version}-{name}", durations, meta=meta, runtime_version=runtime)))
    return url


def _sent(published):
    return published.topic, published.payload


def test_each_board_across_builds_with_its_regressions_and_version_changes(store_url):
    with open_store(store_url) as store:
        [history] = release_history(store.results(latest=False, with_histogram=True))
    assert [b.label for b in history.builds] == ["v1 (aaaaaaaaaaaa)", "v2 (bbbbbbbbbbbb)", "v3 (cccccccccccc)",
                                                 "v4 (dddddddddddd)"]
    boards = {b.device_id: b for b in history.boards}
    rpi = [boards["rpi-01"].cells[b.key] for b in history.builds]
    assert [c.verdict for c in rpi] == [None, "no change", "slower", "no change"]
    assert rpi[2].low > 1 and rpi[2].ratio == pytest.approx(1.25, rel=0.05)
    assert rpi[2].changes == ["onnxruntime 1.31.1 → 1.32.0"] and rpi[3].changes == ["agent 0.1.0 → 0.2.0"]
    orin = boards["orin-01"].cells
    assert history.builds[1].key not in orin  # it skipped v2: v3 is compared with its v1
    assert orin[history.builds[2].key].verdict == "slower" and history.regressions == 2


def test_the_report_draws_it_escaped_and_well_formed(store_url):
    page = render_report(load_report_data(db=store_url))
    history = section(page, "history")
    assert "<script>" not in page and "&lt;script&gt;" in history
    changes = re.findall(r"▲ \+(\d+\.\d) % \[\+(\d+\.\d) – \+(\d+\.\d) %\] slower", history)
    assert len(changes) == 2 and all(float(low) < 25 < float(high) for _, low, high in changes), changes
    assert "onnxruntime 1.31.1 → 1.32.0" in history and "agent 0.1.0 → 0.2.0" in history
    assert "2 regression(s)" in history and "not run" in history
    [chart] = re.findall(r'<svg[^>]*class="chart"[^>]*>.*?</svg>', history, re.S)
    ET.fromstring(chart)  # well-formed
    assert chart.count("<polygon") == 2  # a triangle over each regression
    assert chart.count("<circle") == 7 and chart.count('stroke-dasharray="4 4"') == 1  # orin-01 skipped v2
    balance = TagBalance()
    balance.feed(page)
    assert not balance.errors and not balance.stack


def test_a_model_with_one_build_has_no_history_to_draw(tmp_path):
    url = f"sqlite:///{tmp_path}/fleet.db"
    device = SimulatedDevice("rpi-01", profile="rpi5")
    with open_store(url) as store:
        store.ingest(*_sent(device.measured("job", [10.0] * 50, meta={"model": "m", "build_id": "a" * 16})))
    page = render_report(load_report_data(db=url))
    assert 'id="history"' not in page and 'id="results"' in page


@pytest.mark.slow
def test_the_release_history_renders_in_headless_chromium(store_url, tmp_path):
    image = pytest.importorskip("PIL.Image", reason="Pillow reads the screenshot back")
    with open_store(store_url) as store:
        data = ReportData(history=release_history(store.results(latest=False, with_histogram=True)))
    page = write_report(data, tmp_path / "history.html")
    png = tmp_path / "history.png"
    screenshot(page, png, tmp_path / "profile")
    with image.open(png) as shot:
        pixels = shot.convert("RGB")
        colours = pixels.getcolors(maxcolors=1 << 20)
    assert len(colours) > 50  # text, a table and a chart, not a blank or error page
    red = sum(n for n, (r, g, b) in colours if abs(r - 0xC0) < 30 and abs(g - 0x39) < 30 and abs(b - 0x2B) < 30)
    assert red > 100  # the regression triangles (and the slower cells) were drawn
