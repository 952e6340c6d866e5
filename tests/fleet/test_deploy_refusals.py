"""`edgeopt deploy` does not send a job that a device's retained status says it will refuse: unsigned to a
device that requires signed jobs, or signed with a key it does not trust. One line, exit 2, unless --force.
Statuses go through a real broker; a bare client on the jobs topics sees what was (not) sent."""
from __future__ import annotations

import hashlib
import json
import time
import uuid
from types import SimpleNamespace

import pytest
from deploy_harness import RawClient

from edgeopt.cli.main import main
from edgeopt.deploy import deploy
from edgeopt.deploy.api import _check_signatures
from edgeopt.deploy.targets import DeviceStatus
from edgeopt.errors import UserError
from edgeopt_agent import wire

TRUSTED = "0123456789abcdef"


def write_outdir(folder):
    folder.mkdir(parents=True, exist_ok=True)
    blob = b"fp32 model " * 300
    (folder / "model.onnx").write_bytes(blob)
    entry = {"key": "onnx-fp32", "path": "model.onnx", "format": "onnx", "precision": "fp32",
             "sha256": hashlib.sha256(blob).hexdigest(), "size_bytes": len(blob)}
    manifest = {"schema": "edgeopt.manifest/1", "model": {"source": "nets.py:small_cnn", "sha256": "a" * 64},
                "recommended": "onnx-fp32", "artifacts": [entry]}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


@pytest.fixture
def boards(mqtt_broker):
    """Two online boards of one profile (fresh ids: the broker outlives the test): one requires signed jobs,
    one runs anything. A bare client listens on both jobs topics."""
    tag = uuid.uuid4().hex[:6]
    signed, open_ = f"signed-{tag}", f"open-{tag}"
    profile = f"board-{tag}"
    client = RawClient(mqtt_broker, [wire.jobs_topic(signed), wire.jobs_topic(open_)])
    try:
        for device_id, signatures in ((signed, "required"), (open_, "off")):
            body = wire.status_body("online", "connected", profile=profile, agent_version="0.1.0",
                                    started_at=time.time(), signatures=signatures,
                                    trusted_key_id=TRUSTED if signatures == "required" else None)
            client.publish(wire.status_topic(device_id), wire.Envelope(device_id, 1, wire.STATUS_TYPE, body),
                           retain=True)
        yield SimpleNamespace(signed=signed, open=open_, profile=profile, client=client,
                              address=f"{mqtt_broker.host}:{mqtt_broker.port}")
    finally:
        client.close()


def jobs_sent(boards, settle_s=1.0):
    """Job messages on the boards' jobs topics (QoS 1 on one broker: a sent job arrives within the wait)."""
    time.sleep(settle_s)
    return [m for m in boards.client.messages if m["topic"].endswith("/jobs")]


def test_an_unsigned_deploy_to_a_board_that_requires_signatures_is_not_sent(boards, tmp_path, capsys):
    outdir = write_outdir(tmp_path / "out")
    code = main(["deploy", str(outdir), "--device", boards.signed, "--unsigned", "--broker", boards.address,
                 "--timeout", "5"])
    err = capsys.readouterr().err
    assert code == 2
    [line] = err.strip().splitlines()
    assert line.startswith(f"error: {boards.signed} only run signed jobs (their status says signatures: required)")
    assert "--key FILE" in line and "`edgeopt keys init`" in line and "--force" in line
    assert "warning" not in err.lower()  # one line, not warnings and then a send
    assert jobs_sent(boards) == []


def test_a_deploy_to_several_boards_is_refused_as_a_whole_naming_only_those_that_would_refuse(boards, tmp_path):
    outdir = write_outdir(tmp_path / "out")
    with pytest.raises(UserError) as caught:
        deploy(outdir, broker=boards.address, profile=boards.profile, unsigned=True, timeout_s=5)
    assert str(caught.value).startswith(f"{boards.signed} only run signed jobs") and boards.open not in str(caught.value)
    assert jobs_sent(boards) == []


def test_with_force_the_unsigned_job_is_sent_anyway(boards, tmp_path, capsys, caplog):
    outdir = write_outdir(tmp_path / "out")
    code = main(["deploy", str(outdir), "--device", boards.signed, "--unsigned", "--force", "--broker", boards.address,
                 "--timeout", "2", "--json"])
    [row] = json.loads(capsys.readouterr().out)
    assert code == 1 and row["state"] == "timeout"  # nobody answers: there is no agent behind the status
    [job] = jobs_sent(boards, settle_s=0)
    assert job["topic"] == wire.jobs_topic(boards.signed) and "signature" not in job["envelope"]["body"]
    assert [r.getMessage() for r in caplog.records if "--force" in r.getMessage()] == [
        f"{boards.signed} only run signed jobs (their status says signatures: required) and this deploy is unsigned: "
        "they would refuse the job; sending it anyway (--force)"]


def test_an_unsigned_deploy_to_a_board_that_runs_anything_is_sent(boards, tmp_path):
    outdir = write_outdir(tmp_path / "out")
    [row] = deploy(outdir, broker=boards.address, device=boards.open, unsigned=True, timeout_s=1)
    assert row["state"] == "timeout"
    assert [m["topic"] for m in jobs_sent(boards, settle_s=0)] == [wire.jobs_topic(boards.open)]


def status(device_id, signatures, trusted=TRUSTED):
    return DeviceStatus(device_id, "online", 1, "rpi5", signatures, trusted if signatures == "required" else None)


def test_a_job_signed_with_a_key_the_board_does_not_trust_is_refused_too():
    mine, other = SimpleNamespace(key_id=TRUSTED), SimpleNamespace(key_id="fedcba9876543210")
    targets = [status("pi-1", "required"), status("pi-2", "off"), status("pi-3", None)]
    _check_signatures(targets, mine)  # the key pi-1 trusts; pi-2 and pi-3 check nothing
    with pytest.raises(UserError, match=f"^pi-1 trust key {TRUSTED}, and this deploy signs with key fedcba9876543210: "
                                        "they would refuse the job; sign it with --key FILE"):
        _check_signatures(targets, other)
    _check_signatures(targets, other, force=True)
    many = [status(f"pi-{n:02d}", "required") for n in range(12)]
    with pytest.raises(UserError, match="^pi-00, pi-01, .*, pi-09 and 2 more only run signed jobs"):
        _check_signatures(many, None)
