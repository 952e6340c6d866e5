"""Each board's own key: what it signs, how the collector pins it (on first sight, or from
provisioning, which wins), what it does with a message signed by another key or with other bytes
under a stored id, and the commands that show and pin keys."""
from __future__ import annotations

import json
import os
import stat

import pytest
from harness import NoSensors

pytest.importorskip("cryptography", reason="device keys need the cryptography package (agent and fleet extras)")

from edgeopt.cli.main import main  # noqa: E402
from edgeopt.errors import UserError  # noqa: E402
from edgeopt.fleet import provision as provisioning  # noqa: E402
from edgeopt.fleet.collector import confirmations  # noqa: E402
from edgeopt.fleet.store import open_store  # noqa: E402
from edgeopt_agent import message_signing, signing, wire  # noqa: E402
from edgeopt_agent.daemon.agent import Agent  # noqa: E402
from edgeopt_agent.daemon.config import build_config  # noqa: E402
from edgeopt_agent.message_signing import DeviceKey, MessageSignatureError, verify_message  # noqa: E402
from fleet_simulator import SimulatedDevice  # noqa: E402

DEVICE = "key-dev"


@pytest.fixture
def store(tmp_path):
    opened = open_store(f"sqlite:///{tmp_path}/fleet.db")
    yield opened
    opened.close()


def ingest(store, published):
    return store.ingest(published.topic, published.payload)


# --- the signature ------------------------------------------------------------------------------------


def test_a_signed_envelope_verifies_and_any_change_breaks_it():
    key = DeviceKey.generate()
    envelope = wire.Envelope(DEVICE, 3, wire.RESULT_TYPE, {"job_id": "j", "ok": True, "latency": float("nan"),
                                                           "shape": (1, 2)})
    document = json.loads(key.encode(envelope))
    assert verify_message(document) == key.public_key
    assert document["body"]["latency"] is None and document["body"]["shape"] == [1, 2]  # as a reader sees it
    assert wire.Envelope.from_dict(document).id == envelope.id  # readers that check nothing ignore `sig`
    for field, value in (("seq", 4), ("device_id", "other"), ("ts", document["ts"] + 1), ("id", "f" * 32),
                         ("body", {**document["body"], "ok": False}), ("type", "telemetry")):
        with pytest.raises(MessageSignatureError) as caught:
            verify_message({**document, field: value})
        assert caught.value.kind == message_signing.SIGNATURE_INVALID, field
    unsigned = {k: v for k, v in document.items() if k != "sig"}
    with pytest.raises(MessageSignatureError) as caught:
        verify_message(unsigned)
    assert caught.value.kind == message_signing.UNSIGNED
    for sig in ({}, {"alg": "rsa", "public_key": document["sig"]["public_key"], "value": document["sig"]["value"]},
                {**document["sig"], "value": "AAAA"}, {**document["sig"], "public_key": 5}, "sig",
                {**document["sig"], "extra": 1}):
        with pytest.raises(MessageSignatureError) as caught:
            verify_message({**document, "sig": sig})
        assert caught.value.kind == message_signing.SIGNATURE_INVALID, sig
    # Someone else's key over the board's message verifies as *that* key: the collector's pin decides.
    other = DeviceKey.generate()
    assert verify_message(other.sign_document(unsigned)) == other.public_key


def test_the_device_statement_has_its_own_domain():
    from edgeopt_agent import confirm_signing

    domains = {message_signing.DOMAIN, signing.DOMAIN, confirm_signing.CONFIRM_DOMAIN,
               confirm_signing.CERTIFICATE_DOMAIN}
    assert len(domains) == 4
    assert message_signing.message_statement({"id": "x", "sig": {"a": 1}}).startswith(message_signing.DOMAIN)


