"""A multi-file artifact is one uncompressed zip: written whole, read back only when it is plain."""
import os
import stat
import zipfile

import pytest

from edgeopt_agent import bundle
from edgeopt_agent.runners import ArtifactError


def test_members_round_trip_and_the_same_members_give_the_same_bytes(tmp_path):
    weights = tmp_path / "w.bin"
    weights.write_bytes(os.urandom(1000))
    first = bundle.write_bundle({"model.param": b"7767517\n", "model.bin": weights}, tmp_path / "a.ncnn")
    second = bundle.write_bundle({"model.param": b"7767517\n", "model.bin": weights}, tmp_path / "b.ncnn")
    assert first.read_bytes() == second.read_bytes()
    assert bundle.member_sizes(first) == {"model.param": 8, "model.bin": 1000}
    with bundle.extracted(first, ("model.param", "model.bin")) as folder:
        assert (folder / "model.bin").read_bytes() == weights.read_bytes()
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert not folder.exists()
    with zipfile.ZipFile(first) as archive:  # what `unzip` sees
        assert archive.namelist() == ["model.param", "model.bin"]


def _zip(path, entries, compression=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, "w", compression=compression) as archive:
        for info, data in entries:
            archive.writestr(info, data)
    return path


def _link(name):
    info = zipfile.ZipInfo(name)
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info


@pytest.mark.parametrize("entries, compression, message", [
    ([("../evil.param", b"x")], zipfile.ZIP_STORED, "plain file names"),
    ([("/etc/passwd", b"x")], zipfile.ZIP_STORED, "plain file names"),
    ([("sub/model.bin", b"x")], zipfile.ZIP_STORED, "plain file names"),
    ([("model.bin", b"x"), ("model.bin", b"y")], zipfile.ZIP_STORED, "twice"),
    ([(_link("model.bin"), b"/etc/passwd")], zipfile.ZIP_STORED, "not a plain file"),
    ([("model.bin", b"0" * 4096)], zipfile.ZIP_DEFLATED, "compressed"),
])
def test_hostile_bundles_are_refused_before_anything_is_written(tmp_path, entries, compression, message):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate name it is asked to write
        path = _zip(tmp_path / "bad.ncnn", entries, compression)
    before = set(os.listdir(tmp_path))
    with pytest.raises(ArtifactError, match=message):
        bundle.extract(path)
    assert set(os.listdir(tmp_path)) == before
    assert not (tmp_path.parent / "evil.param").exists()


def test_size_limit_missing_members_and_non_zips_are_refused(tmp_path, monkeypatch):
    path = bundle.write_bundle({"model.param": b"x" * 100}, tmp_path / "m.ncnn")
    monkeypatch.setenv("EDGEOPT_MAX_BUNDLE_BYTES", "50")
    with pytest.raises(ArtifactError, match="the limit is 50"):
        bundle.member_sizes(path)
    monkeypatch.delenv("EDGEOPT_MAX_BUNDLE_BYTES")
    with pytest.raises(ArtifactError, match="lacks model.bin"):
        bundle.extract(path, ("model.param", "model.bin"))
    (tmp_path / "plain.ncnn").write_bytes(b"7767517\n")
    with pytest.raises(ArtifactError, match="not an edgeopt bundle"):
        bundle.extract(tmp_path / "plain.ncnn")
    with pytest.raises(ValueError, match="plain file names"):
        bundle.write_bundle({"../x": b""}, tmp_path / "x.ncnn")


def test_a_damaged_or_encrypted_bundle_is_a_bad_artifact_and_leaves_no_folder(tmp_path, monkeypatch):
    made = []
    real = bundle.tempfile.mkdtemp
    monkeypatch.setattr(bundle.tempfile, "mkdtemp", lambda **kw: made.append(real(**kw)) or made[-1])
    good = tmp_path / "model.ncnn"
    bundle.write_bundle({"model.param": b"7767517\n", "model.bin": b"\x00" * 64}, good)
    data = bytearray(good.read_bytes())
    data[data.index(b"\x00" * 64) + 10] = 0xFF  # one byte of a member's data: its CRC no longer matches
    damaged = tmp_path / "damaged.ncnn"
    damaged.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="not an intact edgeopt bundle"):
        bundle.extract(damaged)
    data = bytearray(good.read_bytes())
    for header, flags_at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):  # local and central headers' flags
        start = 0
        while (found := data.find(header, start)) >= 0:
            data[found + flags_at] |= 0x1  # "encrypted"
            start = found + 4
    encrypted = tmp_path / "encrypted.ncnn"
    encrypted.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="encrypted"):
        bundle.extract(encrypted)
    assert made and not any(os.path.exists(folder) for folder in made)
