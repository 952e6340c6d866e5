"""Each role does only its own job on the broker, and the collector files each message under the
device that sent it: a real Mosquitto with the shipped ACL template (scripts/mosquitto.acl) and
the `user` blocks `edgeopt fleet provision` appends, plus the provisioning's own file handling.

One test per hole an audit found:
- a device login joining the collectors' shared subscription ($share/GROUP/...) took a share of
  the status messages, which the broker then dropped (the ACL refuses the delivery, and Mosquitto
  does not hand the message to another member);
- the same message id sent first on another device's topic made the real result a "duplicate";
- collector and deploy logins could publish results, stored as pseudo-devices;
- provisioning wrote through planted symlinks, left a 0777 folder open, and wrote a password file
  that a broker dropping root to the `mosquitto` user cannot read.
"""
from __future__ import annotations

import base64
import dataclasses
import glob
import hashlib
import json
import os
import shutil
import stat
import subprocess
import tempfile
import time
import types
import uuid
from pathlib import Path

import pytest
from harness import wait_until
from mqtt_broker import MqttBroker, free_port, mosquitto_binary
from test_fleet_identity import ACL_TEMPLATE, NOT_AUTHORIZED, Client, Fleet, needs_mosquitto, started_collector

from edgeopt.errors import UserError
from edgeopt.fleet import provision as provisioning
from edgeopt.fleet.collector import confirmations
from edgeopt.fleet.migrations import MIGRATIONS, latest_version
from fleet_simulator import SimulatedDevice
from edgeopt.fleet.store import open_store
from edgeopt_agent import wire

STATUS_COUNT = 12
GRANTED_QOS1 = 1
ACCEPTED = (0x00, 0x10)  # success, or "no matching subscribers" (accepted, nobody listening)


@pytest.fixture
def secured(tmp_path):
    fleet = Fleet(tmp_path)
    broker = fleet.broker()
    try:
        yield fleet, broker
    finally:
        broker.stop()


def publish_statuses(client: Client, device: SimulatedDevice, count: int = STATUS_COUNT) -> None:
    for _ in range(count):
        message = device.status()
        assert client.publish(message.topic, message.payload) == 0


# --- shared subscriptions -------------------------------------------------------------------------


@needs_mosquitto
@pytest.mark.slow
def test_a_device_cannot_take_a_share_of_a_collector_group_it_does_not_know(secured, tmp_path):
    """With Mosquitto's acl_file the SUBSCRIBE cannot be refused (next test), so a collector group
    is safe only under a name the devices do not know: every guess and every plain subscription
    of a device leaves the collector all of the messages."""
    fleet, broker = secured
    group = f"fleet-{uuid.uuid4().hex[:12]}"
    store = open_store(f"sqlite:///{tmp_path}/fleet.db")
    collector = started_collector(store, fleet.settings(broker, "collector-1"), client_id="collector-1",
                                  shared_group=group)
    thief = fleet.login(broker, "dev-a")
    sender = fleet.login(broker, "dev-b")
    try:
        for guess in ("fleet", "collectors", "edgeopt", "g1"):
            assert thief.subscribe(wire.shared_subscription(guess, wire.STATUS)) == [GRANTED_QOS1]
        for plain in (wire.subscription(wire.STATUS), "#", f"$share/{group}/#"):
            thief.subscribe(plain)
        publish_statuses(sender, SimulatedDevice("dev-b"))
        wait_until(lambda: store.stats()["stored"].get("status") == STATUS_COUNT, "every status stored")
        assert thief.received(0.5) == []
    finally:
        collector.close()
        thief.close()
        sender.close()
    assert store.stats()["stored"] == {"status": STATUS_COUNT} and collector.counters.rejected == 0
    store.close()


