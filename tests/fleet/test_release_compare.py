"""Builds in the fleet store and `edgeopt fleet compare`: what each result keeps, how builds are named
and chosen, the verdicts, the runs that never count, older agents' results, the gate and the errors."""
from __future__ import annotations

import csv
import io
import json
import random

import pytest
from fleet_simulator import LatencyModel, SimulatedDevice

from edgeopt.cli.main import main
from edgeopt.fleet.messages import result_row
from edgeopt.fleet.migrations import MIGRATIONS
from edgeopt.fleet.store import open_store

MODEL = "example:digits-cnn"
BOARDS = (("rpi-01", "rpi5", 8.0), ("rpi-02", "rpi5", 9.0), ("orin-01", "jetson-orin-nano", 3.0))


class Fleet:
    """Simulated boards whose results go straight into a store, deploy by deploy."""

    def __init__(self, url, boards=BOARDS, seed=7):
        self.url, self.rng = url, random.Random(seed)
        self.devices = {name: SimulatedDevice(name, profile=profile, seed=i) for i, (name, profile, _) in enumerate(boards)}
        self.latency = {name: LatencyModel(p50, run_shift=0.0) for name, _, p50 in boards}
        with open_store(url) as store:
            for device in self.devices.values():
                self.ingest(store, device.status())

    @staticmethod
    def ingest(store, published):
        outcome = store.ingest(published.topic, published.payload)
        assert outcome.status == "stored", outcome
        return outcome

    def deploy(self, version, build_id, factor=1.0, boards=None, samples=400, artifact="onnx-int8", **options):
        with open_store(self.url) as store:
            for name in boards or self.devices:
                meta = {"model": MODEL, "build_id": build_id, "build_version": version, "artifact_key": artifact}
                durations = self.latency[name].durations(self.rng, samples, factor)
                self.ingest(store, self.devices[name].measured(f"{version}-{name}", durations, meta=meta, **options))


@pytest.fixture
def fleet(tmp_path):
    return Fleet(f"sqlite:///{tmp_path}/fleet.db")


