"""The report read from a real SQLite fleet store, filled with real protocol messages."""
from __future__ import annotations

import re
import time

import pytest

from edgeopt.cli.main import main
from edgeopt.fleet.store import DB_ENV, open_store
from edgeopt.report import load_report_data, render_report
from edgeopt_agent import wire
from edgeopt_agent.message_signing import DeviceKey

MODEL = "example:digits-cnn"
NOW = time.time()


def status(device, seq, profile):
    body = wire.status_body(wire.ONLINE, "connected", profile=profile, agent_version="0.1.0", started_at=NOW - 900)
    return wire.status_topic(device), wire.Envelope(device, seq, wire.STATUS_TYPE, body, ts=NOW - 900)


def telemetry(device, seq, ts, temperature, profile):
    body = {
        "cpu": {"load_pct": [30.0, 50.0]}, "memory": {"total_mb": 4096.0, "available_mb": 3000.0},
        "thermal": {"cpu-thermal": temperature}, "power": {"watts": 4.2, "source": "rpi-pmic", "rail": None},
        "versions": {"edgeopt": "0.1.0", "onnxruntime": "1.17.1"}, "profile": profile,
    }
    return wire.telemetry_topic(device), wire.Envelope(device, seq, wire.TELEMETRY_TYPE, body, ts=ts)


def benchmark_result(device, seq, key, p50, energy=None, drop=None):
    fmt, precision = key.split("-")
    result = {
        "ok": True, "artifact": f"/var/lib/edgeopt/model.{precision}.{fmt}", "runtime": "onnxruntime", "threads": 4,
        "latency_ms": {"p50": p50, "p90": p50 * 1.2, "p95": p50 * 1.3, "p99": p50 * 1.5, "mean": p50 * 1.05,
                       "std": 0.1, "min": p50 * 0.9, "max": p50 * 2},
        "throughput_ips": 1000 / p50, "runs": 500, "peak_rss_mb": 88.5, "energy_per_inference_mj": energy,
        "power_source": "rpi-pmic" if energy else None, "valid": True, "invalid_reasons": [],
    }
    body = wire.result_body(f"job-{key}", wire.BENCHMARK_JOB, wire.new_message_id(), result=result)
    body["meta"] = {"model": MODEL, "model_sha256": "a" * 64, "artifact_key": key, "format": fmt, "precision": precision,
                    "accuracy_drop_points": drop, "manifest_sha256": "b" * 64}
    return wire.results_topic(device), wire.Envelope(device, seq, wire.RESULT_TYPE, body, ts=NOW - 60)


def failed_result(device, seq):
    body = wire.result_body("job-x", wire.BENCHMARK_JOB, wire.new_message_id(),
                                error=wire.error_info("signature_invalid", "artifact signature does not match"))
    body["meta"] = {"model": MODEL, "artifact_key": "tflite-int8", "format": "tflite", "precision": "int8"}
    return wire.results_topic(device), wire.Envelope(device, seq, wire.RESULT_TYPE, body, ts=NOW - 30)


@pytest.fixture
def fleet_db(tmp_path):
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    messages = [status("rpi5-01", 1, "rpi5"), status("orin-02", 1, "jetson-orin-nano")]
    # rpi5-01's telemetry skips seq 3 and 4: a gap the report must show.
    messages += [telemetry("rpi5-01", seq, NOW - 600 + 60 * seq, 50.0 + seq, "rpi5") for seq in (1, 2, 5, 6)]
    messages += [telemetry("orin-02", seq, NOW - 600 + 60 * seq, 40.0 + seq, "jetson-orin-nano") for seq in (1, 2, 3)]
    messages += [telemetry("orin-02", 4, NOW - 3 * 86400, 40.0, "jetson-orin-nano")]  # an old sample
    messages += [
        benchmark_result("rpi5-01", 1, "onnx-fp32", 6.0, energy=20.0, drop=0.0),
        benchmark_result("rpi5-01", 2, "onnx-int8", 3.0, energy=9.0, drop=0.4),
        benchmark_result("orin-02", 1, "onnx-fp32", 2.0),
        benchmark_result("orin-02", 2, "onnx-int8", 1.25, drop=0.4),
        failed_result("orin-02", 3),
    ]
    keys = {device: DeviceKey.generate() for device in ("rpi5-01", "orin-02")}  # each board signs what it sends
    store = open_store(url)
    try:
        for topic, envelope in messages:
            assert store.ingest(topic, keys[envelope.device_id].encode(envelope)).status == "stored"
        topic, envelope = messages[-1]
        assert store.ingest(topic, keys[envelope.device_id].encode(envelope)).status == "duplicate"
        assert store.ingest(wire.results_topic("orin-02"), b"\xff not json").status == "rejected"
    finally:
        store.close()
    return url


def test_report_from_the_store_shows_results_devices_telemetry_and_loss(fleet_db):
    data = load_report_data(db=fleet_db)
    page = render_report(data)
    assert data.sources == [f"fleet store {fleet_db}"]
    results = re.search(r'<section id="results">(.*?)</section>', page, re.S).group(1)
    assert results.split("<tbody>")[1].count("<tr>") == 5
    assert "signature_invalid: artifact signature does not match" in results
    assert ">2.00×<" in results and ">1.60×<" in results  # int8 against FP32 on each board
    assert ">+0.400<" in results  # the accuracy drop deploy sent with the job
    devices = re.search(r'<section id="devices">(.*?)</section>', page, re.S).group(1)
    assert "jetson-orin-nano" in devices and "onnxruntime 1.17.1" in devices and "56.0 °C" in devices
    ingest = re.search(r'<section id="ingest">(.*?)</section>', page, re.S).group(1)
    assert "3–4" in ingest and ">missing<" in ingest  # the gap
    assert "malformed_message" in ingest  # the rejected message, by reason
    assert re.search(r"<td>results</td><td class=\"num\">5</td><td class=\"num\">1</td>", ingest)  # the duplicate
    energy = re.search(r'<section id="energy">(.*?)</section>', page, re.S).group(1)
    assert energy.count("mJ/inference") == 2
    assert page.count("<svg") >= 6


def test_cli_reads_the_store_and_filters_old_telemetry(fleet_db, tmp_path, capsys):
    target = tmp_path / "report.html"
    assert main(["report", "--db", fleet_db, "--since", "1d", "-o", str(target)]) == 0
    assert "5 results, 2 devices, 7 telemetry samples" in capsys.readouterr().out  # the 3-day-old one is left out
    assert main(["report", "--db", fleet_db, "-o", str(target)]) == 0
    assert "8 telemetry samples" in capsys.readouterr().out
    assert 'id="telemetry"' in target.read_text(encoding="utf-8")


def test_cli_without_sources_uses_the_fleet_default_database(fleet_db, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(DB_ENV, fleet_db)
    assert main(["report", "-o", str(tmp_path / "r.html")]) == 0
    assert "5 results" in capsys.readouterr().out


def test_a_missing_database_is_an_error_and_is_not_created(tmp_path, capsys):
    missing = tmp_path / "typo.db"
    assert main(["report", "--db", f"sqlite:///{missing}", "-o", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(missing) in err
    assert not missing.exists() and not (tmp_path / "r.html").exists()


def test_an_empty_store_gives_the_nothing_yet_page(tmp_path):
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    open_store(url).close()
    page = render_report(load_report_data(db=url))
    assert "Nothing to report yet" in page
