"""Deploy's parts without a broker: picking the artifact from the manifest, picking devices from their
status, the command line's checks and its result table."""
import hashlib
import json
import re
import socket

import pytest

from edgeopt.cli.deploy import COLUMNS, row_cells
from edgeopt.cli.main import main
from edgeopt.deploy import deploy
from edgeopt.deploy.artifact import choose_artifact
from edgeopt.deploy.rollout import Rollout
from edgeopt.deploy.targets import DeviceStatus, parse_status, read_statuses, select_targets
from edgeopt.errors import UserError
from edgeopt_agent import wire
from edgeopt_agent.wire.session import Received
from edgeopt_converters.manifest import build_id


def write_outdir(folder, recommended="onnx-int8", artifacts=None):
    folder.mkdir(parents=True, exist_ok=True)
    data = {"onnx-fp32": b"fp32 model " * 300, "onnx-int8": b"int8 model " * 200}
    entries = []
    for key, blob in data.items():
        (folder / f"{key}.onnx").write_bytes(blob)
        entries.append({"key": key, "path": f"{key}.onnx", "format": "onnx", "precision": key.split("-")[1],
                        "sha256": hashlib.sha256(blob).hexdigest(), "size_bytes": len(blob),
                        "accuracy": {"drop_points": 0.5 if key == "onnx-int8" else 0.0}})
    manifest = {"schema": "edgeopt.manifest/1", "model": {"source": "nets.py:small_cnn", "sha256": "a" * 64},
                "recommended": recommended, "artifacts": artifacts if artifacts is not None else entries}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def test_the_recommended_artifact_is_planned_in_chunks_with_the_manifest_facts(tmp_path):
    outdir = write_outdir(tmp_path / "out")
    chosen = choose_artifact(outdir, chunk_size=1024)
    blob = (outdir / "onnx-int8.onnx").read_bytes()
    assert chosen.key == "onnx-int8" and chosen.size == len(blob) and chosen.chunks.count == 3
    assert chosen.meta == {
        "model": "nets.py:small_cnn", "model_sha256": "a" * 64, "artifact_key": "onnx-int8", "format": "onnx",
        "precision": "int8", "accuracy_drop_points": 0.5,
        "manifest_sha256": hashlib.sha256((outdir / "manifest.json").read_bytes()).hexdigest(),
        "build_id": build_id(json.loads((outdir / "manifest.json").read_text())), "build_version": None,
    }
    assert choose_artifact(outdir, "onnx-fp32").precision == "fp32"


def test_the_job_names_the_build_by_the_manifest_or_by_the_version_deploy_gives(tmp_path):
    outdir = write_outdir(tmp_path / "out")
    manifest = json.loads((outdir / "manifest.json").read_text())
    (outdir / "manifest.json").write_text(json.dumps(dict(manifest, build={"id": "0123456789abcdef",
                                                                          "version": "1.4.0"})))
    assert choose_artifact(outdir).meta["build_id"] == "0123456789abcdef"
    assert choose_artifact(outdir).meta["build_version"] == "1.4.0"
    assert choose_artifact(outdir, build_version="ci-2817").meta["build_version"] == "ci-2817"
    with pytest.raises(UserError, match="build version 'no way' is not usable"):
        choose_artifact(outdir, build_version="no way")


def test_the_release_is_the_model_source_and_the_manifest_creation_time(tmp_path):
    outdir = write_outdir(tmp_path / "out")
    assert choose_artifact(outdir).release is None  # a manifest without "created": no rollback check possible
    manifest = json.loads((outdir / "manifest.json").read_text())
    (outdir / "manifest.json").write_text(json.dumps(dict(manifest, created="2026-11-24T06:00:00+00:00")))
    assert choose_artifact(outdir).release == wire.Release("nets.py:small_cnn", 1795500000.0)


@pytest.mark.parametrize("expires, fragment", [
    ("soon", "is not a duration: give seconds or a number with s, m, h or d"),
    ("0", "is not a duration"),
    ("31d", "valid for 1 s to 30 days, got 2.6784e+06 s"),
])
def test_the_job_lifetime_is_checked_before_anything_is_sent(tmp_path, capsys, expires, fragment):
    outdir = write_outdir(tmp_path / "out")
    assert main(["deploy", str(outdir), "--device", "pi-1", "--unsigned", "--expires", expires]) == 2
    assert fragment in capsys.readouterr().err


