"""The report of a real conversion, alone and next to fleet results for its artifacts."""
from __future__ import annotations

import re

import pytest

import edgeopt
from edgeopt.cli.main import main
from edgeopt.fleet.store import open_store
from edgeopt.report import load_report_data, render_report
from edgeopt.report.text import signed
from edgeopt_agent import wire
from edgeopt_agent.message_signing import DeviceKey

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def converted(tmp_path_factory):
    """OUTDIR and manifest of example:digits-cnn for x86-64, timed on this host (~15 s)."""
    pytest.importorskip("torch", reason="converting needs the convert extra (torch)")
    outdir = tmp_path_factory.mktemp("digits")
    manifest = edgeopt.convert("example:digits-cnn", device="x86-64", output_dir=outdir, time_on_host=True)
    return outdir, manifest


def test_report_of_a_conversion_alone(converted, tmp_path, capsys):
    outdir, manifest = converted
    target = tmp_path / "report.html"
    assert main(["report", str(outdir), "-o", str(target)]) == 0
    page = target.read_text(encoding="utf-8")
    conversion = re.search(r'<section id="conversion">(.*?)</section>', page, re.S).group(1)
    keys = [a["key"] for a in manifest["artifacts"]]
    for key in keys:
        assert f">{key}<" in conversion or f">★ {key}<" in conversion
    assert f">★ {manifest['recommended']}<" in conversion
    assert "Host latency" in conversion  # timed on this host: p50–p90 per artifact
    accuracy = re.search(r'<section id="accuracy">(.*?)</section>', page, re.S).group(1)
    assert len(re.findall(r"measured on the conversion host \([^)]*\) · ", accuracy)) == len(keys)  # one tip a point
    assert "predicted for" not in accuracy  # x86-64 on an x86-64 host: the host stands for the target
    assert 'id="results"' not in page


def test_fleet_results_take_their_accuracy_drop_from_the_manifest(converted, tmp_path):
    outdir, manifest = converted
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    source = manifest["model"]["source"]
    store = open_store(url)
    board = DeviceKey.generate()  # the board signs what it sends
    try:
        for seq, entry in enumerate(manifest["artifacts"], start=1):
            result = {"ok": True, "runtime": "onnxruntime", "latency_ms": {"p50": 1.0 / seq, "p90": 1.2 / seq},
                      "valid": True, "invalid_reasons": []}
            body = wire.result_body(f"job-{seq}", wire.BENCHMARK_JOB, wire.new_message_id(), result=result)
            # No accuracy figure in the job's meta: the report looks it up in the manifest.
            body["meta"] = {"model": source, "artifact_key": entry["key"], "format": entry["format"],
                            "precision": entry["precision"], "accuracy_drop_points": None}
            envelope = wire.Envelope("x86-lab", seq, wire.RESULT_TYPE, body)
            assert store.ingest(wire.results_topic("x86-lab"), board.encode(envelope)).status == "stored"
    finally:
        store.close()
    data = load_report_data(db=url, outdir=outdir)
    assert [s.split()[0] for s in data.sources] == ["conversion", "fleet"]
    page = render_report(data)
    results = re.search(r'<section id="results">(.*?)</section>', page, re.S).group(1)
    drops = re.findall(r'<span title="from the conversion manifest">([^<]+)</span>', results)
    assert len(drops) == len(manifest["artifacts"])
    assert sorted(drops) == sorted(signed(a["accuracy"]["drop_points"]) for a in manifest["artifacts"])


def test_report_of_a_conversion_for_a_board_this_host_cannot_stand_for(tmp_path):
    """rpi4 converted on this (non-arm64) host: its figures are the roofline's for rpi4, never host speed-ups."""
    pytest.importorskip("torch", reason="converting needs the convert extra (torch)")
    manifest = edgeopt.convert("example:digits-cnn", device="rpi4", output_dir=tmp_path / "out", time_on_host=True)
    if manifest["host"]["matches_target"]:
        pytest.skip("this host is arm64 like rpi4: its timings may stand for the board")
    assert manifest["host"]["stands_for_target"] is False and "rpi4" in manifest["host"]["not_target_because"]
    predicted = {a["key"]: a["predicted"] for a in manifest["artifacts"] if a["predicted"]}
    assert predicted and all(p["method"] == "roofline" and p["p50_ms"] > 0 for p in predicted.values())
    page = render_report(load_report_data(outdir=tmp_path / "out"))
    assert re.search(r'<div class="name">recommended</div><div class="detail">predicted for rpi4 \(roofline\)<', page)
    accuracy = re.search(r'<section id="accuracy">(.*?)</section>', page, re.S).group(1)
    charted = [a for a in manifest["artifacts"] if a["key"] in predicted and a["predicted"]["speedup_vs_fp32"] is not None
               and a["accuracy"].get("drop_points") is not None]
    assert accuracy.count("predicted for rpi4 (roofline) · ") == len(charted) > 0
    assert "measured on the conversion host (" not in accuracy.replace("host speed-ups are not charted: ", "")