@needs_mosquitto
@pytest.mark.slow
def test_with_the_acl_file_a_device_that_knows_the_group_still_joins_it(secured):
    """Pinned limitation, documented in docs/FLEET.md and scripts/mosquitto.acl: Mosquitto 2.0's
    acl_file grants every SUBSCRIBE ($share ones included; `deny` lines and patterns change
    nothing) and checks `read` only on delivery, where the device's share is dropped. If this
    starts failing, the broker began refusing the SUBSCRIBE: update those docs."""
    fleet, broker = secured
    collector = fleet.login(broker, "collector-1")
    thief = fleet.login(broker, "dev-a")
    sender = fleet.login(broker, "dev-b")
    try:
        assert collector.subscribe("$share/fleet/edgeopt/v1/+/status") == [GRANTED_QOS1]
        assert thief.subscribe("$share/fleet/edgeopt/v1/+/status") == [GRANTED_QOS1]
        publish_statuses(sender, SimulatedDevice("dev-b"))
        got = collector.received(1.5)
        assert thief.received(0.2) == []
    finally:
        collector.close()
        thief.close()
        sender.close()
    assert 0 < len(got) < STATUS_COUNT  # the device's share was dropped, not delivered elsewhere


def dynsec_plugin():
    for pattern in ("/usr/lib/*/mosquitto_dynamic_security.so", "/usr/lib/mosquitto_dynamic_security.so",
                    "/usr/local/lib/mosquitto_dynamic_security.so", "/usr/lib/*/mosquitto/mosquitto_dynamic_security.so"):
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return None


def dynsec_client(name: str, password: str, role: str) -> dict:
    """A client entry as Mosquitto's dynamic-security plugin stores it (PBKDF2-SHA512, 101 rounds)."""
    salt = os.urandom(12)
    digest = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, 101, 64)
    return {"username": name, "roles": [{"rolename": role}], "password": base64.b64encode(digest).decode(),
            "salt": base64.b64encode(salt).decode(), "iterations": 101}


def acl(acltype: str, topic: str) -> dict:
    return {"acltype": acltype, "topic": topic, "priority": 0, "allow": True}


@needs_mosquitto
@pytest.mark.slow
@pytest.mark.skipif(dynsec_plugin() is None, reason="Mosquitto's dynamic-security plugin is not installed")
def test_the_dynamic_security_plugin_refuses_a_devices_share_subscription(tmp_path):
    """What docs/FLEET.md recommends where the SUBSCRIBE itself must be refused: the plugin checks
    the whole `$share/GROUP/filter`, so only the collector's role may join the group. Measured with
    2.0.11, its ACL topics take no %u, hence one role per device."""
    password = "pw-" + uuid.uuid4().hex
    roles = [{"rolename": "collector", "acls": [
        acl("subscribePattern", "$share/+/edgeopt/v1/+/status"), acl("subscribePattern", "edgeopt/v1/+/status"),
        acl("publishClientReceive", "edgeopt/v1/+/status"), acl("publishClientSend", "edgeopt/v1/+/confirm")]}]
    clients = [dynsec_client("collector-1", password, "collector")]
    for device in ("dev-a", "dev-b"):
        roles.append({"rolename": f"device-{device}", "acls": [
            *(acl("publishClientSend", f"edgeopt/v1/{device}/{kind}") for kind in ("status", "telemetry", "results",
                                                                                 "transfer")),
            *(acl(kind, f"edgeopt/v1/{device}/{topic}") for topic in ("jobs", "chunks", "confirm")
              for kind in ("subscribeLiteral", "publishClientReceive"))]})
        clients.append(dynsec_client(device, password, f"device-{device}"))
    config = tmp_path / "dynsec.json"
    config.write_text(json.dumps({"defaultACLAccess": {"publishClientSend": False, "publishClientReceive": False,
                                                       "subscribe": False, "unsubscribe": True},
                                  "clients": clients, "groups": [], "roles": roles}))
    broker = MqttBroker(tmp_path / "broker", kind="mosquitto", listener_settings=[
        "allow_anonymous false", f"plugin {dynsec_plugin()}", f"plugin_opt_config_file {config}",
        "use_username_as_clientid true"])
    broker.start()
    collector = thief = sender = None
    try:
        collector = Client(broker, "collector-1", password)
        thief = Client(broker, "dev-a", password)
        sender = Client(broker, "dev-b", password)
        assert collector.subscribe("$share/fleet/edgeopt/v1/+/status") == [GRANTED_QOS1]
        for refused in ("$share/fleet/edgeopt/v1/+/status", "$share/fleet/edgeopt/v1/dev-a/status",
                        "edgeopt/v1/+/status", "edgeopt/v1/dev-b/jobs", "#"):
            assert thief.subscribe(refused) == [NOT_AUTHORIZED], refused
        assert thief.subscribe(wire.jobs_topic("dev-a")) == [GRANTED_QOS1]
        publish_statuses(sender, SimulatedDevice("dev-b"))
        assert len(collector.received(1.5)) == STATUS_COUNT
        forged = SimulatedDevice("dev-a").result("forged")
        assert sender.publish(forged.topic, forged.payload) == NOT_AUTHORIZED
    finally:
        for client in (collector, thief, sender):
            if client is not None:
                client.close()
        broker.stop()


