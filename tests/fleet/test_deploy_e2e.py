"""`edgeopt deploy` end to end: a real conversion, a real broker, real agents (subprocesses) and the
collector: the artifact goes through the broker in chunks of a signed job, the agent measures it, the
fleet files the result; refused, tampered, replayed, rolled-back and interrupted deploys; targeting
by profile."""
from __future__ import annotations

import datetime
import json
import math
import shutil
import threading
import time

import pytest
from deploy_harness import RawClient, deploy_agent
from harness import QUICK_BENCH, wait_until
from mqtt_broker import MqttBroker

from edgeopt.cli.main import main
from edgeopt.deploy import deploy, init_keys
from edgeopt.deploy.api import broker_settings
from edgeopt.deploy.collector_keys import CollectorKey
from edgeopt.deploy.keys import SigningKey
from edgeopt.errors import UserError
from edgeopt.fleet.collector import Collector
from edgeopt.fleet.store import open_store
from edgeopt_agent import wire
from edgeopt_agent.wire import plan_chunks, read_chunk

pytestmark = pytest.mark.slow

CHUNK_KB = 1
CLI_BENCH = ["--runs", "5", "--duration", "0", "--idle", "0"]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """A real `edgeopt convert` of a small CNN for x86-64: ONNX FP32 and INT8, each ~15 KB (~4 s)."""
    pytest.importorskip("torch", reason="converting needs the convert extra (torch)")
    from pathlib import Path

    import edgeopt

    nets = Path(__file__).resolve().parents[1] / "converters" / "nets.py"
    outdir = tmp_path_factory.mktemp("converted")
    manifest = edgeopt.convert(f"{nets}:small_cnn", device="x86-64", output_dir=outdir, input_shape="1,3,16,16",
                               formats=("onnx",), time_on_host=False)
    return outdir, manifest


def entry(manifest, key):
    return next(a for a in manifest["artifacts"] if a["key"] == key)


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    pytest.importorskip("cryptography", reason="signing needs the cryptography package (fleet extra)")
    folder = tmp_path_factory.mktemp("keys")
    return init_keys(folder / "mine"), init_keys(folder / "someone-else")


class Fleet:
    def __init__(self, broker, agents, store, url):
        self.broker, self.agents, self.store, self.url = broker, agents, store, url


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, keys):
    """A broker, the collector, and three agents: lab-x86 (x86-64, signatures required), lab-pi
    (rpi5, signatures off) and lab-old (x86-64, stopped: its retained status says offline)."""
    workdir = tmp_path_factory.mktemp("fleet")
    broker = MqttBroker(workdir / "broker").start()
    url = f"sqlite:///{workdir / 'fleet.db'}"
    store = open_store(url)
    # Signed confirmations, certified by the key lab-x86 trusts: it forgets results on no others.
    collector = Collector(store, broker_settings(broker.address), client_id="deploy-e2e-collector",
                          collector_key=CollectorKey.ephemeral(SigningKey.load(keys[0].private_key), "e2e"))
    stop = threading.Event()
    thread = threading.Thread(target=collector.run, args=(stop,), daemon=True)
    agents = {
        "lab-x86": deploy_agent(broker, workdir, "lab-x86", "x86-64", trusted_key=keys[0].public_key),
        "lab-pi": deploy_agent(broker, workdir, "lab-pi", "rpi5"),
        "lab-old": deploy_agent(broker, workdir, "lab-old", "x86-64"),
    }
    try:
        thread.start()
        for agent in agents.values():
            agent.start()

        def states():
            return {d["device_id"]: d["state"] for d in store.devices()}

        wait_until(lambda: states() == {"lab-x86": "online", "lab-pi": "online", "lab-old": "online"},
                   "three agents online")
        assert agents["lab-old"].terminate() == 0
        wait_until(lambda: states()["lab-old"] == "offline", "lab-old offline")
        yield Fleet(broker, agents, store, url)
    finally:
        stop.set()
        thread.join(20)
        for agent in agents.values():
            agent.close()
        store.close()
        broker.stop()


