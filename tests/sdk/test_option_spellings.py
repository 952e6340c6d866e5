"""A board's id is --device-id and a board profile --profile in every command; the old --device
still works where a command took it, and is hidden from --help."""
import json

import pytest

from edgeopt.cli.main import main
from edgeopt.fleet.store import open_store
from fleet_simulator import SimulatedDevice


@pytest.fixture
def db_url(tmp_path):
    url = f"sqlite:///{tmp_path}/fleet.db"
    pi, nano = SimulatedDevice("pi-01", profile="rpi4"), SimulatedDevice("nano-01", profile="jetson-orin-nano")
    meta = {"model": "digits", "artifact_key": "onnx-int8", "format": "onnx", "precision": "int8"}
    with open_store(url) as store:
        for message in (pi.status(), nano.status(), pi.telemetry(temperature_c=51.0), nano.telemetry(),
                        pi.result("j1", p50_ms=12.0, meta=meta), nano.result("j2", p50_ms=3.0, meta=meta)):
            assert store.ingest(message.topic, message.payload).status == "stored"
    return url


def _json(capsys, *args):
    assert main(list(args)) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("view", ["results", "telemetry"])
def test_fleet_views_filter_by_device_id_and_still_by_the_old_spelling(db_url, capsys, view):
    new = _json(capsys, "fleet", view, "--db", db_url, "--device-id", "pi-01", "--json")
    assert new and {row["device_id"] for row in new} == {"pi-01"}
    assert _json(capsys, "fleet", view, "--db", db_url, "--device", "pi-01", "--json") == new
    assert main(["fleet", view, "--db", db_url, "--device-id", "pi-01", "--device", "nano-01"]) == 2
    assert "--device is the old name of --device-id" in capsys.readouterr().err


@pytest.mark.parametrize("command, shown", [
    (["fleet", "results"], "--device-id"),
    (["fleet", "telemetry"], "--device-id"),
    (["deploy"], "--device-id"),
    (["analyze"], "--profile"),
])
def test_help_names_the_new_spelling_only(capsys, command, shown):
    assert main([*command, "--help"]) == 0
    text = capsys.readouterr().out
    assert shown in text
    assert not [word for word in text.split() if word.strip(",") == "--device"]


def test_analyze_takes_the_board_as_profile_and_still_as_device(fixed_onnx, capsys):
    new = _json(capsys, "analyze", str(fixed_onnx), "--profile", "rpi5", "--json")
    assert new["device"] == "rpi5"
    assert _json(capsys, "analyze", str(fixed_onnx), "--device", "rpi5", "--json") == new
    assert main(["analyze", str(fixed_onnx)]) == 2
    assert "error: missing option '--profile'" in capsys.readouterr().err


def test_deploy_takes_the_target_as_device_id(tmp_path, capsys):
    # No manifest: refused before any broker is contacted, after the options were accepted.
    for spelling in ("--device-id", "--device"):
        assert main(["deploy", str(tmp_path), spelling, "pi-01", "--unsigned"]) == 2
        assert "has no manifest.json" in capsys.readouterr().err
