"""Engine cache: what makes two engines the same, and storing them so a second job reuses the first's."""
from __future__ import annotations

import hashlib
import json

import pytest

from edgeopt_agent.files import sha256_file
from edgeopt_agent.runners.engine_cache import (
    DEFAULT_CACHE_ENV,
    EngineCache,
    EngineKey,
    default_cache_dir,
)

SHA = hashlib.sha256(b"model bytes").hexdigest()
OTHER_SHA = hashlib.sha256(b"other model").hexdigest()


def key(**changes) -> EngineKey:
    fields = dict(
        model_sha256=SHA,
        tensorrt_version="10.3.0",
        gpu_name="Orin",
        compute_capability=(8, 7),
        precision="int8",
        options={"max_batch": 1, "workspace_mb": 1024},
    )
    fields.update(changes)
    return EngineKey(**fields)


def test_equal_keys_have_equal_digests_whatever_the_option_order():
    reordered = key(options={"workspace_mb": 1024, "max_batch": 1})
    assert reordered == key() and reordered.digest == key().digest
    assert key(compute_capability=[8, 7]).digest == key().digest


@pytest.mark.parametrize(
    "change",
    [
        {"model_sha256": OTHER_SHA},
        {"tensorrt_version": "8.6.2"},
        {"gpu_name": "NVIDIA H100 80GB HBM3"},
        {"compute_capability": (8, 6)},
        {"precision": "fp16"},
        {"options": {"max_batch": 8, "workspace_mb": 1024}},
        {"options": {"max_batch": 1, "workspace_mb": 512}},
    ],
)
def test_anything_that_changes_the_engine_changes_the_key(change):
    changed = key(**change)
    assert changed.digest != key().digest and changed.filename != key().filename


def test_file_names_say_which_model_and_precision():
    name = key().filename
    assert name.startswith(SHA[:12] + "-int8-") and name.endswith(".engine")


def test_one_timing_cache_per_tensorrt_version_and_gpu():
    shared = key().timing_cache_filename()
    assert key(model_sha256=OTHER_SHA, precision="fp16").timing_cache_filename() == shared
    assert key(tensorrt_version="8.5.2").timing_cache_filename() != shared
    assert key(gpu_name="Xavier", compute_capability=(7, 2)).timing_cache_filename() != shared


@pytest.mark.parametrize(
    "change, message",
    [({"precision": "int4"}, "precision must be one of"), ({"model_sha256": "abc"}, "64 hex digits")],
)
def test_bad_keys_are_refused(change, message):
    with pytest.raises(ValueError, match=message):
        key(**change)


def test_a_stored_engine_is_found_by_the_same_key_only(tmp_path):
    cache = EngineCache(tmp_path / "engines")
    assert cache.lookup(key()) is None
    stored = cache.store(key(), b"serialized plan", build_s=12.3456789)
    assert stored.path.read_bytes() == b"serialized plan" and stored.build_s == 12.345679

    found = EngineCache(tmp_path / "engines").lookup(key())  # a later job, a new cache object
    assert found is not None and found.path == stored.path and found.build_s == 12.345679
    assert cache.lookup(key(precision="fp16")) is None
    assert cache.lookup(key(tensorrt_version="10.4.0")) is None
    record = json.loads(stored.path.with_suffix(".json").read_text())
    assert record["key"] == key().to_dict() and record["size_bytes"] == len(b"serialized plan")
    assert sorted(p.name for p in (tmp_path / "engines").iterdir()) == sorted([stored.path.name, stored.path.with_suffix(".json").name])


def test_an_engine_without_its_record_or_with_another_record_is_not_used(tmp_path):
    cache = EngineCache(tmp_path)
    stored = cache.store(key(), b"plan", build_s=1.0)
    record_path = stored.path.with_suffix(".json")
    record = json.loads(record_path.read_text())
    record["key"]["tensorrt_version"] = "8.2.1"
    record_path.write_text(json.dumps(record))
    assert cache.lookup(key()) is None
    record_path.write_text("{ half a record")
    assert cache.lookup(key()) is None
    record_path.unlink()
    assert cache.lookup(key()) is None


def test_discard_forgets_an_engine_that_would_not_load(tmp_path):
    cache = EngineCache(tmp_path)
    stored = cache.store(key(), b"plan", build_s=1.0)
    cache.discard(key())
    assert cache.lookup(key()) is None and not stored.path.exists()
    cache.discard(key())  # nothing left to discard: not an error


def test_timing_cache_round_trip(tmp_path):
    cache = EngineCache(tmp_path)
    assert cache.load_timing_cache(key()) == b""
    cache.store_timing_cache(key(), b"layer timings")
    assert cache.load_timing_cache(key(precision="fp16", model_sha256=OTHER_SHA)) == b"layer timings"
    assert cache.load_timing_cache(key(gpu_name="Xavier")) == b""


def test_default_folder(monkeypatch, tmp_path):
    monkeypatch.delenv(DEFAULT_CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "edgeopt" / "engines"
    monkeypatch.setenv(DEFAULT_CACHE_ENV, str(tmp_path / "mine"))
    assert default_cache_dir() == tmp_path / "mine"
    assert EngineCache().folder == tmp_path / "mine"


def test_model_hash_streams_the_file(tmp_path):
    path = tmp_path / "model.onnx"
    data = bytes(range(256)) * 9000  # several read chunks
    path.write_bytes(data)
    assert sha256_file(path) == hashlib.sha256(data).hexdigest()