# --- what each role may publish --------------------------------------------------------------------


@needs_mosquitto
@pytest.mark.slow
def test_collector_and_deploy_logins_cannot_publish_device_messages(secured, tmp_path):
    fleet, broker = secured
    logins = {name: fleet.login(broker, name) for name in ("collector-1", "deploy-1")}
    try:
        for name, client in logins.items():
            posing = SimulatedDevice(name)  # under its own name, where the ACL's patterns used to let it
            for message in (posing.result("pseudo"), posing.status(), posing.telemetry(),
                            posing.envelope(wire.TRANSFER, wire.TRANSFER_TYPE, {"job_id": "x"})):
                assert client.publish(message.topic, message.payload) == NOT_AUTHORIZED, (name, message.topic)
            as_device = SimulatedDevice("dev-a").result("as-dev-a")
            assert client.publish(as_device.topic, as_device.payload) == NOT_AUTHORIZED, name
            assert client.subscribe(wire.jobs_topic(name)) == [GRANTED_QOS1]  # granted, but nothing arrives
        # Each still does its own job.
        confirm = wire.confirm_message("dev-a", 1, committed=[(wire.new_message_id(), "0" * 64)]).encode()
        assert logins["collector-1"].publish(wire.confirm_topic("dev-a"), confirm) in ACCEPTED
        job = wire.Envelope("dev-a", 1, wire.BENCHMARK_JOB, {"job_id": "j"}).encode()
        assert logins["deploy-1"].publish(wire.jobs_topic("dev-a"), job) in ACCEPTED
    finally:
        for client in logins.values():
            client.close()
    # A collector started now (as collector-1: one connection per login) finds no retained status
    # of a pseudo-device, and stores the real device's result.
    store = open_store(f"sqlite:///{tmp_path}/fleet.db")
    collector = started_collector(store, fleet.settings(broker, "collector-1"), client_id="collector-1")
    device = fleet.login(broker, "dev-a")
    try:
        real = SimulatedDevice("dev-a").result("real")
        assert device.publish(real.topic, real.payload) == 0
        wait_until(lambda: store.results(), "the device's own result")
    finally:
        device.close()
        collector.close()
    assert [d["device_id"] for d in store.devices()] == ["dev-a"]
    assert store.stats()["stored"] == {"results": 1}
    store.close()


def test_the_acl_template_shows_the_blocks_provision_writes():
    text = ACL_TEMPLATE.read_text()
    for role, name in (("collector", "collector-a"), ("deploy", "deploy-ci")):
        block = "\n".join(f"#   {line.format(name=name)}" for line in (f"user {name}", *provisioning.ROLE_ACL[role]))
        assert block in text, role
        assert provisioning.ROLE_ACL[role][-1] == "topic deny edgeopt/v1/{name}/#"


# --- duplicates are per device ----------------------------------------------------------------------


def with_id(published, message_id: str, device_id: str = None):
    """The message under another id, signed by its own device (which chose that id)."""
    envelope = dataclasses.replace(published.envelope, id=message_id, device_id=device_id or published.envelope.device_id)
    return published.topic, published.key.encode(envelope)


