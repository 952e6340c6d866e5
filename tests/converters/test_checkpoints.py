"""--weights takes the checkpoints people save, not only a bare state_dict, and says what does not fit."""
import json

import pytest
import torch

from edgeopt.cli.main import main
from nets import small_cnn

FAST = ["--device", "x86-64", "--input-shape", "1,3,16,16", "--format", "onnx", "--precision", "fp32", "--no-timing"]


def _state():
    torch.manual_seed(1)
    return small_cnn().state_dict()


@pytest.mark.parametrize("wrap", [
    lambda sd: sd,
    lambda sd: {"model_state": sd, "epoch": 7, "optimizer": {"lr": 0.1}},
    lambda sd: {"state_dict": {f"module.{k}": v for k, v in sd.items()}},  # DataParallel, under Lightning's key
    lambda sd: {"net": sd},
], ids=["bare", "model_state", "state_dict with module. prefix", "net"])
def test_common_checkpoint_wrappers_are_unwrapped(wrap, tmp_path, nets_path, capsys):
    state = _state()
    torch.save(wrap(state), tmp_path / "ckpt.pth")
    out = tmp_path / "out"
    code = main(["convert", f"{nets_path}:small_cnn", "--weights", str(tmp_path / "ckpt.pth"), "-o", str(out), *FAST])
    assert code == 0, capsys.readouterr().err
    manifest = json.loads((out / "manifest.json").read_text())
    assert [a["key"] for a in manifest["artifacts"]] == ["onnx-fp32"]


def test_a_checkpoint_of_another_model_names_the_keys_that_do_not_fit(tmp_path, nets_path, capsys):
    state = _state()
    state["extra.weight"] = torch.zeros(2)
    state.pop(next(iter(state)))
    torch.save({"model_state": state}, tmp_path / "other.pth")
    code = main(["convert", f"{nets_path}:small_cnn", "--weights", str(tmp_path / "other.pth"),
                 "-o", str(tmp_path / "out"), *FAST])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1
    assert "1 of its keys missing (first: " in errors[0] and "1 unexpected (first: extra.weight)" in errors[0]


def test_a_state_dict_file_given_as_the_model_says_to_use_it_as_weights(tmp_path, capsys):
    torch.save(_state(), tmp_path / "model.pth")
    code = main(["convert", str(tmp_path / "model.pth"), "-o", str(tmp_path / "out"), *FAST])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1
    assert "holds weights without the model's code (a state_dict)" in errors[0]
    assert "file.py:factory" in errors[0] and f"--weights {tmp_path / 'model.pth'}" in errors[0]
    assert "TorchScript" not in errors[0] and "--trust-model-code" not in errors[0]


def test_a_torchscript_file_is_still_told_apart(tmp_path, capsys):
    torch.jit.trace(small_cnn().eval(), torch.randn(1, 3, 16, 16)).save(str(tmp_path / "model.pt"))
    code = main(["convert", str(tmp_path / "model.pt"), "-o", str(tmp_path / "out"), *FAST])
    err = capsys.readouterr().err
    assert code == 2 and "is TorchScript" in err and "--trust-model-code" in err
