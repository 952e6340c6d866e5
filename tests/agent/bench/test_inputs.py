"""Benchmark inputs: shapes per batch size, seeded random data, .npy/.npz files."""
from __future__ import annotations

import numpy as np
import pytest

from edgeopt_agent.bench.inputs import batch_shape, file_feeds, random_feeds
from edgeopt_agent.runners import InputError, Quantization, TensorInfo, UnsupportedModelError

DYNAMIC = TensorInfo("x", ("N", 16), "float32")
FIXED = TensorInfo("x", (1, 16), "float32")


def test_batch_axis_rules():
    assert batch_shape(DYNAMIC, None) == (1, 16)
    assert batch_shape(DYNAMIC, 8) == (8, 16)
    assert batch_shape(TensorInfo("x", (None, 3), "float32"), 2) == (2, 3)
    assert batch_shape(FIXED, None) == (1, 16)
    assert batch_shape(FIXED, 1) == (1, 16)
    with pytest.raises(UnsupportedModelError, match="fixed batch size of 1, so batch 8 cannot run"):
        batch_shape(FIXED, 8)
    with pytest.raises(InputError, match=r"dynamic size .seq. on axis 1; give its shape \(edgeopt bench --input-shape ids=...\) or an input file"):
        batch_shape(TensorInfo("ids", ("N", "seq"), "int64"), 1)
    assert batch_shape(TensorInfo("s", (), "float32"), None) == ()
    with pytest.raises(UnsupportedModelError, match="scalar"):
        batch_shape(TensorInfo("s", (), "float32"), 4)


def test_random_feeds_are_seeded_and_typed():
    infos = [
        DYNAMIC,
        TensorInfo("q", (None, 4), "int8", Quantization(0.1, 0)),
        TensorInfo("ids", (-1, 5), "int64"),
        TensorInfo("mask", ("batch", 5), "bool"),
    ]
    a, b, c = random_feeds(infos, 2, seed=0), random_feeds(infos, 2, seed=0), random_feeds(infos, 2, seed=1)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
    assert not np.array_equal(a["x"], c["x"])
    assert a["x"].shape == (2, 16) and a["x"].dtype == np.float32 and 0 <= a["x"].min() and a["x"].max() < 1
    assert a["q"].shape == (2, 4) and a["ids"].shape == (2, 5) and a["mask"].shape == (2, 5)
    assert a["q"].dtype == np.int8 and a["ids"].dtype == np.int64 and a["mask"].dtype == np.bool_
    assert 0 <= a["ids"].min() and a["ids"].max() <= 1


def test_npy_for_a_single_input_model(tmp_path):
    data = np.arange(3 * 16, dtype=np.float32).reshape(3, 16)
    np.save(tmp_path / "x.npy", data)
    # [N, 16] holds N samples (as convert reads it): a run feeds one batch, the model's own (here 1)
    np.testing.assert_array_equal(file_feeds(str(tmp_path / "x.npy"), [DYNAMIC], None)["x"], data[:1])
    np.testing.assert_array_equal(file_feeds(str(tmp_path / "x.npy"), [DYNAMIC], 2)["x"], data[:2])
    repeated = file_feeds(str(tmp_path / "x.npy"), [DYNAMIC], 7)["x"]
    np.testing.assert_array_equal(repeated, np.concatenate([data, data, data])[:7])


def test_npz_is_keyed_by_input_name(tmp_path):
    two = [DYNAMIC, TensorInfo("y", ("N", 2), "float32")]
    np.savez(tmp_path / "ok.npz", x=np.ones((1, 16)), y=np.zeros((1, 2)))
    feeds = file_feeds(str(tmp_path / "ok.npz"), two, None)
    assert set(feeds) == {"x", "y"}
    np.savez(tmp_path / "bad.npz", x=np.ones((1, 16)), z=np.zeros((1, 2)))
    with pytest.raises(InputError, match=r"missing \['y'\].*unknown \['z'\]"):
        file_feeds(str(tmp_path / "bad.npz"), two, None)
    np.save(tmp_path / "one.npy", np.ones((1, 16)))
    with pytest.raises(InputError, match="holds one array but the model takes 2 inputs"):
        file_feeds(str(tmp_path / "one.npy"), two, None)


def test_unreadable_file_and_fixed_batch(tmp_path):
    (tmp_path / "junk.npy").write_bytes(b"not numpy")
    with pytest.raises(InputError, match="cannot read input file"):
        file_feeds(str(tmp_path / "junk.npy"), [DYNAMIC], None)
    np.save(tmp_path / "x.npy", np.ones((1, 16), np.float32))
    with pytest.raises(UnsupportedModelError, match="fixed batch size of 1"):
        file_feeds(str(tmp_path / "x.npy"), [FIXED], 4)


STATEFUL = [TensorInfo("serving_default_args_0", ("batch", "samples"), "float32"),
            TensorInfo("state", (2, "batch", 8), "float32"),
            TensorInfo("sr", (), "int64")]
DESCRIBED = [{"name": "serving_default_args_0", "alias": "input", "shape": [1, 64]},
             {"name": "state", "shape": [2, 1, 8]},
             {"name": "sr", "shape": [], "value": 16000}]


def test_a_description_fills_dynamic_dims_and_constants():
    feeds = random_feeds(STATEFUL, None, 0, DESCRIBED)
    assert {k: v.shape for k, v in feeds.items()} == {"serving_default_args_0": (1, 64), "state": (2, 1, 8), "sr": ()}
    assert feeds["sr"].dtype == np.int64 and int(feeds["sr"]) == 16000
    assert batch_shape(STATEFUL[0], 4, DESCRIBED[0]) == (4, 64)  # a requested batch still sets a dynamic axis 0
    with pytest.raises(InputError, match="the artifact has no input 'audio'; its inputs: serving_default_args_0"):
        random_feeds(STATEFUL, None, 0, DESCRIBED + [{"name": "audio", "shape": [1]}])
    with pytest.raises(InputError, match="has shape .*, but its description says"):
        random_feeds(STATEFUL, None, 0, [{"name": "serving_default_args_0", "shape": [1, 8, 2]}, DESCRIBED[1]])


def test_an_input_file_may_use_the_models_own_names(tmp_path):
    path = tmp_path / "in.npz"
    np.savez(path, input=np.ones((1, 64), np.float32), state=np.zeros((2, 1, 8), np.float32))
    feeds = file_feeds(str(path), STATEFUL, None, DESCRIBED)
    assert feeds["serving_default_args_0"].shape == (1, 64) and float(feeds["serving_default_args_0"][0, 0]) == 1.0
    assert int(feeds["sr"]) == 16000  # a constant needs no array


def test_a_file_of_whole_samples_feeds_its_first_sample(tmp_path):
    """An input without a batch axis (a state [2, 1, 4]) takes [N, 2, 1, 4] samples: one per run."""
    state = TensorInfo("state", (2, 1, 4), "float32")
    data = np.arange(3 * 8, dtype=np.float32).reshape(3, 2, 1, 4)
    np.save(tmp_path / "s.npy", data)
    np.testing.assert_array_equal(file_feeds(str(tmp_path / "s.npy"), [state], None)["state"], data[0])


def test_a_fixed_batch_takes_that_many_samples(tmp_path):
    fixed = TensorInfo("x", (2, 16), "float32")
    data = np.arange(5 * 16, dtype=np.float32).reshape(5, 16)
    np.save(tmp_path / "x.npy", data)
    np.testing.assert_array_equal(file_feeds(str(tmp_path / "x.npy"), [fixed], None)["x"], data[:2])
