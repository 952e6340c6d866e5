"""The manifest module: one reader that checks, one atomic writer, and the facts readers rely on."""
import json
import os

import pytest

from edgeopt_agent.errors import UserError
from edgeopt_converters import manifest

CONTENT = {
    "schema": manifest.SCHEMA, "created": "2026-11-24T07:00:00+00:00", "recommended": "onnx-int8",
    "model": {"source": "nets.py:small_cnn"},
    "artifacts": [
        {"key": "onnx-fp32", "path": "m.fp32.onnx", "format": "onnx", "precision": "fp32", "sha256": "a" * 64,
         "size_bytes": 10, "recommended": False},
        {"key": "onnx-int8", "path": "m.int8.onnx", "format": "onnx", "precision": "int8", "sha256": "b" * 64,
         "size_bytes": 4, "recommended": True, "accuracy": {"drop_points": 0.1}, "scheme": "qdq-u8s8"},
    ],
}


def test_what_is_written_reads_back_with_every_fact(tmp_path):
    target = tmp_path / manifest.FILE_NAME
    manifest.write(CONTENT, target)
    assert target.read_text(encoding="utf-8") == json.dumps(CONTENT, indent=2) + "\n"
    assert os.listdir(tmp_path) == [manifest.FILE_NAME]
    for where in (tmp_path, target, str(tmp_path)):
        read = manifest.read(where)
        assert read.path == target and read.folder == tmp_path and read.data == CONTENT
        assert read.raw == target.read_bytes()
    assert read.schema == manifest.SCHEMA and read.recommended == "onnx-int8" and read.keys == ["onnx-fp32", "onnx-int8"]
    int8 = read.artifact("onnx-int8")
    assert (int8.path, int8.format, int8.precision, int8.size_bytes, int8.recommended) == ("m.int8.onnx", "onnx", "int8", 4, True)
    assert int8.data["accuracy"]["drop_points"] == 0.1 and int8.data["scheme"] == "qdq-u8s8"
    assert read.artifact("tflite-int8") is None


@pytest.mark.parametrize("make, fragment", [
    (lambda d: d / "absent", "conversion output not found"),
    (lambda d: d, "has no manifest.json"),
    (lambda d: _write(d, "{oops"), "is not valid JSON"),
    (lambda d: _write(d, "[]"), "is not an edgeopt manifest"),
    (lambda d: _write(d, '{"schema": "other/1", "artifacts": []}'), "is not an edgeopt manifest"),
    (lambda d: _write(d, '{"artifacts": []}'), "is not an edgeopt manifest"),
    (lambda d: _write(d, '{"schema": "edgeopt.manifest/1"}'), 'has no "artifacts" list'),
    (lambda d: _write(d, '{"schema": "edgeopt.manifest/1", "artifacts": [1]}'), 'has no "artifacts" list'),
])
def test_a_bad_manifest_is_one_line_naming_the_file(tmp_path, make, fragment):
    with pytest.raises(UserError, match=fragment) as caught:
        manifest.read(make(tmp_path))
    assert str(tmp_path) in str(caught.value) and "\n" not in str(caught.value)


def test_a_hand_made_manifest_without_schema_reads_when_allowed(tmp_path):
    _write(tmp_path, '{"artifacts": [{"path": "m.onnx"}]}')
    [entry] = manifest.read(tmp_path, require_schema=False).artifacts
    assert entry.path == "m.onnx" and entry.key is None
    _write(tmp_path, '{"schema": "other/1", "artifacts": []}')
    with pytest.raises(UserError, match="is not an edgeopt manifest"):
        manifest.read(tmp_path, require_schema=False)


def _write(folder, text):
    (folder / manifest.FILE_NAME).write_text(text, encoding="utf-8")
    return folder


IDENTITY = {"model": {"source": "nets.py:small_cnn", "sha256": "c" * 64}, "options": {"formats": ["onnx"]},
            "tool_versions": {"edgeopt": "0.1.0", "torch": "2.13.0"}, "device": "rpi5", "created": "2026-11-24"}


def test_a_build_is_the_model_hash_options_edgeopt_version_and_profile():
    first = manifest.build_id(IDENTITY)
    assert len(first) == 16 and first == manifest.build_id(json.loads(json.dumps(IDENTITY)))
    assert manifest.build_id(dict(IDENTITY, created="2027-01-01", recommended="x")) == first  # not part of it
    assert manifest.build_id({**IDENTITY, "tool_versions": {"edgeopt": "0.1.0", "torch": "2.14.0"}}) == first
    for changed in ({"model": {"sha256": "d" * 64}}, {"options": {"formats": ["tflite"]}},
                    {"tool_versions": {"edgeopt": "0.2.0"}}, {"device": "rpi4"}):
        assert manifest.build_id(dict(IDENTITY, **changed)) != first, changed
    assert manifest.build_id({"artifacts": []}) is None  # no model hash: nothing to name it by


def test_the_build_written_by_convert_wins_and_older_manifests_get_theirs_computed():
    assert manifest.build_of(IDENTITY) == {"id": manifest.build_id(IDENTITY), "version": None}
    written = dict(IDENTITY, build={"id": "0123456789abcdef", "version": "1.4.0"})
    assert manifest.build_of(written) == {"id": "0123456789abcdef", "version": "1.4.0"}


@pytest.mark.parametrize("version", ["1.4.0", "ci-2817", "2026.11-rc1", "v2+cuda:12@main", "a" * 64])
def test_a_build_version_is_one_word(version):
    assert manifest.check_build_version(version) == version


@pytest.mark.parametrize("version", ["", "-rc1", "two words", "a" * 65, "v1/2", 14, None])
def test_a_build_version_that_is_not_one_word_is_refused_saying_what_works(version):
    with pytest.raises(UserError, match="build version .* is not usable: give 1-64 letters, digits and"):
        manifest.check_build_version(version)
