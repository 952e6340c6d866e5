"""Every model file named right, from its bytes and without unpickling: torch.save's zip and legacy
(pre-1.6) formats, state_dicts, checkpoints and pickled modules, TorchScript, `.pt2`, ONNX, and files that
are no model at all; each gets the message that fits, and a state_dict is never sent to --trust-model-code."""
import json
import pickle
import struct
from unittest import mock

import numpy as np
import pytest
import torch

from edgeopt.cli.main import main
from edgeopt_converters.source import model_files
from nets import small_cnn

FAST = ["--device", "x86-64", "--input-shape", "1,3,16,16", "--format", "onnx", "--precision", "fp32", "--no-timing"]


@pytest.fixture
def net():
    return small_cnn().eval()


def identify(path):
    """model_files.identify, with every way of unpickling made to fail loudly while it reads."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"{path.name} was unpickled while its kind was read")

    with mock.patch.multiple(pickle, load=refuse, loads=refuse, Unpickler=refuse), \
            mock.patch.object(torch, "load", refuse), mock.patch.object(model_files, "pickletools", _GenopsOnly()):
        return model_files.identify(path)


class _GenopsOnly:
    """pickletools as model_files may use it: genops, which reads opcodes and builds nothing."""

    def __getattr__(self, name):
        import pickletools

        if name != "genops":
            raise AssertionError(f"model_files used pickletools.{name}")
        return pickletools.genops


def _save(obj, path, legacy=False, **kwargs):
    torch.save(obj, path, _use_new_zipfile_serialization=not legacy, **kwargs)
    return path


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
def test_state_dicts_checkpoints_and_pickled_modules_in_both_torch_save_formats(tmp_path, net, legacy):
    state = _save(net.state_dict(), tmp_path / "state.pth", legacy)
    checkpoint = _save({"epoch": 7, "model_state_dict": net.state_dict(), "optimizer": {"lr": 0.1}},
                       tmp_path / "ckpt.pth", legacy)
    module = _save(net, tmp_path / "module.pth", legacy)

    assert identify(state) == model_files.ModelFile("state_dict", "a state_dict", legacy)
    found = identify(checkpoint)
    assert found.kind == "state_dict" and found.what == "a checkpoint with 'model_state_dict', 'optimizer', 'epoch'"
    assert found.legacy is legacy
    found = identify(module)
    assert found.kind == "pickled_module" and found.what == "a pickled nn.Module (nets.SmallCnn)"
    assert found.legacy is legacy


def test_a_newer_pickle_protocol_is_read_too(tmp_path, net):
    assert identify(_save(net.state_dict(), tmp_path / "p4.pth", pickle_protocol=4)).kind == "state_dict"
    found = identify(_save(net, tmp_path / "m4.pth", pickle_protocol=4))
    assert found.kind == "pickled_module" and "nets.SmallCnn" in found.what


def test_programs_and_archives(tmp_path, net):
    example = (torch.randn(1, 3, 16, 16),)
    torch.jit.trace(net, example).save(str(tmp_path / "model.pth"))  # TorchScript under a checkpoint's suffix
    torch.export.save(torch.export.export(net, example), str(tmp_path / "model.pt2"))
    torch.onnx.export(net, example, str(tmp_path / "model.bin"), dynamo=False)  # ONNX under another suffix
    assert identify(tmp_path / "model.pth").kind == "torchscript"
    assert identify(tmp_path / "model.pt2").kind == "exported"
    assert identify(tmp_path / "model.bin").kind == "onnx"


def test_files_that_are_no_model(tmp_path):
    (tmp_path / "a.tflite").write_bytes(b"\x1c\x00\x00\x00TFL3" + bytes(64))
    header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    (tmp_path / "w.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(8))
    np.save(tmp_path / "x.npy", np.zeros(3))
    np.savez(tmp_path / "x.npz", input=np.zeros(3))
    (tmp_path / "plain.pkl").write_bytes(pickle.dumps({"a": 1}, protocol=4))
    (tmp_path / "text.pt").write_text("hello")
    kinds = {p.name: identify(p).kind for p in tmp_path.iterdir()}
    assert kinds == {"a.tflite": "artifact", "w.safetensors": "safetensors", "x.npy": "arrays", "x.npz": "arrays",
                     "plain.pkl": "pickle", "text.pt": "unknown"}


def _convert(capsys, *args):
    code = main(["convert", *map(str, args), *FAST])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    return code, errors, err


def test_a_legacy_state_dict_given_as_the_model_is_told_to_be_weights(tmp_path, net, capsys):
    """torchvision's own `mobilenet_v2-b0353104.pth` is in this format."""
    weights = _save(net.state_dict(), tmp_path / "mobilenet_v2-b0353104.pth", legacy=True)
    code, errors, err = _convert(capsys, weights, "-o", tmp_path / "out")
    assert code == 2 and len(errors) == 1, err
    assert "holds weights without the model's code (a state_dict, legacy torch.save format)" in errors[0]
    assert "file.py:factory" in errors[0] and f"--weights {weights}" in errors[0]
    assert "TorchScript" not in errors[0] and "--trust-model-code" not in errors[0]


