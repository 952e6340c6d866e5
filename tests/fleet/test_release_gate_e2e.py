"""Release to release on three real agents: a baseline build, ten re-deploys of it, then a build made 10 %
slower; `edgeopt fleet compare` says slower on every board, with its interval, and exits 1, and the
re-deploys of the same build fail the gate at most once in ten.

The agents are `python -m edgeopt_agent.daemon` processes with a broker and the collector; their runtime
is paced_runtime.py (ONNX Runtime, each call padded to the latency the model file names), because no
real model can be made exactly 10 % slower on CPUs that other work shares."""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import threading
import time

import pytest
from harness import AgentProcess, wait_until
from mqtt_broker import MqttBroker

import paced_runtime
from edgeopt.cli.main import main
from edgeopt.deploy import deploy
from edgeopt.deploy.api import broker_settings
from edgeopt.fleet.collector import Collector
from edgeopt.fleet.store import open_store
from edgeopt_agent import runtimes

pytestmark = pytest.mark.slow

MODEL = "paced-net"
BASE_MS, SLOWER_MS = 20.0, 22.0
REDEPLOYS = 10
BOARDS = {"board-a": "x86-64", "board-b": "x86-64", "board-c": "rpi5"}
# About 40 paced calls a board: a benchmark of a second, so twelve deploys fit the test's two minutes.
BENCH = {"runs": 40, "duration_s": 0, "warmup_runs": 3, "warmup_s": 0, "idle_s": 0, "timeout_s": 60,
         "runtime": "paced", "reference": None}


def convert_output(folder, pace_ms, created):
    """A convert output as `edgeopt deploy` reads it: the paced model and its manifest."""
    data = paced_runtime.paced_onnx(pace_ms)
    folder.mkdir(parents=True)
    (folder / "model.onnx").write_bytes(data)
    sha256 = hashlib.sha256(data).hexdigest()
    manifest = {
        "schema": "edgeopt.manifest/1", "created": created.isoformat(timespec="seconds"), "device": "x86-64",
        "model": {"source": MODEL, "kind": "onnx", "sha256": sha256},
        "tool_versions": {"edgeopt": "0.1.0"}, "options": {"formats": ["onnx"], "precisions": ["fp32"]},
        "recommended": "onnx-fp32",
        "artifacts": [{"key": "onnx-fp32", "path": "model.onnx", "format": "onnx", "precision": "fp32",
                       "sha256": sha256, "size_bytes": len(data), "recommended": True,
                       "board": {"runtime": "paced", "precision": None, "threads": 1, "fallback_runtimes": []}}],
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


@pytest.fixture
def fleet(tmp_path, monkeypatch):
    pytest.importorskip("onnx", reason="the paced model is written with the onnx package")
    monkeypatch.setattr(runtimes, "TABLE", runtimes.TABLE + (paced_runtime.ROW,))
    paths = [paced_runtime.site_folder(tmp_path / "site"), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    broker = MqttBroker(tmp_path / "broker").start()
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    store = open_store(url)
    collector = Collector(store, broker_settings(broker.address), client_id="release-gate-collector")
    stop = threading.Event()
    thread = threading.Thread(target=collector.run, args=(stop,), daemon=True)
    agents = [AgentProcess(broker, tmp_path / name, name, profile=profile) for name, profile in BOARDS.items()]
    try:
        thread.start()
        for agent in agents:
            agent.start()
        wait_until(lambda: {d["device_id"]: d["state"] for d in store.devices()} == dict.fromkeys(BOARDS, "online"),
                   "three agents online", timeout=60)
        yield broker, store, url, agents
    finally:
        stop.set()
        thread.join(20)
        for agent in agents:
            agent.close()
        store.close()
        broker.stop()


def test_a_build_ten_percent_slower_fails_the_gate_on_every_board_and_redeploys_do_not(fleet, tmp_path, capsys):
    broker, store, url, agents = fleet
    started = time.monotonic()
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    baseline = convert_output(tmp_path / "v1", BASE_MS, now - datetime.timedelta(minutes=5))
    candidate = convert_output(tmp_path / "v2", SLOWER_MS, now)
    versions = ["v1"] + [f"v1-r{k}" for k in range(1, REDEPLOYS + 1)]

    def measured(outdir, version):
        rows = deploy(outdir, broker.address, all_devices=True, unsigned=True, wait=True, timeout_s=60,
                      bench=BENCH, build_version=version)
        assert sorted(r["device_id"] for r in rows) == sorted(BOARDS), rows
        assert all(r["ok"] for r in rows), [(r["device_id"], r["error"]) for r in rows]
        wait_until(lambda: len([r for r in store.results(model=MODEL, latest=False)
                                if r["build_version"] == version]) == len(BOARDS),
                   f"the collector to store {version}'s results")

    for version in versions:
        measured(baseline, version)
    measured(candidate, "v2")

    stored = store.results(model=MODEL, latest=False, with_histogram=True)
    assert len(stored) == len(BOARDS) * (len(versions) + 1)
    for row in stored:  # the evidence each result keeps
        assert row["latency_histogram"]["count"] == row["runs"] >= 40, row
        assert row["runtime"] == "paced" and row["runtime_version"] and row["agent_version"], row
        assert row["build_id"] and row["valid"] is True and row["throttled"] is False, row

    # The slower build: slower on each board, with its interval, and the gate fails.
    code = main(["fleet", "compare", "--model", MODEL, "--db", url, "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1, report
    assert report["candidate"]["version"] == "v2" and report["baseline"]["version"] == versions[-1]
    assert report["same_convert_output"] is False
    boards = {b["device_id"]: b for b in report["boards"]}
    assert sorted(boards) == sorted(BOARDS)
    for board in boards.values():
        p50 = board["ratios"]["p50"]
        assert board["verdict"] == "slower", board
        assert 1.0 < p50["low"] < 1.10 < p50["high"] < 1.2, p50  # the interval holds the true 10 %
    assert sorted(report["gate"]["slower"]) == sorted(list(BOARDS) + ["profile x86-64", "profile rpi5"])

    # The same in words: one line per board, the verdict, the gate.
    assert main(["fleet", "compare", "--model", MODEL, "--db", url]) == 1
    text = capsys.readouterr().out
    assert "GATE FAILED" in text and text.count("SLOWER") >= len(BOARDS)
    with capsys.disabled():
        print(text)  # shown with -s: the figures docs/FLEET.md quotes

    # Ten re-deploys of the same build, each against the one before: at most one false gate.
    false_gates = []
    for before, after in zip(versions, versions[1:]):
        code = main(["fleet", "compare", "--model", MODEL, "--db", url, "--candidate", after, "--baseline", before,
                     "--json"])
        found = json.loads(capsys.readouterr().out)
        assert found["same_convert_output"] is True
        assert code == (1 if found["gate"]["failed"] else 0)
        if found["gate"]["failed"]:
            false_gates.append((after, found["gate"]["slower"]))
    assert len(false_gates) <= 1, false_gates
    with capsys.disabled():
        print(f"release gate e2e: {time.monotonic() - started:.0f} s, false gates {false_gates}")