@pytest.mark.parametrize("setup, key, fragment", [
    ("nothing", None, "has no manifest.json"),
    ("bad json", None, "is not valid JSON"),
    ("no recommendation", None, "recommends no artifact; pick one with --artifact: onnx-fp32, onnx-int8"),
    ("fine", "onnx-fp16", "no artifact 'onnx-fp16'"),
    ("tensorrt", "trt", "agents run onnx, tflite, ncnn, pte artifacts"),
    ("missing file", None, "does not exist"),
    ("changed file", None, "changed after `edgeopt convert`"),
])
def test_what_cannot_be_deployed_is_said_plainly(tmp_path, setup, key, fragment):
    outdir = tmp_path / "out"
    if setup != "nothing":
        write_outdir(outdir, recommended=None if setup == "no recommendation" else "onnx-int8")
    if setup == "bad json":
        (outdir / "manifest.json").write_text("{")
    if setup == "tensorrt":
        manifest = json.loads((outdir / "manifest.json").read_text())
        manifest["artifacts"].append({"key": "trt", "path": "x.plan", "format": "tensorrt-plan"})
        (outdir / "manifest.json").write_text(json.dumps(manifest))
    if setup == "missing file":
        (outdir / "onnx-int8.onnx").unlink()
    if setup == "changed file":
        (outdir / "onnx-int8.onnx").write_bytes(b"something else")
    with pytest.raises(UserError, match=fragment):
        choose_artifact(outdir, key)


def status(device_id, state="online", profile="rpi5", seq=1):
    return DeviceStatus(device_id, state, seq, profile)


STATUSES = {s.device_id: s for s in [status("pi-1"), status("pi-2"), status("pi-3", state="offline"),
                                     status("nano-1", profile="jetson-nano")]}


def test_targets_are_online_devices_by_id_profile_or_all():
    assert [s.device_id for s in select_targets(STATUSES, device="pi-2")] == ["pi-2"]
    assert [s.device_id for s in select_targets(STATUSES, profile="rpi5")] == ["pi-1", "pi-2"]
    assert [s.device_id for s in select_targets(STATUSES, all_devices=True)] == ["nano-1", "pi-1", "pi-2"]


@pytest.mark.parametrize("kwargs, fragment", [
    ({}, "exactly one of"),
    ({"device": "pi-1", "profile": "rpi5"}, "exactly one of"),
    ({"device": "pi-3"}, "'pi-3' is offline"),
    ({"device": "pi-9"}, "no device 'pi-9' has ever connected"),
    ({"device": "bad/id"}, "invalid device id"),
    ({"profile": "x86-64"}, "no online device has profile 'x86-64'; known devices: nano-1 (jetson-nano, online)"),
])
def test_bad_targets_are_refused(kwargs, fragment):
    with pytest.raises(UserError, match=re.escape(fragment)):
        select_targets(STATUSES, **kwargs)
    with pytest.raises(UserError, match="no device is online"):
        select_targets({"pi-3": STATUSES["pi-3"]}, all_devices=True)


def test_status_messages_give_state_profile_and_signature_policy():
    body = wire.status_body("online", "connected", profile="rpi5", signatures="required",
                                trusted_key_id="0123456789abcdef", agent_version="0.1.0", started_at=1732189000.5)
    envelope = wire.Envelope("pi-1", 7, wire.STATUS_TYPE, body)
    parsed = parse_status(wire.status_topic("pi-1"), envelope.encode())
    assert parsed == DeviceStatus("pi-1", "online", 7, "rpi5", "required", "0123456789abcdef", "0.1.0")
    assert parse_status(wire.status_topic("pi-2"), envelope.encode()) is None  # another device's id
    assert parse_status(wire.status_topic("pi-1"), b"garbage") is None


def test_the_command_needs_exactly_one_target(tmp_path, capsys):
    outdir = write_outdir(tmp_path / "out")
    assert main(["deploy", str(outdir), "--unsigned"]) == 2
    assert "exactly one of" in capsys.readouterr().err


