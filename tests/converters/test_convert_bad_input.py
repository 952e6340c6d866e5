"""Bad input to `edgeopt convert`: one actionable line on stderr, exit 2, nothing left in OUTDIR."""
import sys

import numpy as np
import pytest

from edgeopt.cli.main import main


@pytest.fixture
def run(tmp_path, capsys):
    out = tmp_path / "out"

    def invoke(*args, verbose=False):
        argv = (["-v"] if verbose else []) + ["convert", *map(str, args), "-o", str(out), "--no-timing"]
        code = main(argv)
        captured = capsys.readouterr()
        return code, captured.err, out

    return invoke


def assert_user_error(code, err, out, *fragments):
    assert code == 2, err
    lines = [l for l in err.strip().splitlines() if l.startswith("error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert not (out / "manifest.json").exists()
    assert not out.exists() or not [p for p in out.iterdir() if p.suffix in (".onnx", ".tflite") or p.name.startswith(".")]


def test_missing_model_file(run, tmp_path):
    assert_user_error(*run(tmp_path / "nope.onnx", "--device", "x86-64"), "model not found")


def test_text_file_is_not_a_model(run, tmp_path):
    fake = tmp_path / "model.onnx"
    fake.write_text("definitely not protobuf")
    assert_user_error(*run(fake, "--device", "x86-64"), "not a valid ONNX model")


def test_truncated_onnx_is_refused(run, tmp_path, nets_path):
    import torch
    from nets import small_cnn

    good = tmp_path / "good.onnx"
    torch.onnx.export(small_cnn().eval(), (torch.randn(1, 3, 16, 16),), str(good), dynamo=False)
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    assert_user_error(*run(corrupt, "--device", "x86-64"), "not a valid ONNX model")


def test_corrupt_torchscript_is_refused(run, tmp_path):
    bad = tmp_path / "model.pt"
    bad.write_bytes(b"PK\x03\x04 broken zip")
    assert_user_error(*run(bad, "--device", "x86-64", "--input-shape", "1,3,16,16", "--trust-model-code"),
                      "not a model file edgeopt knows", "damaged zip archive")


def test_torchscript_needs_trust_because_loading_it_runs_code(run, tmp_path):
    import torch
    from nets import small_cnn

    scripted = tmp_path / "model.ts"
    torch.jit.trace(small_cnn().eval(), torch.randn(1, 3, 16, 16)).save(str(scripted))
    assert_user_error(*run(scripted, "--device", "x86-64", "--input-shape", "1,3,16,16"),
                      "TorchScript", "--trust-model-code")


def test_pickled_module_is_never_unpickled(run, tmp_path):
    import torch
    from nets import small_cnn

    pickled = tmp_path / "model.pth"
    torch.save(small_cnn(), pickled)  # a full pickled nn.Module: loading it would run code
    assert_user_error(*run(pickled, "--device", "x86-64", "--input-shape", "1,3,16,16"), "factory")


def test_factory_that_raises(run, nets_path):
    assert_user_error(*run(f"{nets_path}:raises", "--device", "x86-64", "--input-shape", "1,3"),
                      "raised RuntimeError", "weights server unreachable")


def test_factory_that_returns_no_module(run, nets_path):
    assert_user_error(*run(f"{nets_path}:not_a_module", "--device", "x86-64", "--input-shape", "1,3"),
                      "expected a torch.nn.Module")


def test_unknown_factory_lists_the_callables(run, nets_path):
    assert_user_error(*run(f"{nets_path}:build", "--device", "x86-64", "--input-shape", "1,3"), "small_cnn")


def test_wrong_input_shape_for_the_model(run, nets_path):
    assert_user_error(*run(f"{nets_path}:small_cnn", "--device", "x86-64", "--input-shape", "1,5,16,16"),
                      "fails on inputs", "--input-shape")


def test_missing_input_shape(run, nets_path):
    assert_user_error(*run(f"{nets_path}:small_cnn", "--device", "x86-64"), "--input-shape")


def test_calibration_of_the_wrong_shape(run, nets_path, tmp_path):
    np.save(tmp_path / "calib.npy", np.zeros((4, 3, 8, 8), np.float32))
    assert_user_error(*run(f"{nets_path}:small_cnn", "--device", "x86-64", "--input-shape", "1,3,16,16",
                           "--calibration", tmp_path / "calib.npy"), "shape [4, 3, 8, 8]", "as N samples it would be [N, 1, 3, 16, 16]",
                      "as batch-first rows [N, 3, 16, 16]")


def test_calibration_of_the_wrong_dtype(run, nets_path, tmp_path):
    np.save(tmp_path / "calib.npy", np.zeros((4, 3, 16, 16), np.int32))
    assert_user_error(*run(f"{nets_path}:small_cnn", "--device", "x86-64", "--input-shape", "1,3,16,16",
                           "--calibration", tmp_path / "calib.npy"), "dtype int32")


def test_calibration_that_is_a_pickle(run, nets_path, tmp_path):
    np.save(tmp_path / "calib.npy", np.array([{"a": 1}], dtype=object))
    assert_user_error(*run(f"{nets_path}:small_cnn", "--device", "x86-64", "--input-shape", "1,3,16,16",
                           "--calibration", tmp_path / "calib.npy"), "not a readable")


def test_unknown_device(run, nets_path):
    assert_user_error(*run(f"{nets_path}:small_cnn", "--device", "rpi-5", "--input-shape", "1,3,16,16"),
                      "unknown device 'rpi-5'", "did you mean 'rpi5'")


def test_missing_extra_names_the_extra(run, nets_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "litert_torch", None)  # as if litert-torch were not installed
    assert_user_error(*run(f"{nets_path}:small_cnn", "--device", "x86-64", "--input-shape", "1,3,16,16",
                           "--format", "tflite"), "litert_torch", "edgeopt[tflite]")


def test_verbose_shows_the_traceback(run, nets_path):
    code, err, _ = run(f"{nets_path}:raises", "--device", "x86-64", "--input-shape", "1,3", verbose=True)
    assert code == 2
    assert "Traceback" in err and "weights server unreachable" in err


class _Trap:
    """Unpickling this creates a file: proof that a loader ran pickled code."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def _tampered_pt2(tmp_path, member_suffix, payload, config_edit=None):
    import json
    import pickle
    import zipfile

    import torch
    from nets import small_cnn

    good = tmp_path / "good.pt2"
    torch.export.save(torch.export.export(small_cnn().eval(), (torch.randn(1, 3, 16, 16),)), str(good))
    evil = tmp_path / "evil.pt2"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(evil, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename.endswith(member_suffix):
                data = pickle.dumps(payload)
            elif config_edit and item.filename.endswith("data/weights/model_weights_config.json"):
                data = json.dumps(config_edit(json.loads(data))).encode()
            dst.writestr(item, data)
    return evil


def test_pt2_with_pickled_weights_is_refused_before_torch_unpickles_it(run, tmp_path):
    marker = tmp_path / "PWNED"

    def mark_pickled(config):
        config["config"]["features.0.weight"]["use_pickle"] = True
        return config

    evil = _tampered_pt2(tmp_path, "data/weights/weight_0", _Trap(marker), mark_pickled)
    assert_user_error(*run(evil, "--device", "x86-64"), "refused", "unpickle")
    assert not marker.exists()


def test_pt2_with_pickled_sample_inputs_is_refused(run, tmp_path):
    marker = tmp_path / "PWNED"
    evil = _tampered_pt2(tmp_path, "data/sample_inputs/model.pt", _Trap(marker))
    assert_user_error(*run(evil, "--device", "x86-64"), "not plain tensors")
    assert not marker.exists()


def test_corrupt_npz_member(run, nets_path, tmp_path):
    import zipfile

    broken = tmp_path / "calib.npz"
    with zipfile.ZipFile(broken, "w") as archive:
        archive.writestr("input.npy", b"not an npy payload")
    assert_user_error(*run(f"{nets_path}:small_cnn", "--device", "x86-64", "--input-shape", "1,3,16,16",
                           "--calibration", broken), "calib.npz", "input")


def test_negative_accuracy_budget(run, nets_path):
    assert_user_error(*run(f"{nets_path}:small_cnn", "--device", "x86-64", "--input-shape", "1,3,16,16",
                           "--max-accuracy-drop", "-1"), "--max-accuracy-drop must be 0 or more")


def test_output_folder_that_is_a_file(nets_path, tmp_path, capsys):
    blocker = tmp_path / "afile"
    blocker.write_text("")
    code = main(["convert", f"{nets_path}:small_cnn", "--device", "x86-64", "--input-shape", "1,3,16,16",
                 "-o", str(blocker / "sub"), "--no-timing"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and "cannot create output folder" in err


@pytest.mark.parametrize("escape", ["parent folder", "symlink"])
def test_onnx_external_data_cannot_read_files_outside_the_model_folder(run, tmp_path, escape):
    """An ONNX file from elsewhere must not pull a host file (a key, a password file) into an artifact."""
    from onnx import TensorProto, helper, numpy_helper

    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"SECRET!!")
    folder = tmp_path / "model"
    folder.mkdir()
    location = "../secret.bin"
    if escape == "symlink":
        (folder / "weights.bin").symlink_to(secret)
        location = "weights.bin"
    weight = numpy_helper.from_array(np.zeros(8, np.uint8), "w")
    weight.ClearField("raw_data")
    weight.data_location = TensorProto.EXTERNAL
    for key, value in {"location": location, "offset": "0", "length": "8"}.items():
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "g", [],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, [8])], [weight])
    model = folder / "m.onnx"
    model.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString())
    code, err, out = run(model, "--device", "x86-64")
    assert_user_error(code, err, out, "not a valid ONNX model")
    assert "SECRET" not in err


def _vad(tmp_path):
    pytest.importorskip("torch", reason="building the model needs torch")
    import model_files

    return model_files.save_stateful_vad_onnx(tmp_path / "vad.onnx")


def test_an_input_shape_that_contradicts_the_model(run, tmp_path):
    assert_user_error(*run(_vad(tmp_path), "--device", "x86-64", "--input-shape", "input=1,64",
                           "--input-shape", "state=3,1,8", "--input-value", "sr=16000"),
                      "--input-shape state=3,1,8 does not fit input 'state' of shape [2, ?, 8]")


def test_an_unknown_input_name(run, tmp_path):
    assert_user_error(*run(_vad(tmp_path), "--device", "x86-64", "--input-shape", "audio=1,64"),
                      "the model has no input 'audio'; its inputs: input, state, sr")


def test_a_data_file_whose_arrays_do_not_fit(run, tmp_path):
    np.savez(tmp_path / "calib.npz", input=np.zeros((4, 1, 64), np.float32), state=np.zeros((4, 1, 8), np.float32))
    assert_user_error(*run(_vad(tmp_path), "--device", "x86-64", "--input-value", "sr=16000",
                           "--calibration", tmp_path / "calib.npz"),
                      "input 'state' [2, 1, 8] has an array of shape [4, 1, 8]",
                      "as N samples it would be [N, 2, 1, 8], as batch-first rows [N, 1, 8]",
                      "the model's inputs share no batch axis")


def test_an_export_failure_names_its_cause_and_source_line(run, nets_path):
    code, err, out = run(f"{nets_path}:data_dependent_branch", "--device", "x86-64", "--input-shape", "1,8",
                         "--format", "onnx")
    assert_user_error(code, err, out, "nets.py:", "`if x.sum() > 0:`", "torch.where")
    assert "Next steps" not in err
