"""Job signing: `edgeopt keys init`, the host's signatures over whole jobs, and the agent's check of them agree."""
import json
import stat

import pytest

from edgeopt.cli.main import main
from edgeopt.deploy.keys import SigningKey, init_keys
from edgeopt.errors import UserError
from edgeopt_agent import signing, wire

serialization = pytest.importorskip("cryptography.hazmat.primitives.serialization",
                                    reason="signing needs the cryptography package")

SHA = "ab" * 32
META = {"model": "m.py:net", "model_sha256": "cd" * 32, "artifact_key": "onnx-int8", "format": "onnx",
        "precision": "int8", "accuracy_drop_points": 0.4, "manifest_sha256": "ef" * 32}
TARGET = wire.JobTarget(("rpi-01", "rpi-02"), "rpi5")


def signed_body(key, sha=SHA, size=1234, meta=META, **options):
    return wire.benchmark_body("j", sha, "onnx", path="a.onnx", size=size, meta=meta, target=TARGET,
                                   release=wire.Release("m.py:net", 1700000000.0), signer=key.sign_job,
                                   runs=10, **options)


def received(body, device="rpi-01"):
    """The job as a device parses it off the wire."""
    return wire.parse_job(wire.Envelope.decode(wire.job_message(device, 1, body).encode()))


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
    body = signed_body(key)
    assert body["signature"]["key_id"] == trusted.key_id
    for device in TARGET.devices:  # one signature serves every device it names
        signing.check_signature(trusted, received(body, device))  # no exception: accepted

    changes = {
        "sha256": dict(artifact=dict(body["artifact"], sha256="00" * 32)),
        "size": dict(artifact=dict(body["artifact"], size=1235)),
        "path": dict(artifact=dict(body["artifact"], path="b.onnx")),
        "precision": dict(meta=dict(META, precision="fp32")),
        "accuracy": dict(meta=dict(META, accuracy_drop_points=0.0)),
        "extra meta": dict(meta=dict(META, note="x")),
        "no meta": dict(meta=None),
        "bench options": dict(bench={"runs": 10, "timeout_s": 1800}),
        "job id": dict(job_id="j2"),
        "target devices": dict(target={"devices": ["rpi-01", "rpi-03"], "profile": "rpi5"}),
        "target profile": dict(target={"devices": None, "profile": "rpi5"}),
        "expiry": dict(expires_at=body["expires_at"] + 3600),
        "issued": dict(issued_at=body["issued_at"] + 1),
        "release": dict(release={"model": "m.py:net", "version": 1800000000.0}),
        "downgrade": dict(allow_downgrade=True),
    }
    for what, change in changes.items():
        with pytest.raises(signing.SignatureError, match="changed after signing") as caught:
            signing.check_signature(trusted, received(dict(body, **change)))
        assert caught.value.kind == "signature_invalid", what
    foreign = signed_body(SigningKey.load(theirs.private_key))
    with pytest.raises(signing.SignatureError, match="but this agent trusts key") as caught:
        signing.check_signature(trusted, received(foreign))
    assert caught.value.kind == "signature_invalid"
    unsigned = {k: v for k, v in body.items() if k != "signature"}
    with pytest.raises(signing.SignatureError, match="only runs signed jobs") as caught:
        signing.check_signature(trusted, received(unsigned))
    assert caught.value.kind == "unsigned_job"
    signing.check_signature(None, received(unsigned))  # signatures off: anything goes, as before


def test_the_signed_statement_is_canonical(tmp_path):
    key = SigningKey.load(init_keys(tmp_path).private_key)
    body = signed_body(key)
    reordered = dict(reversed(list(body.items())), meta=dict(reversed(list(META.items()))))
    assert signing.job_statement(body) == signing.job_statement(reordered)
    # The signature itself is not signed; a non-finite number is null, as on the wire.
    assert signing.job_statement(body) == signing.job_statement({k: v for k, v in body.items() if k != "signature"})
    assert signing.job_statement(dict(body, meta=dict(META, accuracy_drop_points=float("nan")))) == \
        signing.job_statement(dict(body, meta=dict(META, accuracy_drop_points=None)))
    text = signing.job_statement(body)
    assert text.startswith(signing.DOMAIN)
    document = json.loads(text[len(signing.DOMAIN):])
    assert document == {k: v for k, v in body.items() if k != "signature"}
    assert set(document) == set(wire.JOB_FIELDS) - {"signature", "allow_downgrade"}  # false is left out


def test_a_signature_survives_the_trip_through_json(tmp_path):
    keys = init_keys(tmp_path)
    meta = dict(META, accuracy_drop_points=1.0)  # a float that JSON could turn into an int elsewhere
    body = signed_body(SigningKey.load(keys.private_key), meta=meta, latency_budget_ms=2.5, batch_sizes=(1, 4))
    signing.check_signature(signing.load_public_key(keys.public_key), received(body))


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
