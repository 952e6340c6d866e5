"""Artifact signing: `edgeopt keys init`, the host's signatures, and the agent's check of them agree."""
import json
import stat

import pytest

from edgeopt.cli.main import main
from edgeopt.deploy.keys import SigningKey, init_keys
from edgeopt.errors import UserError
from edgeopt_agent import protocol, signing

serialization = pytest.importorskip("cryptography.hazmat.primitives.serialization",
                                    reason="signing needs the cryptography package")

SHA = "ab" * 32
META = {"model": "m.py:net", "model_sha256": "cd" * 32, "artifact_key": "onnx-int8", "format": "onnx",
        "precision": "int8", "accuracy_drop_points": 0.4, "manifest_sha256": "ef" * 32}


def job_with(signature, sha=SHA, size=1234, meta=META):
    envelope = protocol.benchmark_job("rpi-01", 1, "j", sha, "onnx", path="a.onnx", size=size, meta=meta,
                                      signature=signature)
    return protocol.parse_job(envelope)


def test_keys_init_writes_a_private_key_for_its_owner_only_and_a_public_key(tmp_path, capsys):
    assert main(["keys", "init", "--dir", str(tmp_path / "k")]) == 0
    out = capsys.readouterr().out
    private, public = tmp_path / "k" / "edgeopt-signing.key", tmp_path / "k" / "edgeopt-signing.pub"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    trusted = signing.load_public_key(public)  # the agent reads it without cryptography
    assert f"key id {trusted.key_id}" in out and "--trusted-key" in out
    assert SigningKey.load(private).key_id == trusted.key_id

    assert main(["keys", "init", "--dir", str(tmp_path / "k")]) == 2
    assert "already exists; pass --force" in capsys.readouterr().err
    assert main(["keys", "init", "--dir", str(tmp_path / "k"), "--force"]) == 0
    assert signing.load_public_key(public).key_id != trusted.key_id


def test_what_the_host_signs_the_agent_accepts_and_any_change_it_refuses(tmp_path):
    mine = init_keys(tmp_path / "mine")
    theirs = init_keys(tmp_path / "theirs")
    key = SigningKey.load(mine.private_key)
    trusted = signing.load_public_key(mine.public_key)
    signature = key.sign_artifact(SHA, 1234, "onnx", META)
    assert signature.key_id == trusted.key_id
    signing.check_job(trusted, job_with(signature))  # no exception: accepted

    changes = {
        "sha256": dict(sha="00" * 32),
        "size": dict(size=1235),
        "precision": dict(meta=dict(META, precision="fp32")),
        "accuracy": dict(meta=dict(META, accuracy_drop_points=0.0)),
        "no meta": dict(meta=None),
    }
    for what, change in changes.items():
        with pytest.raises(signing.SignatureError, match="changed after signing") as caught:
            signing.check_job(trusted, job_with(signature, **change))
        assert caught.value.kind == "signature_invalid", what
    foreign = SigningKey.load(theirs.private_key).sign_artifact(SHA, 1234, "onnx", META)
    with pytest.raises(signing.SignatureError, match="but this agent trusts key") as caught:
        signing.check_job(trusted, job_with(foreign))
    assert caught.value.kind == "signature_invalid"
    with pytest.raises(signing.SignatureError, match="only runs signed artifacts") as caught:
        signing.check_job(trusted, job_with(None))
    assert caught.value.kind == "unsigned_artifact"
    signing.check_job(None, job_with(None))  # signatures off: anything goes, as before


def test_the_signed_statement_is_canonical():
    reordered = dict(reversed(list(META.items())))
    assert signing.statement(SHA, 1, "onnx", META) == signing.statement(SHA, 1, "onnx", reordered)
    # Keys the signature does not cover may come and go; a non-finite number is null, as on the wire.
    assert signing.statement(SHA, 1, "onnx", dict(META, note="x")) == signing.statement(SHA, 1, "onnx", META)
    assert signing.statement(SHA, 1, "onnx", dict(META, accuracy_drop_points=float("nan"))) == \
        signing.statement(SHA, 1, "onnx", dict(META, accuracy_drop_points=None))
    text = signing.statement(SHA, 1, "onnx", META)
    assert text.startswith(signing.DOMAIN)
    document = json.loads(text[len(signing.DOMAIN):])
    assert document["artifact"] == {"sha256": SHA, "size": 1, "format": "onnx"}
    assert set(document["meta"]) == set(signing.SIGNED_META)


def test_a_signature_survives_the_trip_through_json(tmp_path):
    keys = init_keys(tmp_path)
    meta = dict(META, accuracy_drop_points=1.0)  # a float that JSON could turn into an int elsewhere
    signature = SigningKey.load(keys.private_key).sign_artifact(SHA, 99, "tflite", meta)
    envelope = protocol.benchmark_job("rpi-01", 1, "j", SHA, "tflite", path="a.tflite", size=99, meta=meta,
                                      signature=signature)
    received = protocol.parse_job(protocol.Envelope.decode(envelope.encode()))
    signing.check_job(signing.load_public_key(keys.public_key), received)


def test_bad_private_keys_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="cannot read signing key"):
        SigningKey.load(tmp_path / "missing.key")
    garbage = tmp_path / "garbage.key"
    garbage.write_text("-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----\n")
    with pytest.raises(UserError, match="not an unencrypted PEM private key"):
        SigningKey.load(garbage)
    from cryptography.hazmat.primitives.asymmetric import ec

    other = tmp_path / "ec.key"
    other.write_bytes(ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    with pytest.raises(UserError, match="signed with Ed25519 keys"):
        SigningKey.load(other)
    with pytest.raises(UserError, match="not an Ed25519 public key"):
        signing.load_public_key(other)