@needs_mosquitto
@pytest.mark.slow
def test_the_same_id_on_another_devices_topic_does_not_shadow_the_real_result(secured, tmp_path):
    fleet, broker = secured
    store = open_store(f"sqlite:///{tmp_path}/fleet.db")
    collector = started_collector(store, fleet.settings(broker, "collector-1"), client_id="collector-1")
    device_a, device_b = fleet.login(broker, "dev-a"), fleet.login(broker, "dev-b")
    real = SimulatedDevice("dev-b").result("real-b")
    try:
        # A knows (or guesses) the id of B's next result and sends it first, on its own topic.
        assert device_a.publish(*with_id(SimulatedDevice("dev-a").result("decoy-a"), real.envelope.id)) == 0
        wait_until(lambda: store.results(device="dev-a"), "A's decoy")
        assert device_b.publish(real.topic, real.payload) == 0
        wait_until(lambda: store.results(device="dev-b"), "B's real result")
    finally:
        collector.close()
        device_a.close()
        device_b.close()
    assert sorted((r["device_id"], r["job_id"], r["id"]) for r in store.results(latest=False)) == [
        ("dev-a", "decoy-a", real.envelope.id), ("dev-b", "real-b", real.envelope.id)]
    assert collector.counters.duplicate == 0 and store.stats()["duplicate"] == {}
    store.close()


def test_duplicates_are_per_device_and_the_migration_keeps_what_was_stored(db_url):  # SQLite and PostgreSQL (conftest)
    """A database made before migration 5 (messages keyed by id alone) keeps its rows, and from
    then on the same id counts as a duplicate only from the same device."""
    old = SimulatedDevice("dev-a").result("before")
    with open_store(db_url, migrations=MIGRATIONS[:4]) as store:
        with store.db.transaction() as tx:
            key = (old.envelope.id, "dev-a")
            tx.execute("INSERT INTO messages (id, device_id, kind, seq, ts, received_at) VALUES (?, ?, ?, ?, ?, ?)",
                       (*key, wire.RESULTS, 1, old.envelope.ts, time.time()))
            tx.execute("INSERT INTO results (id, device_id, seq, ts, job_id, ok, body) VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (*key, 1, old.envelope.ts, "before", 1, json.dumps(old.envelope.body)))
    with open_store(db_url) as store:
        with store.db.transaction() as tx:
            assert [r["version"] for r in tx.rows("SELECT version FROM schema_version ORDER BY version")][-1] \
                == latest_version()
        assert [(r["device_id"], r["job_id"]) for r in store.results()] == [("dev-a", "before")]
        assert store.ingest(old.topic, old.payload).status == "duplicate"  # same device, same id
        other = SimulatedDevice("dev-b")
        shadow = with_id(other.result("same-id-other-device"), old.envelope.id)
        assert store.ingest(*shadow).status == "stored"
        a = SimulatedDevice("dev-a", key=old.key)
        for mine, theirs in ((a.status(), other.status()), (a.telemetry(), other.telemetry())):  # every kind
            assert store.ingest(*with_id(mine, theirs.envelope.id)).status == "stored"
            assert store.ingest(theirs.topic, theirs.payload).status == "stored"
        assert store.ingest(*shadow).status == "duplicate"
        assert sorted((r["device_id"], r["job_id"]) for r in store.results(latest=False)) == [
            ("dev-a", "before"), ("dev-b", "same-id-other-device")]
        assert store.stats()["duplicate"] == {"results": 2}


def test_messages_not_on_their_devices_topic_are_rejected_and_only_the_sender_hears_of_it(tmp_path):
    """What the collector checked already, pinned beside the broker rules: an envelope naming
    another device (`wrong_device`) or a topic that is not a device's is never stored, is counted
    by reason, and a rejection is confirmed only to the device whose topic carried it."""
    with open_store(f"sqlite:///{tmp_path}/fleet.db") as store:
        b = SimulatedDevice("dev-b")
        posing = [b.result("posing"), b.status(), b.telemetry()]
        outcomes = [store.ingest(m.topic.replace("/dev-b/", "/dev-a/"), m.payload) for m in posing]
        outcomes += [store.ingest("edgeopt/collectors/collector-1/status", b.status().payload),
                     store.ingest("edgeopt/v1/dev-b/results/extra", b.result("deep").payload)]
        assert [o.reason for o in outcomes] == ["wrong_device"] * 3 + ["invalid_topic"] * 2
        assert [o.device_id for o in outcomes] == ["dev-a"] * 3 + [None, None]
        assert store.results() == [] and store.devices() == []
        assert store.stats()["rejected"] == {"wrong_device": 3, "invalid_topic": 2}
        # Rejections go to dev-a's confirm topic only (its login published them): none to dev-b.
        assert confirmations(outcomes) == {"dev-a": ([], [(m.envelope.id, wire.message_digest(m.payload), "wrong_device")
                                                          for m in posing])}


# --- provisioning's files -----------------------------------------------------------------------------

needs_passwd = pytest.mark.skipif(
    shutil.which("mosquitto_passwd") is None and not Path(provisioning.MOSQUITTO_PASSWD_FALLBACK).exists(),
    reason="needs mosquitto_passwd (apt install mosquitto)")
needs_root = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                                reason="giving files to another user (chown) needs root")