def test_a_legacy_state_dict_converts_as_weights(tmp_path, net, nets_path, capsys):
    weights = _save({"state_dict": net.state_dict()}, tmp_path / "legacy.pth", legacy=True)
    code, _, err = _convert(capsys, f"{nets_path}:small_cnn", "--weights", weights, "-o", tmp_path / "out")
    assert code == 0, err


@pytest.mark.parametrize("kind, expected", [
    ("module", ["is a pickled nn.Module (nets.SmallCnn)", "never does", "model.state_dict()", "--weights"]),
    ("torchscript", ["is TorchScript", "--trust-model-code"]),
    ("tflite", ["is already a TFLite model", "edgeopt bench"]),
    ("npz", ["holds NumPy arrays (.npz): data, not a model", "--calibration"]),
])
def test_each_kind_that_is_no_source_model_gets_its_own_message(tmp_path, net, capsys, kind, expected):
    path = tmp_path / "model.pth"
    if kind == "module":
        _save(net, path, legacy=True)
    elif kind == "torchscript":
        torch.jit.trace(net, torch.randn(1, 3, 16, 16)).save(str(path))
    elif kind == "tflite":
        path.write_bytes(b"\x1c\x00\x00\x00TFL3" + bytes(64))
    else:
        path = tmp_path / "calib.npz"
        np.savez(path, input=np.zeros((2, 3, 16, 16), np.float32))
    code, errors, err = _convert(capsys, path, "-o", tmp_path / "out")
    assert code == 2 and len(errors) == 1, err
    for fragment in expected:
        assert fragment in errors[0], errors[0]


def test_weights_that_are_not_a_state_dict_say_what_they_are(tmp_path, net, nets_path, capsys):
    scripted = tmp_path / "scripted.pt"
    torch.jit.trace(net, torch.randn(1, 3, 16, 16)).save(str(scripted))
    code, errors, err = _convert(capsys, f"{nets_path}:small_cnn", "--weights", scripted, "-o", tmp_path / "out")
    assert code == 2 and len(errors) == 1, err
    assert f"--weights {scripted} is TorchScript, a whole program rather than a state_dict" in errors[0]


def test_a_pt2_that_is_torchscript_is_never_loaded_as_one(tmp_path, net, capsys):
    disguised = tmp_path / "model.pt2"
    torch.jit.trace(net, torch.randn(1, 3, 16, 16)).save(str(disguised))
    code, errors, err = _convert(capsys, disguised, "--trust-model-code", "-o", tmp_path / "out")
    assert code == 2 and len(errors) == 1, err
    assert "is TorchScript, not an ExportedProgram" in errors[0]
