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
