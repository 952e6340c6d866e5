"""A refusal never hides the last measured result, and `fleet devices` shows a device whose agent says
its profile does not describe its CPU. Simulated devices through the store's ingest path."""
from __future__ import annotations

import json

import pytest

from edgeopt.cli.main import main
from fleet_simulator import SimulatedDevice
from edgeopt.fleet.store import open_store
from edgeopt_agent.wire.errors import REFUSED_BEFORE_RUNNING

MISMATCH = {"ok": False, "machine": "x86_64", "cores": 16, "unchecked": [],
            "mismatch": ["arch: profile rpi4 is aarch64, this CPU is x86_64", "cores: profile rpi4 has 4, this CPU has 16"]}


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")


def meta(key="onnx-int8"):
    return {"model": "digits", "artifact_key": key, "format": "onnx", "precision": key.split("-")[1]}


def ingest(url, *published):
    with open_store(url) as store:
        for message in published:
            assert store.ingest(message.topic, message.payload).status == "stored"


def fleet_json(capsys, *args):
    code = main(["fleet", *args, "--json"])
    out = capsys.readouterr().out
    assert code == 0
    return json.loads(out)


@pytest.mark.parametrize("kind", ["unsigned_job", "signature_invalid", "replayed", "expired", "wrong_target",
                                  "downgrade", "artifact_mismatch", "inbox_full"])
def test_a_refusal_after_a_measurement_leaves_the_measurement_as_latest(tmp_path, capsys, kind):
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    pi = SimulatedDevice("rpi-01", profile="rpi4")
    ingest(url, pi.status(), pi.result("good", p50_ms=12.0, meta=meta()),
           pi.result("refused", ok=False, error_kind=kind, error_message="refused before running", meta=meta()))
    [latest] = fleet_json(capsys, "results", "--db", url)
    assert latest["job_id"] == "good" and latest["ok"] is True and latest["p50_ms"] == 12.0
    history = fleet_json(capsys, "results", "--db", url, "--all")
    assert sorted((r["job_id"], r["error_kind"]) for r in history) == [("good", None), ("refused", kind)]


def test_a_failed_run_and_a_newer_measurement_still_replace_the_latest(tmp_path):
    """Only refusals stand aside: a crash is what the artifact did on the board, and newer runs win."""
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    pi = SimulatedDevice("rpi-01", profile="rpi4")
    ingest(url, pi.status(), pi.result("good", p50_ms=12.0, meta=meta()),
           pi.result("crashed", ok=False, error_kind="crash", meta=meta()))
    with open_store(url) as store:
        assert [r["job_id"] for r in store.results()] == ["crashed"]
    ingest(url, pi.result("again", p50_ms=11.0, meta=meta()),
           pi.result("refused", ok=False, error_kind="replayed", meta=meta()))
    with open_store(url) as store:
        assert [r["job_id"] for r in store.results()] == ["again"]


def test_a_refusal_with_nothing_measured_is_the_latest(tmp_path):
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    pi = SimulatedDevice("rpi-01", profile="rpi4")
    ingest(url, pi.status(), pi.result("first", ok=False, error_kind="unsigned_job", meta=meta()),
           pi.result("second", ok=False, error_kind="expired", meta=meta()),
           pi.result("other", p50_ms=30.0, meta=meta("onnx-fp32")))
    with open_store(url) as store:
        latest = {r["artifact_key"]: r["job_id"] for r in store.results()}
    assert latest == {"onnx-int8": "second", "onnx-fp32": "other"}


def test_the_admission_refusals_are_all_refusals_before_running():
    admission = {"unsigned_job", "signature_invalid", "expired", "not_yet_valid", "replayed", "wrong_target",
                 "downgrade"}
    assert admission <= REFUSED_BEFORE_RUNNING
    assert not {"crash", "timeout", "out_of_memory", "runtime_error", "bad_artifact", "unsupported",
                "interrupted"} & REFUSED_BEFORE_RUNNING


def test_the_devices_view_shows_a_profile_that_does_not_match_the_cpu(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    impostor, pi, old = (SimulatedDevice("x86-as-pi", profile="rpi4"), SimulatedDevice("real-pi", profile="rpi4"),
                         SimulatedDevice("old-agent", profile="rpi4"))
    ingest(url, impostor.status(profile_check={"ok": True, "machine": "x86_64", "cores": 16, "mismatch": [],
                                               "unchecked": []}),
           impostor.status(profile_check=MISMATCH),  # the newest status is the one shown
           pi.status(profile_check={"ok": True, "machine": "aarch64", "cores": 4, "mismatch": [], "unchecked": []}),
           old.status())
    devices = {d["device_id"]: d for d in fleet_json(capsys, "devices", "--db", url)}
    assert devices["x86-as-pi"]["profile_check"] == MISMATCH
    assert devices["real-pi"]["profile_check"]["ok"] is True and devices["old-agent"]["profile_check"] is None

    assert main(["fleet", "devices", "--db", url]) == 0
    lines = {line.split("│")[1].strip(): line for line in capsys.readouterr().out.splitlines() if line.startswith("│")}
    assert "MISMATCH: arch: profile rpi4 is aarch64, this CPU is x86_64" in lines["x86-as-pi"]
    assert "│ ok " in lines["real-pi"] and "MISMATCH" not in lines["old-agent"]