@pytest.fixture
def no_broker_account(monkeypatch):
    monkeypatch.setattr(provisioning, "broker_account", lambda user=provisioning.BROKER_USER: None)


@pytest.mark.usefixtures("no_broker_account")
@pytest.mark.parametrize("planted", ["folder", "password", "key", "config"])
def test_provision_refuses_a_planted_symlink_and_writes_nothing_through_it(tmp_path, planted):
    target = tmp_path / "victim"
    target.mkdir() if planted == "folder" else target.write_text("precious\n")
    out = tmp_path / "out"
    if planted == "folder":
        out.symlink_to(target, target_is_directory=True)
    else:
        out.mkdir(mode=0o700)
        name = {"password": "password", "key": "dev-a.key", "config": "agent.toml"}[planted]
        (out / name).symlink_to(target)
    kwargs = {"cert": True, "keys_dir": tmp_path / "keys"}
    if planted == "password":
        if shutil.which("mosquitto_passwd") is None and not Path(provisioning.MOSQUITTO_PASSWD_FALLBACK).exists():
            pytest.skip("needs mosquitto_passwd (apt install mosquitto)")
        kwargs = {"password_file": tmp_path / "edgeopt.passwd"}
    with pytest.raises(UserError, match="is a symbolic link"):
        provisioning.provision("dev-a", out_dir=out, force=True, **kwargs)
    # Refused before anything was written: no CA made, no password added to the broker's file.
    assert not (tmp_path / "keys").exists() and not (tmp_path / "edgeopt.passwd").exists()
    if planted == "folder":
        assert list(target.iterdir()) == []
    else:
        assert target.read_text() == "precious\n"


@needs_passwd
@pytest.mark.usefixtures("no_broker_account")
@pytest.mark.parametrize("which", ["password_file", "acl_file"])
def test_provision_refuses_a_symlinked_broker_password_or_acl_file(tmp_path, which):
    target = tmp_path / "elsewhere"
    target.write_text("# not the broker's\n")
    link = tmp_path / "edgeopt.link"
    link.symlink_to(target)
    files = {"password_file": tmp_path / "edgeopt.passwd", "acl_file": tmp_path / "edgeopt.acl", which: link}
    with pytest.raises(UserError, match="is a symbolic link"):
        provisioning.provision("collector-1", role="collector", out_dir=tmp_path / "out", **files)
    assert target.read_text() == "# not the broker's\n"
    assert not (tmp_path / "out").exists() and not (tmp_path / "edgeopt.passwd").exists()