def compare(capsys, fleet, *args):
    code = main(["fleet", "compare", "--model", MODEL, "--db", fleet.url, *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def compare_json(capsys, fleet, *args):
    code, out, err = compare(capsys, fleet, "--json", *args)
    assert not err, err
    return code, json.loads(out)


def test_results_keep_the_build_what_ran_it_and_the_latency_distribution(db_url):
    device = SimulatedDevice("rpi-01", profile="rpi5", agent_version="0.3.0")
    meta = {"model": MODEL, "build_id": "0123456789abcdef", "build_version": "1.4.0", "artifact_key": "onnx-int8"}
    with open_store(db_url) as store:
        Fleet.ingest(store, device.measured("job-1", [10.0] * 90 + [30.0] * 10, meta=meta, runtime_version="1.18.0"))
        Fleet.ingest(store, device.measured("job-2", [11.0] * 50, meta=meta, throttled=True))
        Fleet.ingest(store, device.measured("job-3", [12.0] * 50, meta=meta, histogram=False))  # an older agent
        bad = device.measured("job-4", [13.0] * 50, meta=meta)
        document = json.loads(bad.payload)
        document["body"]["result"]["latency_histogram"]["count"] = 7  # not what its counts add up to
        Fleet.ingest(store, type(bad)(bad.topic, bad.changed(document), bad.envelope))
        rows = {r["job_id"]: r for r in store.results(model=MODEL, latest=False, with_histogram=True)}
        plain = store.results(model=MODEL, latest=False)
    first = rows["job-1"]
    assert (first["build_id"], first["build_version"]) == ("0123456789abcdef", "1.4.0")
    assert (first["runtime"], first["runtime_version"], first["agent_version"]) == ("onnxruntime", "1.18.0", "0.3.0")
    assert first["runs"] == 100 and first["latency_histogram"]["count"] == 100
    assert first["temperature_c"] == 52.0 and first["throttled"] is False and first["valid"] is True
    assert rows["job-2"]["throttled"] is True and rows["job-2"]["valid"] is False
    assert rows["job-3"]["latency_histogram"] is None and rows["job-3"]["p50_ms"] == 12.0
    assert rows["job-4"]["latency_histogram"] is None and rows["job-4"]["ok"]  # stored, without what did not hold
    assert all("latency_histogram" not in r for r in plain)  # read only when asked for


def test_results_stored_before_the_migration_read_back_without_the_new_facts(db_url):
    device = SimulatedDevice("rpi-01", profile="rpi5")
    old = device.result("job-old", p50_ms=10.0, meta={"model": MODEL, "manifest_sha256": "f" * 64})
    with open_store(db_url, migrations=MIGRATIONS[:7]) as store:
        Fleet.ingest(store, device.status())
        with store.db.transaction() as tx:  # what the writer of before stored: the columns it knew
            row = {k: v for k, v in result_row(old.envelope).items() if k not in ("build_id", "build_version", "runtime_version", "agent_version", "runs",
                                "temperature_c", "throttled", "latency_histogram")}
            row.update(id=old.envelope.id, device_id="rpi-01", seq=1, ts=old.envelope.ts)
            tx.execute(f"INSERT INTO results ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values()))
    with open_store(db_url) as store:
        [row] = store.results(model=MODEL, with_histogram=True)
    assert row["p50_ms"] == 10.0 and row["build_id"] is None and row["latency_histogram"] is None


def test_a_slower_build_is_slower_on_every_board_with_its_interval_and_fails_the_gate(fleet, capsys):
    fleet.deploy("v1", "a" * 16)
    fleet.deploy("v2", "b" * 16, factor=1.15)
    code, found = compare_json(capsys, fleet)
    assert code == 1
    assert (found["candidate"]["version"], found["baseline"]["version"]) == ("v2", "v1")
    assert found["same_convert_output"] is False and "bootstrap" in found["method"]
    for board in found["boards"]:
        p50 = board["ratios"]["p50"]
        assert board["verdict"] == "slower" and board["evidence"] == "histograms", board
        assert 1 < p50["low"] < 1.15 < p50["high"], p50
        assert set(board["ratios"]) == {"p50", "p90", "p99"}
        assert board["memory_change"] == 0.0 and board["energy_change"] is None  # no power sensor
        assert board["baseline"]["samples"] == 400 and board["candidate"]["counted"] == 1
    profiles = {p["profile"]: p for p in found["profiles"]}
    assert profiles["rpi5"]["boards"] == ["rpi-01", "rpi-02"] and profiles["rpi5"]["verdict"] == "slower"
    assert sorted(found["gate"]["slower"]) == ["orin-01", "profile jetson-orin-nano", "profile rpi5", "rpi-01", "rpi-02"]

    code, out, _ = compare(capsys, fleet)
    assert code == 1
    assert f"{MODEL}: candidate v2 (bbbbbbbbbbbb) against baseline v1 (aaaaaaaaaaaa)" in out
    assert "slower on 3 of 3 board(s) compared" in out and "GATE FAILED" in out

    code, out, _ = compare(capsys, fleet, "--csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 1 and [r["scope"] for r in rows] == ["board"] * 3 + ["profile"] * 2
    assert all(float(r["p50_low"]) > 1 for r in rows) and {r["verdict"] for r in rows} == {"slower"}


def test_the_same_build_deployed_again_is_no_change_and_passes(fleet, capsys):
    fleet.deploy("r1", "a" * 16)
    fleet.deploy("r2", "a" * 16)
    code, found = compare_json(capsys, fleet)
    assert code == 0 and found["same_convert_output"] is True and found["gate"] == {"failed": False, "slower": []}
    assert {b["verdict"] for b in found["boards"]} == {"no change"}
    code, out, _ = compare(capsys, fleet)
    assert code == 0 and "the same convert output" in out and "slower on 0 of 3" in out


def test_a_faster_build_is_faster(fleet, capsys):
    fleet.deploy("v1", "a" * 16)
    fleet.deploy("v2", "b" * 16, factor=0.8)
    code, found = compare_json(capsys, fleet)
    assert code == 0 and {b["verdict"] for b in found["boards"]} == {"faster"}


def test_a_change_under_the_threshold_is_no_change_and_max_slowdown_sets_the_gate_apart(fleet, capsys):
    fleet.deploy("v1", "a" * 16, samples=3000)
    fleet.deploy("v2", "b" * 16, factor=1.03, samples=3000)
    code, found = compare_json(capsys, fleet)
    assert code == 0 and {b["verdict"] for b in found["boards"]} == {"no change"}
    assert all(b["ratios"]["p50"]["low"] > 1 for b in found["boards"])  # real, but under 5 %
    code, found = compare_json(capsys, fleet, "--threshold", "2%")
    assert code == 1 and {b["verdict"] for b in found["boards"]} == {"slower"}
    code, found = compare_json(capsys, fleet, "--threshold", "0.02", "--max-slowdown", "10%")
    assert code == 0 and {b["verdict"] for b in found["boards"]} == {"slower"} and found["max_slowdown"] == 0.10


def test_throttled_invalid_and_failed_runs_never_count(fleet, capsys):
    fleet.deploy("v1", "a" * 16)
    fleet.deploy("v2", "b" * 16)
    fleet.deploy("v2", "b" * 16, factor=3.0, boards=["rpi-01"], throttled=True)
    fleet.deploy("v2", "b" * 16, factor=3.0, boards=["rpi-02"], valid=False)
    with open_store(fleet.url) as store:
        fleet.ingest(store, fleet.devices["orin-01"].result("crashed", ok=False, error_kind="crash",
                                                            meta={"model": MODEL, "build_id": "b" * 16,
                                                                  "build_version": "v2", "artifact_key": "onnx-int8"}))
    code, found = compare_json(capsys, fleet)
    boards = {b["device_id"]: b for b in found["boards"]}
    assert code == 0 and {b["verdict"] for b in boards.values()} == {"no change"}
    assert boards["rpi-01"]["candidate"]["left_out"] == ["throttled"]
    assert boards["rpi-02"]["candidate"]["left_out"] == ["invalid: during the run: throttled"]
    assert boards["orin-01"]["candidate"]["left_out"] == ["failed (crash)"]
    assert "candidate: 1 run(s) left out (throttled)" in boards["rpi-01"]["notes"]


def test_a_board_with_no_run_that_counts_is_not_compared_and_does_not_gate(fleet, capsys):
    fleet.deploy("v1", "a" * 16)
    fleet.deploy("v2", "b" * 16, boards=["rpi-01", "orin-01"])
    fleet.deploy("v2", "b" * 16, factor=2.0, boards=["rpi-02"], throttled=True)
    code, out, _ = compare(capsys, fleet)
    assert code == 0
    assert "rpi-02: no candidate run counts here (1 run(s): throttled)" in out


def test_results_of_older_agents_are_compared_on_their_percentiles_saying_so(fleet, capsys):
    fleet.deploy("v1", "a" * 16, histogram=False)
    fleet.deploy("v2", "b" * 16, factor=1.5)
    code, found = compare_json(capsys, fleet)
    assert code == 0  # no interval, so never a measurable slowdown
    for board in found["boards"]:
        assert board["verdict"] == "unknown" and board["evidence"] == "percentiles"
        assert board["ratios"]["p50"]["ratio"] == pytest.approx(1.5, rel=0.05) and board["ratios"]["p50"]["low"] is None
        assert "the baseline's 1 run(s) (agent 0.1.0) carry no latency histogram" in board["reason"]
    code, out, _ = compare(capsys, fleet)
    assert "unknown" in out and "compared on the stored percentiles only, without an interval" in out


def test_builds_are_named_by_version_or_id_and_the_baseline_is_the_one_before(fleet, capsys):
    fleet.deploy("v1", "a" * 16)
    fleet.deploy("v2", "b" * 16, factor=1.2)
    fleet.deploy("v3", "c" * 16, factor=1.2)
    _, found = compare_json(capsys, fleet)
    assert (found["candidate"]["version"], found["baseline"]["version"]) == ("v3", "v2")
    assert {b["verdict"] for b in found["boards"]} == {"no change"}
    code, found = compare_json(capsys, fleet, "--candidate", "ccc", "--baseline", "v1")
    assert code == 1 and found["candidate"]["build_id"] == "c" * 16 and found["baseline"]["version"] == "v1"
    _, found = compare_json(capsys, fleet, "--candidate", "v2")
    assert found["baseline"]["version"] == "v1"


def test_a_build_that_ships_another_artifact_is_paired_with_a_note(fleet, capsys):
    fleet.deploy("v1", "a" * 16, artifact="onnx-fp32")
    fleet.deploy("v2", "b" * 16, artifact="onnx-int8", factor=0.5)
    code, found = compare_json(capsys, fleet)
    assert code == 0 and {b["verdict"] for b in found["boards"]} == {"faster"}
    assert all("the artifact changed: onnx-fp32 -> onnx-int8" in b["notes"] for b in found["boards"])


@pytest.mark.parametrize("args, message", [
    (["--model", "nope"], "error: no results for model 'nope' in sqlite:///"),
    (["--candidate", "v9"], "error: model 'example:digits-cnn' has no build 'v9' (the candidate); its builds: v1"),
    (["--candidate", "v1"], "error: model 'example:digits-cnn' has no build before v1 (aaaaaaaaaaaa) to compare"),
    (["--candidate", "v1", "--baseline", "aaaa"], "are the same build (v1 (aaaaaaaaaaaa))"),
])
def test_user_mistakes_are_one_actionable_line(fleet, capsys, args, message):
    fleet.deploy("v1", "a" * 16)
    fleet.deploy("v2", "b" * 16)
    code = main(["fleet", "compare", "--db", fleet.url, *(["--model", MODEL] if "--model" not in args else []), *args])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_a_model_with_one_build_has_no_baseline_and_the_error_says_what_to_do(fleet, capsys):
    fleet.deploy("v1", "a" * 16)
    code, _, err = compare(capsys, fleet)
    assert code == 2 and "deploy the baseline first, or name one with --baseline" in err


@pytest.mark.parametrize("args", [["--threshold", "7"], ["--max-slowdown", "half"], ["--json", "--csv"]])
def test_bad_options_are_refused_before_anything_is_read(fleet, capsys, args):
    assert compare(capsys, fleet, *args)[0] == 2


def test_fleet_results_show_the_build(fleet, capsys):
    fleet.deploy("v1", "a" * 16)
    assert main(["fleet", "results", "--db", fleet.url, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["build_version"] for r in rows} == {"v1"} and {r["build_id"] for r in rows} == {"a" * 16}
    assert main(["fleet", "results", "--db", fleet.url]) == 0
    assert "build" in capsys.readouterr().out