def test_an_unreachable_broker_is_a_user_error(tmp_path):
    outdir = write_outdir(tmp_path / "out")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(UserError, match="cannot reach the MQTT broker"):
        deploy(outdir, broker=f"127.0.0.1:{port}", device="pi-1", unsigned=True)


def test_result_rows_show_runtime_threads_latency_energy_chunks_and_errors():
    answered = {"device_id": "pi-1", "artifact_key": "onnx-int8", "state": "answered", "ok": True, "error": None,
                "result": {"latency_ms": {"p50": 12.3456, "p99": 20.0}, "energy_per_inference_mj": 41.5,
                           "runtime": "onnxruntime", "threads": 4},
                "chunks_sent": 3, "chunks_total": 5}
    assert row_cells(answered) == ["pi-1", "onnx-int8", "onnxruntime", "4", "answered", "12.346", "20.000", "41.500",
                                   "3/5", "ok"]
    assert len(row_cells(answered)) == len(COLUMNS) and COLUMNS[2:4] == ["runtime", "threads"]
    refused = dict(answered, ok=False, result=None, chunks_sent=0,
                   error={"kind": "unsigned_artifact", "message": "sign it"})
    assert row_cells(refused)[2:] == ["-", "-", "answered", "-", "-", "-", "0/5", "unsigned_artifact"]
    waiting = dict(answered, state="delivered", ok=None, result=None, chunks_total=0)
    assert row_cells(waiting)[8:] == ["-", "waiting"]


class QueuedClient:
    """A broker stand-in for deploy: hands out the messages given, in order, and records what is published."""

    def __init__(self, messages):
        self.messages = list(messages)
        self.published = []

    def subscribe(self, filters):
        pass

    def publish(self, topic, payload):
        self.published.append((topic, payload))

    def wait_acked(self, info):
        pass

    def receive(self, timeout_s):
        return self.messages.pop(0) if self.messages else None


def too_big_ts(envelope):
    return envelope.encode().replace(b'"ts":', b'"ts":1' + b"0" * 400 + b',"x":')


def test_malformed_retained_statuses_are_skipped_not_fatal():
    good = wire.Envelope("pi-1", 3, wire.STATUS_TYPE, agent_status("online"))
    client = QueuedClient([Received(wire.status_topic("pi-2"), b"[" * 5000, True),
                           Received(wire.status_topic("pi-3"), too_big_ts(good), True),
                           Received(wire.status_topic("pi-1"), good.encode(), True)])
    assert list(read_statuses(client, quiet_s=0.01, max_s=1.0)) == ["pi-1"]


def agent_status(state):
    return wire.status_body(state, "connected", agent_version="0.1.0", started_at=1732189000.5, profile="rpi5")


def test_junk_retained_statuses_are_not_deploy_targets():
    """100 statuses a client left on the broker that no agent sent (fields missing or of the wrong
    type) are ignored: `--all` targets only the real device and so waits on it alone."""
    junk = [wire.status_body("online", "connected"),  # no agent_version, no started_at
            wire.status_body("online", "connected", agent_version=1, started_at=5.0),
            wire.status_body("online", "connected", agent_version="0.1", started_at="yesterday"),
            wire.status_body("online", "connected", agent_version="0.1", started_at=True),
            {"state": "online", "agent_version": "0.1", "started_at": 5.0}]  # no reason
    messages = [Received(wire.status_topic(f"junk-{i}"),
                         wire.Envelope(f"junk-{i}", 1, wire.STATUS_TYPE, junk[i % len(junk)]).encode(), True)
                for i in range(100)]
    real = wire.Envelope("pi-1", 3, wire.STATUS_TYPE, agent_status("online"))
    messages.append(Received(wire.status_topic("pi-1"), real.encode(), True))
    statuses = read_statuses(QueuedClient(messages), quiet_s=0.01, max_s=5.0)
    assert list(statuses) == ["pi-1"]
    assert [t.device_id for t in select_targets(statuses, all_devices=True)] == ["pi-1"]


