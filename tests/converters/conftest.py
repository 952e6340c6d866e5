from pathlib import Path

import numpy as np
import pytest

NETS = Path(__file__).with_name("nets.py")


@pytest.fixture(scope="session")
def nets_path() -> Path:
    return NETS


@pytest.fixture(scope="session")
def image_data(tmp_path_factory):
    """Calibration and labelled evaluation data for SmallCnn at 1x3x16x16."""
    folder = tmp_path_factory.mktemp("data")
    rng = np.random.default_rng(42)
    calibration = folder / "calib.npz"
    evaluation = folder / "eval.npz"
    np.savez(calibration, input=rng.standard_normal((32, 3, 16, 16)).astype(np.float32))
    np.savez(evaluation, input=rng.standard_normal((48, 3, 16, 16)).astype(np.float32),
             labels=rng.integers(0, 10, 48))
    return calibration, evaluation
