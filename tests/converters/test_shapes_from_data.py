"""A file.py:factory declares its inputs' names, not their shapes: the calibration data fixes them."""
import numpy as np
import pytest

import edgeopt
from edgeopt_agent.errors import UserError


@pytest.mark.parametrize("suffix", [".npz", ".npy"])
def test_the_calibration_data_gives_a_shape_nothing_else_gives(suffix, tmp_path, nets_path):
    data = np.random.default_rng(0).standard_normal((16, 3, 16, 16)).astype(np.float32)
    path = tmp_path / f"calib{suffix}"
    np.savez(path, x=data) if suffix == ".npz" else np.save(path, data)
    manifest = edgeopt.convert(f"{nets_path}:small_cnn", device="x86-64", output_dir=tmp_path / "out",
                               calibration=path, formats=["onnx"], precisions=["fp32"], time_on_host=False)
    assert manifest["model"]["inputs"][0]["shape"] == [1, 3, 16, 16]
    assert any(n.startswith("input 'x' takes its shape 1,3,16,16 from") for n in manifest["notes"])


def test_without_data_the_shape_is_still_asked_for(tmp_path, nets_path):
    with pytest.raises(UserError, match="give the shape of input 'x'"):
        edgeopt.convert(f"{nets_path}:small_cnn", device="x86-64", output_dir=tmp_path / "out", formats=["onnx"],
                        time_on_host=False)


def _convert(tmp_path, model, calibration, **options):
    return edgeopt.convert(model, device="x86-64", output_dir=tmp_path / "out", calibration=calibration,
                           formats=["onnx"], precisions=["fp32"], time_on_host=False, **options)


def test_a_factorys_integer_inputs_take_their_dtype_from_the_data(tmp_path, nets_path):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "tokens.npz", input_ids=rng.integers(0, 50, (8, 12)), attention_mask=np.ones((8, 12), np.int64))
    manifest = _convert(tmp_path, f"{nets_path}:token_encoder", tmp_path / "tokens.npz",
                        input_shape={"input_ids": "1,12", "attention_mask": "1,12"})  # shapes given, no --input-dtype
    assert {i["name"]: i["dtype"] for i in manifest["model"]["inputs"]} == {"input_ids": "int64",
                                                                             "attention_mask": "int64"}
    assert any(n.startswith("input 'input_ids' takes ") and "its dtype int64 from" in n for n in manifest["notes"])


def test_float64_data_does_not_make_a_float64_model(tmp_path, nets_path):
    np.save(tmp_path / "calib.npy", np.random.default_rng(0).standard_normal((8, 3, 16, 16)))  # numpy's default float64
    manifest = _convert(tmp_path, f"{nets_path}:small_cnn", tmp_path / "calib.npy")
    assert manifest["model"]["inputs"][0]["dtype"] == "float32"


def test_whole_inputs_in_a_file_are_read_as_such_where_the_model_runs_on_them(tmp_path, nets_path):
    """[N, 1, 3, 16, 16]: N inputs of 1x3x16x16 (the README's [N, *input_shape]); SmallCnn runs on no 5-D input."""
    np.save(tmp_path / "calib.npy", np.random.default_rng(0).standard_normal((8, 1, 3, 16, 16)).astype(np.float32))
    manifest = _convert(tmp_path, f"{nets_path}:small_cnn", tmp_path / "calib.npy")
    assert manifest["model"]["inputs"][0]["shape"] == [1, 3, 16, 16]
    assert manifest["input_shapes"]["calibration"][0]["x"] == [1, 3, 16, 16]


def test_where_both_readings_run_the_batch_first_one_is_taken(tmp_path, nets_path):
    """[N, 1, 6]: a Linear runs on [1, 1, 6] and on [1, 6]; batch-first gives [1, 1, 6], as before."""
    np.savez(tmp_path / "calib.npz", x=np.zeros((8, 1, 6), np.float32), y=np.zeros((8, 1, 3), np.float32))
    manifest = _convert(tmp_path, f"{nets_path}:two_inputs", tmp_path / "calib.npz")
    assert [i["shape"] for i in manifest["model"]["inputs"]] == [[1, 1, 6], [1, 1, 3]]