def test_a_key_is_made_once_private_and_refused_when_others_may_read_it(tmp_path):
    path = tmp_path / "data" / "device.key"
    made = DeviceKey.load_or_create(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert signing.parse_public_key_pem(path.with_suffix(".pub").read_text()) == made.public_key
    again = DeviceKey.load_or_create(path)
    assert again.public_key == made.public_key and again.fingerprint == made.fingerprint
    os.chmod(path, 0o644)
    with pytest.raises(UserError, match="chmod 600"):
        DeviceKey.load(path)
    os.chmod(path, 0o600)
    link = tmp_path / "link.key"
    link.symlink_to(path)
    with pytest.raises(UserError, match="not a regular file"):
        DeviceKey.load(link)
    junk = tmp_path / "junk.key"
    junk.write_bytes(b"not a key")
    os.chmod(junk, 0o600)
    with pytest.raises(UserError, match="not an unencrypted PEM private key"):
        DeviceKey.load(junk)


def test_the_agent_signs_its_status_and_queue_with_its_own_key_and_says_which(tmp_path):
    agent = Agent(build_config({"device_id": DEVICE, "data_dir": str(tmp_path / "data")}), sensors=NoSensors())
    try:
        key_file = tmp_path / "data" / "device.key"
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        status = json.loads(agent._status(wire.ONLINE, "connected", 1).payload)
        assert verify_message(status) == agent.device_key.public_key
        assert status["body"]["device_key_id"] == agent.device_key.fingerprint
        agent.send_telemetry()
        agent.outbox.add(wire.RESULTS, wire.RESULT_TYPE, {"job_id": "j"})
        for message in agent.outbox.pending():
            assert verify_message(json.loads(message.payload)) == agent.device_key.public_key
        assert json.loads(agent.outbox.pending()[0].payload)["body"]["agent"]["device_key_id"] \
            == agent.device_key.fingerprint
    finally:
        agent.store.close()
        agent._lock.close()
    # A key named in the config (as `fleet provision` writes it) is used instead, and must exist.
    provisioned = DeviceKey.load_or_create(tmp_path / "etc" / "device.key")
    config = build_config({"device_id": DEVICE, "data_dir": str(tmp_path / "data2"),
                           "device_key": str(tmp_path / "etc" / "device.key")})
    agent = Agent(config, sensors=NoSensors())
    try:
        assert agent.device_key.public_key == provisioned.public_key
        assert not (tmp_path / "data2" / "device.key").exists()
    finally:
        agent.store.close()
        agent._lock.close()
    with pytest.raises(UserError, match="device_key: no such file"):
        build_config({"device_id": DEVICE, "device_key": str(tmp_path / "missing.key")})


# --- pinning, in the store -----------------------------------------------------------------------------


def test_the_first_key_seen_is_pinned_and_another_is_refused_and_flagged(store):
    board = SimulatedDevice(DEVICE)
    assert ingest(store, board.status()).status == "stored"
    impostor = SimulatedDevice(DEVICE)  # same name, another key
    forged = impostor.result("forged")
    outcome = ingest(store, forged)
    assert (outcome.status, outcome.reason) == ("rejected", "key_changed")
    assert confirmations([outcome]) == {}  # never confirmed: the board would forget its own bytes
    assert ingest(store, board.result("real")).status == "stored"
    [row] = store.devices()
    assert row["key"] == board.key.fingerprint and row["key_source"] == "first_seen"
    assert row["key_changed"]["fingerprint"] == impostor.key.fingerprint and row["key_changed"]["messages"] == 1
    assert [r["job_id"] for r in store.results(latest=False)] == ["real"]
    [rejected] = store.rejected()
    assert rejected["reason"] == "key_changed" and "pin-key" in rejected["detail"]

    # The board was reinstalled and really has a new key: an operator accepts it, and it is heard again.
    assert store.accept_changed_key(DEVICE) == impostor.key.public_key
    assert ingest(store, forged).status == "stored"
    assert ingest(store, board.result("old key")).reason == "key_changed"
    row = store.devices()[0]
    assert (row["key"], row["key_source"]) == (impostor.key.fingerprint, "accepted")


def test_a_provisioned_key_wins_over_the_first_key_seen(store):
    attacker = SimulatedDevice(DEVICE)  # publishes first under the board's name, on an open broker
    assert ingest(store, attacker.status()).status == "stored"
    board = SimulatedDevice(DEVICE)
    before = store.pin_device_key(DEVICE, board.key.public_key)  # `edgeopt fleet provision --db` / `pin-key`
    assert before["source"] == "first_seen" and before["fingerprint"] == attacker.key.fingerprint
    assert ingest(store, board.result("real")).status == "stored"
    assert ingest(store, attacker.result("forged")).reason == "key_changed"
    row = store.devices()[0]
    assert (row["key"], row["key_source"]) == (board.key.fingerprint, "provisioned")
    # A provisioned key is never replaced by what arrives: only by pinning another.
    assert ingest(store, attacker.status()).reason == "key_changed"
    with pytest.raises(UserError, match="nothing to accept"):
        store.accept_changed_key("never-seen")


def test_other_bytes_under_a_stored_id_are_a_conflict_and_the_first_stays(store):
    board = SimulatedDevice(DEVICE)
    first = board.result("first", p50_ms=5.0)
    assert ingest(store, first).status == "stored"
    data = json.loads(first.payload)
    data["body"]["result"]["latency_ms"]["p50"] = 50.0
    other = first.changed(data)  # signed by the board's own key (stolen, or a bug): still not stored over it
    outcome = store.ingest(first.topic, other)
    assert (outcome.status, outcome.reason) == ("rejected", "conflict")
    assert store.ingest(first.topic, first.payload).status == "duplicate"  # the very bytes: a duplicate
    assert [r["p50_ms"] for r in store.results(latest=False)] == [5.0]
    [rejected] = store.rejected()
    assert rejected["reason"] == "conflict" and rejected["message_id"] == first.envelope.id
    # The confirm names the bytes it is about: the board forgets only when they are its own.
    assert confirmations([outcome]) == {DEVICE: ([], [(first.envelope.id, wire.message_digest(other), "conflict")])}


def test_unsigned_messages_are_never_stored_and_never_confirmed(store):
    old_agent = SimulatedDevice(DEVICE, signed=False)
    outcome = ingest(store, old_agent.result("unsigned"))
    assert (outcome.status, outcome.reason) == ("rejected", "unsigned_message")
    assert confirmations([outcome]) == {} and store.devices() == []  # nothing pinned either


# --- the commands ----------------------------------------------------------------------------------------


def test_fleet_devices_shows_each_key_and_flags_a_changed_one(tmp_path, capsys, monkeypatch):
    url = f"sqlite:///{tmp_path}/fleet.db"
    board, calm = SimulatedDevice(DEVICE), SimulatedDevice("calm-dev")
    with open_store(url) as store:
        ingest(store, board.status())
        ingest(store, calm.status())
        ingest(store, SimulatedDevice(DEVICE).telemetry())
    capsys.readouterr()
    assert main(["fleet", "devices", "--db", url, "--json"]) == 0
    rows = {r["device_id"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows[DEVICE]["key"] == board.key.fingerprint and rows[DEVICE]["key_changed"]["messages"] == 1
    assert rows["calm-dev"]["key_changed"] is None
    monkeypatch.setenv("COLUMNS", "250")
    assert main(["fleet", "devices", "--db", url]) == 0
    out = capsys.readouterr().out
    assert "KEY CHANGED" in out and calm.key.fingerprint in out and board.key.fingerprint in out
    monkeypatch.setenv("COLUMNS", "80")  # the key column goes first on a narrow terminal; the flag stays
    assert main(["fleet", "devices", "--db", url]) == 0
    narrow = capsys.readouterr().out
    assert "KEY" in narrow and "CHANGED" in narrow  # the cell may wrap between the words


def test_pin_key_takes_a_public_key_file_or_accepts_the_changed_one(tmp_path, capsys):
    url = f"sqlite:///{tmp_path}/fleet.db"
    board = SimulatedDevice(DEVICE)
    public = tmp_path / "device.pub"
    public.write_bytes(board.key.public_pem())
    assert main(["fleet", "pin-key", DEVICE, "--key", str(public), "--db", url]) == 0
    assert board.key.fingerprint in capsys.readouterr().out
    reinstalled = SimulatedDevice(DEVICE)
    with open_store(url) as store:
        assert ingest(store, reinstalled.status()).reason == "key_changed"
    assert main(["fleet", "pin-key", DEVICE, "--accept-changed", "--db", url]) == 0
    with open_store(url) as store:
        assert ingest(store, reinstalled.status()).status == "stored"
        assert store.devices()[0]["key"] == reinstalled.key.fingerprint
    assert main(["fleet", "pin-key", DEVICE, "--db", url]) == 2
    assert "say which key" in capsys.readouterr().err


def test_provision_makes_the_device_key_names_it_in_agent_toml_and_pins_it(tmp_path, capsys):
    url = f"sqlite:///{tmp_path}/fleet.db"
    out = tmp_path / "creds"
    assert main(["fleet", "provision", DEVICE, "--cert", "--out", str(out), "--keys-dir", str(tmp_path / "keys"),
                 "--db", url]) == 0
    printed = capsys.readouterr().out
    key_file = out / provisioning.DEVICE_KEY_NAME
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert 'device_key = "device.key"' in (out / "agent.toml").read_text()
    key = DeviceKey.load(key_file)
    assert key.fingerprint in printed and "pinned" in printed
    config = build_config({}, out / "agent.toml")
    assert config.device_key == key_file.resolve()
    with open_store(url) as store:
        [row] = store.devices()
        assert (row["device_id"], row["key"], row["key_source"]) == (DEVICE, key.fingerprint, "provisioned")
    # Without --db the key is made all the same, and the command says how to pin it.
    assert main(["fleet", "provision", "other-dev", "--cert", "--out", str(tmp_path / "other"),
                 "--keys-dir", str(tmp_path / "keys")]) == 0
    assert "edgeopt fleet pin-key other-dev --key" in capsys.readouterr().out
    # An existing device key is replaced only with --force.
    assert main(["fleet", "provision", DEVICE, "--cert", "--out", str(out), "--keys-dir", str(tmp_path / "keys")]) == 2
    assert "already has credentials" in capsys.readouterr().err
