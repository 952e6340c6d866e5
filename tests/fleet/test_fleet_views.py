"""`edgeopt fleet devices|results|telemetry|stats` over a database filled with simulated devices."""
import csv
import io
import json
from datetime import datetime, timezone

import pytest

from edgeopt.cli.main import main
from edgeopt.errors import UserError
from edgeopt.fleet import views
from fleet_simulator import SimulatedDevice
from edgeopt.fleet.store import open_store
from edgeopt_agent import wire


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")


def meta(key, drop, fmt="onnx", precision="int8"):
    return {"model": "digits", "artifact_key": key, "format": fmt, "precision": precision,
            "accuracy_drop_points": drop}


@pytest.fixture
def db_url(tmp_path):
    url = f"sqlite:///{tmp_path}/fleet.db"
    rpi, jetson = SimulatedDevice("rpi-01", profile="rpi4"), SimulatedDevice("jetson-01", profile="jetson-orin-nano")
    quiet = SimulatedDevice("quiet-01", profile="rpi5")
    with open_store(url) as store:
        for message in [
            rpi.status(), jetson.status(), jetson.status(wire.OFFLINE, "connection_lost"),
            rpi.telemetry(temperature_c=52.5), jetson.telemetry(temperature_c=47.0), quiet.telemetry(),
            rpi.telemetry(), rpi.telemetry(temperature_c=53.5, seq=5),  # seqs 3 and 4 never arrive
            rpi.result("j1", p50_ms=12.0, meta=meta("onnx-int8", 0.42), energy_mj=55.0),
            rpi.result("j2", p50_ms=25.0, meta=meta("onnx-fp32", 0.0, precision="fp32")),
            jetson.result("j3", p50_ms=3.5, meta=meta("onnx-int8", 0.42), valid=False),
            jetson.result("j4", ok=False, error_kind="artifact_rejected", error_message="signature does not match",
                          meta=meta("tflite-int8", 0.6, fmt="tflite")),
        ]:
            assert store.ingest(message.topic, message.payload).status == "stored"
        store.ingest(wire.telemetry_topic("rpi-01"), b"garbage")
    return url


