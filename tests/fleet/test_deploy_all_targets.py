"""`deploy --all` on a broker full of statuses that look like an agent's but that no agent sent.

Without an ACL any client can leave a retained status on edgeopt/v1/<anything>/status, well
formed in every field. A status is then no evidence of a device: `--all` and `--profile` pick
at most --max-devices devices (more is refused, not cut), and with the fleet store (--db) only
devices it holds a result from. Statuses go through a real broker here.
"""
from __future__ import annotations

import hashlib
import uuid

import paho.mqtt.client as mqtt
import pytest

from edgeopt.deploy import deploy
from edgeopt.deploy.mqtt import HostClient
from edgeopt.deploy.targets import DEFAULT_MAX_DEVICES, measured_devices, read_statuses, select_targets
from fleet_simulator import SimulatedDevice
from edgeopt.fleet.store import open_store
from edgeopt_agent.errors import UserError
from edgeopt_agent.wire.broker import broker_settings
from edgeopt_converters.manifest import write as write_manifest

JUNK = 200


def leave_statuses(broker, published):
    """Publish retained messages as a client with no ACL would, and wait until the broker has them all."""
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"junk-{uuid.uuid4().hex[:8]}",
                         protocol=mqtt.MQTTv5)
    client.connect(broker.host, broker.port)
    client.loop_start()
    try:
        infos = [client.publish(p.topic, p.payload, qos=1, retain=True) for p in published]
        for info in infos:
            info.wait_for_publish(timeout=30)
            assert info.is_published()
    finally:
        client.disconnect()
        client.loop_stop()


@pytest.fixture
def crowded_broker(mqtt_broker):
    """A real device's status among 200 well-formed junk statuses of the same profile."""
    junk = [SimulatedDevice(f"junk-{i:03d}", profile="x86-64").status() for i in range(JUNK)]
    leave_statuses(mqtt_broker, junk + [SimulatedDevice("lab-pi", profile="x86-64").status()])
    return mqtt_broker


def statuses_on(broker):
    client = HostClient(broker_settings(f"{broker.host}:{broker.port}"))
    client.connect()
    try:
        return read_statuses(client)
    finally:
        client.close()


@pytest.fixture
def fleet_db(tmp_path):
    """A fleet store holding one result, from lab-pi."""
    url = f"sqlite:///{tmp_path}/fleet.db"
    with open_store(url) as store:
        published = SimulatedDevice("lab-pi", profile="x86-64").result("job-1")
        assert store.ingest(published.topic, published.payload).status == "stored"
    return url


def test_junk_statuses_do_not_make_all_target_every_one_of_them(crowded_broker):
    statuses = statuses_on(crowded_broker)
    assert len(statuses) == JUNK + 1  # every one of them looks like an agent's status
    for how in ({"all_devices": True}, {"profile": "x86-64"}):
        with pytest.raises(UserError) as caught:
            select_targets(statuses, **how)
        message = str(caught.value)
        assert f"picked {JUNK + 1} online devices, more than --max-devices {DEFAULT_MAX_DEVICES}" in message
        assert "--db URL" in message and "\n" not in message


def test_with_the_fleet_store_all_targets_only_devices_it_has_results_from(crowded_broker, fleet_db):
    statuses = statuses_on(crowded_broker)
    assert measured_devices(fleet_db) == {"lab-pi"}
    measured = measured_devices(fleet_db)
    assert [t.device_id for t in select_targets(statuses, all_devices=True, measured=measured)] == ["lab-pi"]
    assert [t.device_id for t in select_targets(statuses, profile="x86-64", measured=measured)] == ["lab-pi"]
    with pytest.raises(UserError, match="no online device that the fleet store has a result from has profile 'rpi5'"):
        select_targets(statuses, profile="rpi5", measured=measured)


def test_a_larger_fleet_says_so(crowded_broker):
    chosen = select_targets(statuses_on(crowded_broker), all_devices=True, max_devices=JUNK + 1)
    assert len(chosen) == JUNK + 1


def test_deploy_refuses_before_sending_anything(crowded_broker, tmp_path):
    """The whole deploy stops at the target list: no job is signed or published to the junk."""
    data = b"an onnx file"
    (tmp_path / "model.onnx").write_bytes(data)
    write_manifest({"schema": "edgeopt.manifest/1", "recommended": "onnx-fp32", "artifacts": [
        {"key": "onnx-fp32", "path": "model.onnx", "format": "onnx", "precision": "fp32",
         "sha256": hashlib.sha256(data).hexdigest(), "size_bytes": len(data)}]}, tmp_path / "manifest.json")
    with pytest.raises(UserError, match="more than --max-devices 100"):
        deploy(tmp_path, broker=f"{crowded_broker.host}:{crowded_broker.port}", all_devices=True, unsigned=True,
               bench={"reference": None}, timeout_s=5)
