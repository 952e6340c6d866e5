"""The board's reference run feeds what the data fed: an input that held one value in every sample (a
sample rate, a zero initial state) is fed that value, a float input values in the data's range. Before,
Silero VAD given `sr` and `state` as data files, as the README says, lost its whole conversion after every
artifact was built: the reference fed `sr` 0 or 1 and the LSTM branch for it failed."""
import json

import numpy as np
import pytest

from edgeopt.cli.main import main
from edgeopt_converters.manifest_build import data_facts
from edgeopt_converters.source.tensors import Dataset
from realbench.corpus import CorpusMissing, corpus_file


def test_what_the_data_held_is_what_a_board_is_told_to_feed():
    data = Dataset({"sr": np.full(5, 16000, np.int64), "state": np.zeros((5, 2, 1, 128), np.float32),
                    "audio": np.linspace(-0.5, 0.25, 5 * 512, dtype=np.float32).reshape(5, 1, 512),
                    "ids": np.arange(5, dtype=np.int64)}, None, "data.npz", whole=True)
    assert data_facts(data) == {"sr": {"value": 16000}, "state": {"value": 0.0},
                                "audio": {"data_range": [-0.5, 0.25]}}


def test_a_stateful_model_with_its_state_and_rate_from_data_converts_and_is_checked_on_them(tmp_path, capsys):
    try:
        vad = corpus_file("silero-vad", "vad_full")
    except CorpusMissing as exc:
        pytest.skip(str(exc))
    rng = np.random.default_rng(0)
    n = 24
    np.savez(tmp_path / "vad.npz", input=(0.1 * rng.standard_normal((n, 1, 512))).astype(np.float32),
             state=np.zeros((n, 2, 1, 128), np.float32), sr=np.full(n, 16000, np.int64))
    out = tmp_path / "out"
    code = main(["convert", str(vad), "--device", "rpi4", "-o", str(out), "--format", "onnx", "--no-timing",
                 "--calibration", str(tmp_path / "vad.npz")])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    manifest = json.loads((out / "manifest.json").read_text())
    for artifact in manifest["artifacts"]:
        inputs = {i["model_input"]: i for i in artifact["inputs"]}
        assert inputs["sr"]["value"] == 16000 and inputs["sr"]["value_from"] == "data"
        assert inputs["state"]["value"] == 0.0
        low, high = inputs["input"]["data_range"]
        assert low < 0 < high
    assert not any("no reference figures" in w for w in manifest["warnings"]), manifest["warnings"]
