"""A job's artifact: confined to the data dir, checked against its sha256 before anything loads it."""
import hashlib
import os

import pytest

from edgeopt_agent.daemon.artifacts import ArtifactDeliveryError, confined_path, materialize
from edgeopt_agent.wire import ArtifactRef


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def data_dir(tmp_path):
    folder = tmp_path / "data"
    (folder / "models").mkdir(parents=True)
    (folder / "models" / "m.onnx").write_bytes(b"model bytes")
    (tmp_path / "secret.onnx").write_bytes(b"outside")
    return folder


def test_a_file_by_path_is_verified_and_run_from_the_workers_own_copy(data_dir):
    path = materialize(ArtifactRef(sha256=sha(b"model bytes"), format="onnx", path="models/m.onnx"), data_dir)
    assert path == data_dir / "artifacts" / f"{sha(b'model bytes')}.onnx"
    (data_dir / "models" / "m.onnx").write_bytes(b"swapped after the check")
    assert path.read_bytes() == b"model bytes"  # what runs is exactly what was hashed
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary files left


@pytest.mark.parametrize("relative", ["transfers/S/000000.chunk", "artifacts/x.onnx", "agent.db", "agent.lock",
                                      "engines/e.plan", "m.onnx"])
def test_paths_into_the_agents_own_state_are_refused(data_dir, relative):
    target = data_dir / relative.replace("S", "a" * 64)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(b"model bytes")
    with pytest.raises(ArtifactDeliveryError, match="not under models/") as caught:
        materialize(ArtifactRef(sha256=sha(b"model bytes"), format="onnx", path=str(target.relative_to(data_dir))),
                    data_dir)
    assert caught.value.kind == "invalid_path"


def test_a_symlink_from_models_into_the_agents_state_is_refused(data_dir):
    (data_dir / "transfers").mkdir()
    (data_dir / "transfers" / "000000.chunk").write_bytes(b"model bytes")
    os.symlink(data_dir / "transfers" / "000000.chunk", data_dir / "models" / "chunk.onnx")
    with pytest.raises(ArtifactDeliveryError, match="not under models/"):
        materialize(ArtifactRef(sha256=sha(b"model bytes"), format="onnx", path="models/chunk.onnx"), data_dir)


@pytest.mark.parametrize("relative", ["../secret.onnx", "models/../../secret.onnx", "/etc/passwd", "a\x00b"])
def test_paths_outside_the_data_dir_are_refused(data_dir, relative):
    with pytest.raises(ArtifactDeliveryError) as caught:
        materialize(ArtifactRef(sha256=sha(b"outside"), format="onnx", path=relative), data_dir)
    assert caught.value.kind == "invalid_path"


def test_a_symlink_leading_out_is_refused(data_dir):
    os.symlink(data_dir.parent / "secret.onnx", data_dir / "models" / "link.onnx")
    with pytest.raises(ArtifactDeliveryError, match="leads outside") as caught:
        confined_path(data_dir, "models/link.onnx")
    assert caught.value.kind == "invalid_path"


def test_a_missing_file_is_reported(data_dir):
    with pytest.raises(ArtifactDeliveryError, match="does not exist") as caught:
        materialize(ArtifactRef(sha256=sha(b""), format="onnx", path="models/none.onnx"), data_dir)
    assert caught.value.kind == "missing_artifact"


def test_a_corrupt_file_is_refused_by_its_sha256(data_dir):
    with pytest.raises(ArtifactDeliveryError, match="corrupt") as caught:
        materialize(ArtifactRef(sha256=sha(b"other bytes"), format="onnx", path="models/m.onnx"), data_dir)
    assert caught.value.kind == "artifact_mismatch"
    assert list((data_dir / "artifacts").iterdir()) == []  # the copy that did not match is gone


def test_inline_artifacts_are_checked_then_stored_by_hash(data_dir):
    import base64

    data = b"inline model"
    ref = ArtifactRef(sha256=sha(data), format="tflite", data_b64=base64.b64encode(data).decode())
    path = materialize(ref, data_dir)
    assert path == data_dir / "artifacts" / f"{sha(data)}.tflite"
    assert path.read_bytes() == data
    assert materialize(ref, data_dir) == path
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary files left

    damaged = ArtifactRef(sha256=sha(b"something else"), format="tflite", data_b64=ref.data_b64)
    with pytest.raises(ArtifactDeliveryError, match="damaged") as caught:
        materialize(damaged, data_dir)
    assert caught.value.kind == "artifact_mismatch"