@pytest.mark.usefixtures("no_broker_account")
def test_provision_makes_an_open_folder_private_and_refuses_one_it_does_not_own(tmp_path, capsys):
    from edgeopt.cli.main import main

    out = tmp_path / "open"
    out.mkdir()
    os.chmod(out, 0o777)
    assert main(["fleet", "provision", "dev-a", "--cert", "--out", str(out), "--keys-dir", str(tmp_path / "keys")]) == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    assert "was open to other users (mode 0777); now 0700" in capsys.readouterr().out
    made = provisioning.provision("dev-b", cert=True, out_dir=tmp_path / "new" / "dev-b", keys_dir=tmp_path / "keys")
    assert stat.S_IMODE(made.folder.stat().st_mode) == 0o700 and made.notes == []
    assert stat.S_IMODE(made.key.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "keys").stat().st_mode) == 0o700
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        foreign = tmp_path / "foreign"
        foreign.mkdir(mode=0o700)
        os.chown(foreign, 54321, 54321)
        with pytest.raises(UserError, match=r"belongs to another user \(uid 54321\)"):
            provisioning.provision("dev-c", cert=True, out_dir=foreign, keys_dir=tmp_path / "keys")


def test_broker_account_is_the_mosquitto_user_only_when_running_as_root(monkeypatch):
    assert provisioning.broker_account("no-such-user-" + uuid.uuid4().hex[:8]) is None
    if hasattr(os, "geteuid"):
        monkeypatch.setattr(os, "geteuid", lambda: 1000)
        assert provisioning.broker_account("root") is None
        monkeypatch.setattr(os, "geteuid", lambda: 0)
        assert provisioning.broker_account("root") == provisioning.BrokerAccount("root", 0, 0)


@needs_passwd
@needs_root
def test_as_root_the_files_the_broker_reads_are_given_to_its_user(tmp_path, monkeypatch):
    fake = provisioning.BrokerAccount("mosquitto", 4321, 4322)  # no such user needed: chown takes numbers
    monkeypatch.setattr(provisioning, "broker_account", lambda user=provisioning.BROKER_USER: fake)
    passwd, acl_file = tmp_path / "edgeopt.passwd", tmp_path / "edgeopt.acl"
    shutil.copyfile(ACL_TEMPLATE, acl_file)
    os.chmod(acl_file, 0o600)
    os.chown(acl_file, 4321, 4322)  # given to the broker's user by an earlier version: taken back to root
    device = provisioning.provision("dev-a", password_file=passwd, out_dir=tmp_path / "dev-a")
    collector = provisioning.provision("collector-1", role="collector", password_file=passwd, acl_file=acl_file,
                                       out_dir=tmp_path / "collector-1")
    server = provisioning.provision("localhost", role="broker", out_dir=tmp_path / "certs", keys_dir=tmp_path / "keys")
    # Owner root, group mosquitto: the broker reads its password file and ACL but cannot rewrite them.
    for path in (passwd, acl_file):
        info = path.stat()
        assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (0, 4322, 0o640), path
    for path, mode in ((server.folder, 0o750), (server.key, 0o640)):
        info = path.stat()
        assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (0, 4322, mode), path
    # What goes to a board or a collector's host stays the caller's and private.
    for path in (device.folder, device.password_path, collector.password_path):
        info = path.stat()
        assert info.st_uid == 0 and stat.S_IMODE(info.st_mode) & 0o077 == 0, path
    assert any("group mosquitto, mode 0640" in note for note in collector.notes)
    assert any(note.startswith(f"{acl_file}: owner root, group mosquitto") for note in collector.notes)


def _precious_file(tmp_path):
    """A file of someone else's that provisioning must never hand to the broker: (path, its stat)."""
    precious = tmp_path / "precious"
    precious.write_text("not the broker's\n")
    os.chmod(precious, 0o600)
    return precious, precious.stat()


def _assert_untouched(precious, before):
    after = precious.stat()
    assert (after.st_uid, after.st_gid, stat.S_IMODE(after.st_mode)) == (before.st_uid, before.st_gid, 0o600)
    assert precious.read_text() == "not the broker's\n"