def run_cli(capsys, *args):
    code = main(["deploy", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_deploy_waits_for_the_measurement_and_the_fleet_files_it(converted, keys, fleet, capsys):
    outdir, manifest = converted
    fp32 = entry(manifest, "onnx-fp32")
    code, out, err = run_cli(capsys, outdir, "--device", "lab-x86", "--artifact", "onnx-fp32",
                             "--broker", fleet.broker.address, "--key", keys[0].private_key, "--wait",
                             "--chunk-kb", CHUNK_KB, "--json", *CLI_BENCH)
    assert code == 0, err
    [row] = json.loads(out)
    assert row["device_id"] == "lab-x86" and row["state"] == "answered"
    assert row["ok"] is True and row["error"] is None
    total = math.ceil(fp32["size_bytes"] / (CHUNK_KB * 1024))
    assert row["chunks_total"] == total and row["chunks_sent"] == total
    assert row["result"]["latency_ms"]["p50"] > 0 and row["result"]["runtime"] == "onnxruntime"
    assert row["meta"]["precision"] == "fp32" and row["meta"]["model_sha256"] == manifest["model"]["sha256"]
    assert f"{fp32['sha256']}.onnx" in fleet.agents["lab-x86"].artifacts()
    assert "lab-x86: answered: ok" in err  # progress, on stderr

    stored = wait_until(lambda: [r for r in fleet.store.results(device="lab-x86") if r["job_id"] == row["job_id"]],
                        "the collector to store the result")
    assert stored[0]["ok"]
    code = main(["fleet", "results", "--db", fleet.url, "--device", "lab-x86", "--json"])
    shown = [r for r in json.loads(capsys.readouterr().out) if r["job_id"] == row["job_id"]]
    assert code == 0 and len(shown) == 1
    assert shown[0]["artifact_key"] == "onnx-fp32" and shown[0]["precision"] == "fp32"
    assert shown[0]["accuracy_drop_points"] == fp32["accuracy"]["drop_points"]
    assert shown[0]["p50_ms"] == pytest.approx(row["result"]["latency_ms"]["p50"])


@pytest.mark.parametrize("signer, kind", [("unsigned", "unsigned_job"), ("someone-else", "signature_invalid")])
def test_an_agent_with_a_trusted_key_refuses_unsigned_and_foreign_artifacts(converted, keys, fleet, capsys,
                                                                            signer, kind):
    """Sent with --force: deploy itself refuses to send what lab-x86's status says it will refuse
    (test_deploy_refusals.py); the agent must refuse it all the same."""
    outdir, manifest = converted
    int8 = entry(manifest, "onnx-int8")
    signing = ["--unsigned"] if signer == "unsigned" else ["--key", keys[1].private_key]
    code, out, err = run_cli(capsys, outdir, "--device", "lab-x86", "--artifact", "onnx-int8", "--json", "--force",
                             "--broker", fleet.broker.address, *signing, "--wait", "--chunk-kb", CHUNK_KB, *CLI_BENCH)
    assert code == 1, err
    [row] = json.loads(out)
    assert row["state"] == "answered" and row["ok"] is False and row["error"]["kind"] == kind
    assert row["result"] is None and row["chunks_sent"] == 0  # refused before a single chunk was asked for
    agent = fleet.agents["lab-x86"]
    assert f"{int8['sha256']}.onnx" not in agent.artifacts() and agent.chunks_held(int8["sha256"]) == 0


def test_deploy_does_not_send_an_unsigned_job_to_an_agent_that_requires_signatures(converted, fleet, capsys):
    outdir, manifest = converted
    fp32 = entry(manifest, "onnx-fp32")
    agent = fleet.agents["lab-x86"]
    seen = len(agent.log())
    code, out, err = run_cli(capsys, outdir, "--device", "lab-x86", "--artifact", "onnx-fp32", "--unsigned",
                             "--broker", fleet.broker.address, "--wait", "--timeout", "10", "--chunk-kb", CHUNK_KB)
    assert code == 2 and out == ""
    [line] = err.strip().splitlines()
    assert line.startswith("error: lab-x86 only run signed jobs") and "--key FILE" in line and "--force" in line
    time.sleep(1.0)  # a job sent would have reached the agent (its debug log names each PUBLISH) by now
    received = [line for line in agent.log()[seen:].splitlines()
                if "Received PUBLISH" in line and wire.jobs_topic("lab-x86") in line]
    assert received == [] and agent.chunks_held(fp32["sha256"]) == 0


def test_an_agent_whose_profile_is_not_its_cpu_says_so_and_the_fleet_shows_it(fleet, capsys):
    """lab-pi is an x86 agent started with --profile rpi5."""
    assert "PROFILE MISMATCH: profile rpi5 does not describe this CPU (arch: profile rpi5 is aarch64" in \
        fleet.agents["lab-pi"].log()
    assert main(["fleet", "devices", "--db", fleet.url, "--json"]) == 0
    devices = {d["device_id"]: d for d in json.loads(capsys.readouterr().out)}
    check = devices["lab-pi"]["profile_check"]
    assert check["ok"] is False and check["mismatch"][0].startswith("arch: profile rpi5 is aarch64")


def test_tampered_bytes_never_reach_the_model_parser(converted, keys, fleet, tmp_path):
    """A job signed with the fleet key whose chunks make other bytes than the artifact it names."""
    outdir, manifest = converted
    int8 = entry(manifest, "onnx-int8")
    tampered = tmp_path / "tampered.onnx"
    data = bytearray((outdir / int8["path"]).read_bytes())
    data[len(data) // 2] ^= 0xFF
    tampered.write_bytes(bytes(data))
    plan, size, _ = plan_chunks(tampered, 1024)
    meta = {"model": manifest["model"]["source"], "artifact_key": "onnx-int8", "format": "onnx", "precision": "int8"}
    job = wire.benchmark_job("lab-x86", 1, "tampered", int8["sha256"], "onnx", chunks=plan, size=size,
                                 signer=SigningKey.load(keys[0].private_key).sign_job, meta=meta, **QUICK_BENCH)
    attacker = RawClient(fleet.broker, [wire.transfer_topic("lab-x86"), wire.results_topic("lab-x86")])
    try:
        attacker.publish(wire.jobs_topic("lab-x86"), job)
        asked = attacker.wait_for(wire.transfer_topic("lab-x86"), lambda e: e["body"]["request_id"] == job.id)
        assert asked["body"]["missing"] == list(range(plan.count))  # the signature holds: it asks for the bytes
        for index in asked["body"]["missing"]:
            attacker.publish(wire.chunks_topic("lab-x86"),
                             wire.chunk_message("lab-x86", index + 1, int8["sha256"], index,
                                                    read_chunk(tampered, plan, index)))
        answer = attacker.wait_for(wire.results_topic("lab-x86"), lambda e: e["body"]["request_id"] == job.id)
    finally:
        attacker.close()
    assert answer["body"]["ok"] is False and answer["body"]["error"]["kind"] == "artifact_mismatch"
    agent = fleet.agents["lab-x86"]
    assert f"{int8['sha256']}.onnx" not in agent.artifacts() and agent.chunks_held(int8["sha256"]) == 0


def test_a_deployed_job_is_signed_whole_and_a_copy_of_it_is_refused_as_a_replay(converted, keys, fleet, capsys):
    outdir, manifest = converted
    spy = RawClient(fleet.broker, [wire.jobs_topic("lab-x86"), wire.results_topic("lab-x86")])
    try:
        code, out, err = run_cli(capsys, outdir, "--device", "lab-x86", "--artifact", "onnx-fp32", "--expires", "2h",
                                 "--broker", fleet.broker.address, "--key", keys[0].private_key, "--wait",
                                 "--chunk-kb", CHUNK_KB, "--json", *CLI_BENCH)
        assert code == 0, err
        [row] = json.loads(out)
        assert row["ok"] is True
        body = spy.wait_for(wire.jobs_topic("lab-x86"), lambda e: e["body"]["job_id"] == row["job_id"])["body"]
        assert body["target"] == {"devices": ["lab-x86"], "profile": None}
        assert body["expires_at"] - body["issued_at"] == pytest.approx(7200)
        created = datetime.datetime.fromisoformat(manifest["created"]).timestamp()
        assert body["release"] == {"model": manifest["model"]["source"], "version": created}
        assert body["signature"]["key_id"] == SigningKey.load(keys[0].private_key).key_id
        # the options given, how to feed the artifact's input (from the manifest) and the FP32
        # outputs the board must reproduce: all signed
        reference = body["bench"].pop("reference")
        assert body["bench"] == {"runs": 5, "duration_s": 0.0, "idle_s": 0.0,
                                 "runtime": "onnxruntime", "threads": 2,  # the manifest's board configuration
                                 "inputs": [{"name": "x", "shape": [1, 3, 16, 16], "dtype": "float32"}]}
        assert reference["samples"] == 4 and [o["name"] for o in reference["outputs"]] == ["output_0"]
        assert row["result"]["output_check"]["ok"] is True and row["result"]["valid"] is True
        body["bench"]["reference"] = reference

        copy = wire.Envelope("lab-x86", 1, wire.BENCHMARK_JOB, body)  # the same signed job, a new message
        spy.publish(wire.jobs_topic("lab-x86"), copy)
        answer = spy.wait_for(wire.results_topic("lab-x86"), lambda e: e["body"]["request_id"] == copy.id)
    finally:
        spy.close()
    assert answer["body"]["ok"] is False and answer["body"]["error"]["kind"] == "replayed"
    assert answer["body"]["result"] is None


def test_an_older_build_is_refused_unless_deployed_with_allow_downgrade(converted, keys, fleet, tmp_path, capsys):
    outdir, _ = converted
    older = tmp_path / "older"
    shutil.copytree(outdir, older)
    manifest = json.loads((older / "manifest.json").read_text())
    (older / "manifest.json").write_text(json.dumps(dict(manifest, created="2020-01-01T00:00:00+00:00")))
    common = ("--device", "lab-x86", "--artifact", "onnx-fp32", "--broker", fleet.broker.address,
              "--key", keys[0].private_key, "--wait", "--chunk-kb", CHUNK_KB, "--json", *CLI_BENCH)
    assert run_cli(capsys, outdir, *common)[0] == 0  # the current build: the device accepts it

    code, out, err = run_cli(capsys, older, *common)
    [row] = json.loads(out)
    assert code == 1 and row["error"]["kind"] == "downgrade" and "--allow-downgrade" in row["error"]["message"]
    code, out, err = run_cli(capsys, older, *common, "--allow-downgrade")
    [row] = json.loads(out)
    assert code == 0 and row["ok"] is True, err


def test_a_file_changed_after_convert_is_not_sent(converted, fleet, tmp_path, capsys):
    outdir, manifest = converted
    copy = tmp_path / "out"
    shutil.copytree(outdir, copy)
    path = copy / entry(manifest, "onnx-fp32")["path"]
    path.write_bytes(path.read_bytes() + b"\0")
    code, out, err = run_cli(capsys, copy, "--device", "lab-pi", "--artifact", "onnx-fp32",
                             "--broker", fleet.broker.address, "--unsigned")
    assert code == 2 and "changed after `edgeopt convert`" in err


def test_profile_and_all_target_online_devices_only(converted, keys, fleet):
    outdir, _ = converted
    common = dict(broker=fleet.broker.address, private_key=keys[0].private_key, artifact="onnx-fp32",
                  chunk_size=1024, bench=QUICK_BENCH, timeout_s=60)
    rows = deploy(outdir, profile="x86-64", **common)  # lab-old is x86-64 too, but offline
    assert [(r["device_id"], r["state"]) for r in rows] == [("lab-x86", "delivered")]
    rows = deploy(outdir, all_devices=True, **common)
    assert sorted(r["device_id"] for r in rows) == ["lab-pi", "lab-x86"]
    with pytest.raises(UserError, match="no online device has profile 'jetson-nano'; known devices: lab-old"):
        deploy(outdir, profile="jetson-nano", **common)
    with pytest.raises(UserError, match="device 'lab-old' is offline"):
        deploy(outdir, device="lab-old", **common)
    with pytest.raises(UserError, match="no device 'lab-nope' has ever connected"):
        deploy(outdir, device="lab-nope", **common)


class Interrupted(Exception):
    pass


def test_an_interrupted_transfer_resumes_with_only_the_missing_chunks(converted, fleet):
    outdir, manifest = converted
    int8 = entry(manifest, "onnx-int8")
    agent = fleet.agents["lab-pi"]
    common = dict(device="lab-pi", broker=fleet.broker.address, artifact="onnx-int8", unsigned=True,
                  chunk_size=1024, bench=QUICK_BENCH, timeout_s=60)

    def stop_after_four(event):
        if event.chunks_sent >= 4:
            raise Interrupted("the user pressed Ctrl-C")

    with pytest.raises(Interrupted):
        deploy(outdir, progress=stop_after_four, **common)
    total = math.ceil(int8["size_bytes"] / 1024)

    def settled():  # chunks published before the interruption are still on their way
        first = agent.chunks_held(int8["sha256"])
        threading.Event().wait(0.5)
        return first if first == agent.chunks_held(int8["sha256"]) and first >= 4 else None

    held = wait_until(settled, "the interrupted chunks to land")
    assert held < total

    [row] = deploy(outdir, wait=True, **common)
    assert row["ok"] is True, row["error"]
    assert row["chunks_total"] == total and row["chunks_sent"] == total - held
    assert f"{int8['sha256']}.onnx" in agent.artifacts() and agent.chunks_held(int8["sha256"]) == 0


@pytest.mark.parametrize("wait", [True, False])
def test_a_device_that_never_answers_times_out(converted, mqtt_broker, capsys, wait):
    """A board that says it is online but does not run an agent (or is stuck): deploy gives up in time."""
    outdir, _ = converted
    ghost = RawClient(mqtt_broker, [])
    try:
        status = wire.status_body(wire.ONLINE, "connected", profile="x86-64", agent_version="0.1.0",
                                      started_at=time.time())
        ghost.publish(wire.status_topic("ghost"), wire.Envelope("ghost", 1, wire.STATUS_TYPE, status),
                      retain=True)
        code, out, err = run_cli(capsys, outdir, "--device", "ghost", "--broker", mqtt_broker.address, "--unsigned",
                                 "--timeout", "1", "--json", *(["--wait"] if wait else []))
    finally:
        ghost.close()
    assert code == 1
    [row] = json.loads(out)
    assert row["state"] == "timeout" and row["ok"] is False and row["error"]["kind"] == "timeout"
    assert ("had not answered" if wait else "had not asked for the artifact") in row["error"]["message"]


def test_with_a_url_the_device_downloads_the_artifact_itself(converted, fleet, tmp_path):
    import functools
    import http.server

    outdir, manifest = converted
    fp32 = entry(manifest, "onnx-fp32")
    agent = fleet.agents["lab-pi"]
    (agent.data_dir / "artifacts" / f"{fp32['sha256']}.onnx").unlink(missing_ok=True)  # earlier tests sent it
    served = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            served.append(self.path)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(outdir)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/{fp32['path']}"
        [row] = deploy(outdir, broker=fleet.broker.address, device="lab-pi", artifact="onnx-fp32", unsigned=True,
                       url=url, wait=True, bench=QUICK_BENCH, timeout_s=60)
    finally:
        server.shutdown()
        server.server_close()
    assert row["ok"] is True, row["error"]
    assert row["chunks_total"] == 0 and row["chunks_sent"] == 0
    assert served == [f"/{fp32['path']}"]
    assert f"{fp32['sha256']}.onnx" in agent.artifacts()


def test_an_int8_artifact_is_valid_on_the_board_and_a_miscomputing_one_is_invalid(converted, keys, fleet, tmp_path,
                                                                                     capsys):
    """The board judges with the tolerance the conversion recorded for the artifact; an artifact
    whose weights changed after conversion (its manifest entry updated to match, as a converter bug
    would leave it) computes something else, and the board says so: deploy --wait exits 1."""
    import hashlib

    from model_files import perturb_onnx_weights

    outdir, manifest = converted
    common = ("--device", "lab-x86", "--artifact", "onnx-int8", "--broker", fleet.broker.address,
              "--key", keys[0].private_key, "--wait", "--chunk-kb", 16, "--json", *CLI_BENCH)
    code, out, err = run_cli(capsys, outdir, *common)
    [row] = json.loads(out)
    assert code == 0, err
    assert row["result"]["valid"] is True and row["result"]["output_check"]["ok"] is True
    assert entry(manifest, "onnx-int8")["reference_figures"]["outputs"][0]["cosine"] is not None

    changed = tmp_path / "changed"
    shutil.copytree(outdir, changed)
    data = json.loads((changed / "manifest.json").read_text())
    item = entry(data, "onnx-int8")
    path = changed / item["path"]
    perturb_onnx_weights(path)
    item.update(sha256=hashlib.sha256(path.read_bytes()).hexdigest(), size_bytes=path.stat().st_size)
    (changed / "manifest.json").write_text(json.dumps(data))

    code, out, err = run_cli(capsys, changed, *common)
    [row] = json.loads(out)
    assert row["ok"] is True and row["result"]["valid"] is False
    assert row["result"]["invalid_reasons"][-1].startswith("output_mismatch")
    assert code == 1
    code, out, err = run_cli(capsys, changed, *[c for c in common if c != "--json"], "--allow-invalid")
    assert code == 0 and "INVALID" in out and "lab-x86: INVALID: output_mismatch" in err