def run(capsys, *args):
    code = main(["fleet", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_devices_table_shows_state_profile_versions_temperature_and_missing(db_url, capsys):
    code, out, _ = run(capsys, "devices", "--db", db_url)
    assert code == 0
    lines = {line.split("│")[1].strip(): line for line in out.splitlines() if line.startswith("│")}
    assert set(lines) == {"rpi-01", "jetson-01", "quiet-01"}
    assert "online" in lines["rpi-01"] and "53.5" in lines["rpi-01"] and "onnxruntime 1.31.1" in lines["rpi-01"]
    assert "offline (connection_lost)" in lines["jetson-01"]
    assert "unknown" in lines["quiet-01"] and "rpi5" in lines["quiet-01"]
    assert lines["rpi-01"].rstrip("│ ").endswith("2")  # seqs 3 and 4 are missing


def test_devices_as_json_and_csv(db_url, capsys):
    code, out, _ = run(capsys, "devices", "--db", db_url, "--json")
    devices = {d["device_id"]: d for d in json.loads(out)}
    assert code == 0 and devices["rpi-01"]["missing_messages"] == 2
    assert devices["jetson-01"]["state"] == "offline" and isinstance(devices["rpi-01"]["last_seen"], float)

    code, out, _ = run(capsys, "devices", "--db", db_url, "--csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and [r["device_id"] for r in rows] == ["jetson-01", "quiet-01", "rpi-01"]
    assert json.loads(rows[2]["runtimes"]) == {"onnxruntime": "1.31.1", "ai-edge-litert": "2.3.0"}
    assert rows[1]["state"] == "unknown" and rows[1]["state_reason"] == ""


def test_results_table_compares_boards_and_formats(db_url, capsys):
    code, out, _ = run(capsys, "results", "--db", db_url)
    assert code == 0
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in out.splitlines() if line.startswith("│")]
    assert [(r[1], r[3]) for r in rows] == [
        ("jetson-01", "onnx-int8"), ("rpi-01", "onnx-int8"), ("rpi-01", "onnx-fp32"), ("jetson-01", "tflite-int8")]
    jetson_int8, rpi_int8, rpi_fp32, failed = rows
    assert rpi_int8[4] == "onnx int8" and rpi_int8[5:8] == ["onnxruntime", "4", "12.00"] and rpi_int8[12] == "55.00"
    assert rpi_int8[13] == "+0.42" and rpi_int8[14] == "valid"
    assert rpi_fp32[4] == "onnx fp32"
    assert jetson_int8[14] == "invalid: during the run: throttled"
    assert failed[7] == "-" and failed[14] == "failed: artifact_rejected"


def test_results_filters(db_url, capsys):
    def jobs(*args):
        code, out, _ = run(capsys, "results", "--db", db_url, "--json", *args)
        assert code == 0
        return [r["job_id"] for r in json.loads(out)]

    assert jobs("--device", "rpi-01") == ["j1", "j2"]
    assert jobs("--profile", "jetson-orin-nano") == ["j3", "j4"]
    assert jobs("--model", "digits", "--profile", "rpi4") == ["j1", "j2"]
    assert jobs("--model", "resnet") == []
    code, out, _ = run(capsys, "results", "--db", db_url, "--model", "resnet")
    assert code == 0 and out.strip() == "no results match"


def test_results_csv_has_one_flat_row_per_result(db_url, capsys):
    code, out, _ = run(capsys, "results", "--db", db_url, "--csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and len(rows) == 4
    throttled = [r for r in rows if r["job_id"] == "j3"][0]
    assert json.loads(throttled["invalid_reasons"]) == ["during the run: throttled"]
    assert throttled["valid"] == "False" and float(throttled["p50_ms"]) == 3.5 and throttled["profile"] == "jetson-orin-nano"


def test_telemetry_view_with_device_limit_and_since(db_url, capsys):
    code, out, _ = run(capsys, "telemetry", "--db", db_url, "--device", "rpi-01", "--json")
    rows = json.loads(out)
    assert code == 0 and [r["seq"] for r in rows] == [1, 2, 5] and rows[0]["temperature_c"] == 52.5
    assert rows[0]["body"]["thermal"] == {"cpu-thermal": 52.5}

    code, out, _ = run(capsys, "telemetry", "--db", db_url, "--limit", "2", "--since", "1h", "--csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and len(rows) == 2 and "body" not in rows[0]

    code, out, _ = run(capsys, "telemetry", "--db", db_url, "--since", "2999-01-01T00:00:00")
    assert code == 0 and out.strip() == "no telemetry matches"

    code, out, _ = run(capsys, "telemetry", "--db", db_url, "--device", "rpi-01")
    assert code == 0 and "rpi-01" in out and "52.5" in out


def test_stats_show_rejections_and_open_gaps(db_url, capsys):
    code, out, _ = run(capsys, "stats", "--db", db_url)
    assert code == 0
    assert "malformed_message" in out and "open gaps: 2 messages missing" in out and "3-4" in out
    code, out, _ = run(capsys, "stats", "--db", db_url, "--json")
    data = json.loads(out)
    assert data["rejected"] == {"malformed_message": 1} and data["gaps"]["missing"] == 2
    assert data["open_gaps"][0]["first_missing_seq"] == 3 and data["recent_rejections"][0]["excerpt"] == "garbage"


def test_views_of_a_missing_database_fail_with_one_line_and_create_nothing(tmp_path, capsys):
    code, out, err = run(capsys, "devices", "--db", f"sqlite:///{tmp_path}/none.db")
    assert code == 2 and out == ""
    assert err.startswith("error: no fleet database at") and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "none.db").exists()


def test_bad_options_are_user_errors(db_url, capsys):
    code, _, err = run(capsys, "devices", "--db", db_url, "--json", "--csv")
    assert code == 2 and "choose one of --json and --csv" in err
    code, _, err = run(capsys, "telemetry", "--db", db_url, "--since", "yesterday")
    assert code == 2 and "--since 'yesterday' is not a time" in err
    code, _, err = run(capsys, "serve", "--db", db_url, "--shared", "a/b")
    assert code == 2 and "invalid share group" in err
    code, _, err = run(capsys, "serve", "--db", db_url, "--broker", "host:99999")
    assert code == 2 and "out of range" in err


def test_since_accepts_relative_epoch_and_iso_times():
    now = 1_700_000_000.0
    assert views.parse_since("90s", now) == now - 90
    assert views.parse_since("10m", now) == now - 600
    assert views.parse_since("2h", now) == now - 7200
    assert views.parse_since("1d", now) == now - 86400
    assert views.parse_since("1699999000.5", now) == 1699999000.5
    assert views.parse_since("2024-05-01T12:00:00") == datetime(2024, 5, 1, 12, tzinfo=timezone.utc).timestamp()
    assert views.parse_since("2024-05-01T12:00:00+02:00") == datetime(2024, 5, 1, 10, tzinfo=timezone.utc).timestamp()
    with pytest.raises(UserError):
        views.parse_since("last tuesday")


def test_ages_read_naturally():
    assert views.ago(100.0, now=112.0) == "12 s ago"
    assert views.ago(0.0, now=300.0) == "5 min ago"
    assert views.ago(0.0, now=3 * 3600.0) == "3 h ago"
    assert views.ago(0.0, now=5 * 86400.0) == "5 d ago"
    assert views.ago(10.0, now=6.0) == "in 4 s"
    assert views.ago(None) == "-"


def test_a_guessable_share_group_is_warned_about(db_url, capsys):
    """A board that knows the group can join it on an acl_file broker and make the broker drop its share."""
    code, _, err = run(capsys, "serve", "--db", db_url, "--shared", "fleet", "--broker", "host:99999")
    assert code == 2 and "share group 'fleet' is easy to guess" in err and "--shared fleet-" in err
    code, _, err = run(capsys, "serve", "--db", db_url, "--shared", "fleet-7f3c9a1e52", "--broker", "host:99999")
    assert code == 2 and "easy to guess" not in err


@pytest.mark.parametrize("columns", [80, 100, 120])
@pytest.mark.parametrize("view", ["devices", "results"])
def test_fleet_tables_fit_the_terminal_and_keep_names_and_numbers_whole(view, columns, db_url, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(columns))
    code, out, _ = run(capsys, view, "--db", db_url)
    assert code == 0
    assert max(len(line) for line in out.splitlines()) <= columns
    for whole in ("jetson-01", "rpi-01", "onnx-int8" if view == "results" else "online", "12.00" if view == "results"
                  else "53.5"):
        assert whole in out, f"{whole!r} cut at {columns} columns:\n{out}"