def test_a_deploy_takes_only_well_formed_answers_from_the_targeted_device(tmp_path):
    chosen = choose_artifact(write_outdir(tmp_path / "out"))
    jobs = {device_id: wire.benchmark_job(device_id, 1, "job-1", chosen.sha256, chosen.format,
                                              url="http://models/a.onnx", size=chosen.size)
            for device_id in ("pi-1", "pi-2")}

    def answer(device_id, job_device, drop_ok=False, **body):
        full = wire.result_body("job-1", wire.BENCHMARK_JOB, jobs[job_device].id, **body)
        if drop_ok:
            del full["ok"]
        envelope = wire.Envelope(device_id, 1, wire.RESULT_TYPE, full)
        return Received(wire.results_topic(device_id), envelope.encode(), False)

    client = QueuedClient([
        Received(wire.results_topic("pi-1"), b"[" * 5000, False),
        Received(wire.results_topic("pi-1"), too_big_ts(jobs["pi-1"]), False),
        answer("pi-1", "pi-1", drop_ok=True, result={"ok": True}),
        answer("pi-1", "pi-1", result={"ok": True, "runtime": "onnxruntime"}),
        answer("pi-2", "pi-1", error=wire.error_info("failed", "not mine to answer")),
        answer("pi-2", "pi-2", error=wire.error_info("failed", "no runtime")),
    ])
    outcomes = {o["device_id"]: o for o in Rollout(client, chosen, jobs).run(wait=True, timeout_s=5.0)}
    assert (outcomes["pi-1"]["state"], outcomes["pi-1"]["ok"], outcomes["pi-1"]["result"]["runtime"]) == (
        "answered", True, "onnxruntime")
    assert (outcomes["pi-2"]["ok"], outcomes["pi-2"]["error"]["message"]) == (False, "no runtime")


def test_an_answer_sent_again_is_reported_once(tmp_path):
    chosen = choose_artifact(write_outdir(tmp_path / "out"))
    jobs = {device_id: wire.benchmark_job(device_id, 1, "job-1", chosen.sha256, chosen.format,
                                              url="http://models/a.onnx", size=chosen.size)
            for device_id in ("pi-1", "pi-2")}

    def answer(device_id):
        body = wire.result_body("job-1", wire.BENCHMARK_JOB, jobs[device_id].id, result={"ok": True})
        return Received(wire.results_topic(device_id),
                        wire.Envelope(device_id, 1, wire.RESULT_TYPE, body).encode(), False)

    first = answer("pi-1")
    # The agent keeps a result until a collector confirms it, so a deploy can see it twice.
    client = QueuedClient([first, first, answer("pi-2")])
    events = []
    outcomes = Rollout(client, chosen, jobs, progress=events.append).run(wait=True, timeout_s=5.0)
    assert [o["state"] for o in outcomes] == ["answered", "answered"]
    assert [e.device_id for e in events if e.stage == "answered"] == ["pi-1", "pi-2"]


def test_a_job_the_device_has_not_reacted_to_is_sent_again_the_same_bytes(tmp_path):
    """A broker that dies with a job loses it: the deploy sends it again (with back-off) until the device
    asks for the chunks or answers; the board runs one job message once however often it arrives."""
    chosen = choose_artifact(write_outdir(tmp_path / "out"))
    jobs = {"pi-1": wire.benchmark_job("pi-1", 1, "job-1", chosen.sha256, chosen.format,
                                       url="http://models/a.onnx", size=chosen.size)}
    client = QueuedClient([])
    [outcome] = Rollout(client, chosen, jobs, resend_s=0.3).run(wait=True, timeout_s=2.2)
    assert outcome["state"] == "timeout"
    sent = [payload for topic, payload in client.published if topic == wire.jobs_topic("pi-1")]
    assert 3 <= len(sent) <= 4  # at 0, 0.3, 0.9 and 2.1 s: the waits double
    assert set(sent) == {jobs["pi-1"].encode()}

    answer = wire.Envelope("pi-1", 1, wire.RESULT_TYPE,
                           wire.result_body("job-1", wire.BENCHMARK_JOB, jobs["pi-1"].id, result={"ok": True}))
    client = QueuedClient([Received(wire.results_topic("pi-1"), answer.encode(), False)])
    Rollout(client, chosen, jobs, resend_s=0.3).run(wait=True, timeout_s=2.0)
    assert len(client.published) == 1  # answered: never sent again