@pytest.mark.parametrize("swapped", ["symlink", "other_file", "hard_link"])
def test_giving_a_file_to_the_broker_never_follows_what_was_swapped_in_after_the_check(tmp_path, monkeypatch,
                                                                                      swapped):
    """The ownership change goes through a descriptor opened without following a link, and only to
    the very file checked before: a link, or another file, put there after the check is refused."""
    fake = provisioning.BrokerAccount("mosquitto", 4321, 4322)
    precious, before = _precious_file(tmp_path)
    acl_file = tmp_path / "edgeopt.acl"
    acl_file.write_text("user collector-1\n")
    real_lstat = provisioning._lstat

    def check_then_swap(path):
        info = real_lstat(path)  # the check passes on the real file...
        if Path(path) == acl_file:  # ...then something is put in its place (kept: no inode reused)
            acl_file.rename(tmp_path / "moved-away")
            if swapped == "symlink":
                acl_file.symlink_to(precious)
            elif swapped == "other_file":
                acl_file.write_text("user collector-1\n")
            else:
                os.link(precious, acl_file)
        return info

    monkeypatch.setattr(provisioning, "_lstat", check_then_swap)
    notes = []
    with pytest.raises(UserError, match="not followed|was replaced"):
        provisioning._give_to_broker(acl_file, fake, notes)
    _assert_untouched(precious, before)
    assert precious.read_text() == "not the broker's\n" and notes == []


def test_giving_a_hard_linked_file_to_the_broker_is_refused(tmp_path):
    fake = provisioning.BrokerAccount("mosquitto", 4321, 4322)
    precious, before = _precious_file(tmp_path)
    acl_file = tmp_path / "edgeopt.acl"
    os.link(precious, acl_file)  # planted before provisioning ran
    with pytest.raises(UserError, match="hard links"):
        provisioning._give_to_broker(acl_file, fake, [])
    _assert_untouched(precious, before)


@needs_mosquitto
@needs_root
@pytest.mark.slow
@pytest.mark.skipif(provisioning.broker_account() is None, reason="needs a 'mosquitto' user (the broker's packages make it)")
def test_a_broker_that_drops_root_reads_what_provision_wrote():
    """The fleet as docs/FLEET.md sets it up as root: Mosquitto started as root drops to
    `mosquitto` before reading the password file and ACL (2.0.11 refused to start on a root-owned
    0600 password file). The folder must be one the `mosquitto` user can enter."""
    work = Path(tempfile.mkdtemp(prefix="edgeopt-broker-"))
    try:
        os.chmod(work, 0o755)
        passwd, acl_file = work / "edgeopt.passwd", work / "edgeopt.acl"
        shutil.copyfile(ACL_TEMPLATE, acl_file)
        os.chmod(acl_file, 0o600)
        provisioning.provision("dev-a", password_file=passwd, out_dir=work / "credentials" / "dev-a")
        provisioning.provision("collector-1", role="collector", password_file=passwd, acl_file=acl_file,
                               out_dir=work / "credentials" / "collector-1")
        password = (work / "credentials" / "dev-a" / "password").read_text().strip()
        port = free_port()
        config = work / "mosquitto.conf"
        config.write_text("\n".join([f"listener {port} 127.0.0.1", "allow_anonymous false",
                                     f"password_file {passwd}", f"acl_file {acl_file}", "persistence false",
                                     "log_dest stderr", ""]))
        process = subprocess.Popen([mosquitto_binary(), "-c", str(config)], stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT)
        try:
            broker = types.SimpleNamespace(host="127.0.0.1", port=port)
            deadline = time.monotonic() + 10
            client = None
            while client is None:
                assert process.poll() is None, process.stdout.read().decode(errors="replace")
                try:
                    client = Client(broker, "dev-a", password)
                except (ConnectionRefusedError, OSError):
                    assert time.monotonic() < deadline, "the broker did not listen"
                    time.sleep(0.1)
            assert client.connack == 0
            message = SimulatedDevice("dev-a").status()
            assert client.publish(message.topic, message.payload) in ACCEPTED
            forged = SimulatedDevice("dev-b").status()
            assert client.publish(forged.topic, forged.payload) == NOT_AUTHORIZED  # the ACL was read too
            client.close()
        finally:
            process.terminate()
            process.wait(10)
    finally:
        shutil.rmtree(work)
