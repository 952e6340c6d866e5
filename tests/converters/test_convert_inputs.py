"""Any model's inputs: named, scalar, non-batch-first, constant and dynamic inputs, from the
model's own declaration and the user's options, into every artifact and `edgeopt bench OUTDIR`."""
from __future__ import annotations

import json

import numpy as np
import pytest

import model_files
from edgeopt.cli.main import main
from edgeopt_agent.errors import UserError
from edgeopt_converters.source.input_specs import resolve_specs
from edgeopt_converters.source.source_model import SourceModel
from edgeopt_converters.source.tensors import InputSpec, load_dataset, parse_shape, random_dataset

VAD_INPUTS = [
    InputSpec("input", (-1, -1), "float32", dim_names=("batch", "samples")),
    InputSpec("state", (2, -1, 8), "float32", dim_names=(None, "batch", None)),
    InputSpec("sr", (), "int64"),
]


def onnx_like(specs):
    return SourceModel("onnx", "vad.onnx", "0" * 64, input_specs=list(specs))


def test_named_shapes_fill_only_what_the_model_leaves_open():
    specs = resolve_specs(onnx_like(VAD_INPUTS), ["input=1,512"], [], ["sr=16000"])
    assert [(s.name, s.shape, s.dtype, s.value) for s in specs] == [
        ("input", (1, 512), "float32", None),
        ("state", (2, 1, 8), "float32", None),  # its dynamic 'batch' dim is the one input's axis 0 names
        ("sr", (), "int64", 16000),
    ]


def test_scalar_and_positional_shapes():
    assert parse_shape("") == () and parse_shape("scalar") == () and parse_shape("1x3") == (1, 3)
    two = [InputSpec("x", (-1, 6)), InputSpec("y", (-1, 3))]
    specs = resolve_specs(onnx_like(two), ["2,6", "2,3"], ["int64"])
    assert [(s.shape, s.dtype) for s in specs] == [((2, 6), "int64"), ((2, 3), "int64")]
    specs = resolve_specs(onnx_like(VAD_INPUTS), ["input=1,64", "sr="], ["sr=int32"])
    assert specs[2].shape == () and specs[2].dtype == "int32" and specs[2].value is None


@pytest.mark.parametrize("shapes, values, message", [
    (["state=3,1,8"], [], "does not fit input 'state' of shape [2, ?, 8]"),
    (["input=1,64", "sr=1"], [], "does not fit input 'sr' of shape []"),
    (["voice=1,64"], [], "the model has no input 'voice'; its inputs: input, state, sr"),
    (["input=1,64"], ["rate=16000"], "the model has no input 'rate'"),
    (["input=1,64"], ["16000"], "needs the input's name"),
    (["input=1,a"], [], "is not a list of integers"),
])
def test_shapes_that_contradict_the_model_are_one_line(shapes, values, message):
    with pytest.raises(UserError) as caught:
        resolve_specs(onnx_like(VAD_INPUTS), shapes, [], values)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_python_argument_needs_a_value():
    source = SourceModel("torchscript", "vad.pt", "0" * 64,
                         input_specs=[InputSpec("x", None), InputSpec("sr", (), "int", tensor=False)])
    with pytest.raises(UserError, match="'sr' .* is a int, not a tensor: give its value with --input-value sr="):
        resolve_specs(source, ["x=1,64"], [])
    with pytest.raises(UserError, match="give the shape of input 'x'"):
        resolve_specs(source, [], [], ["sr=16000"])
    specs = resolve_specs(source, ["x=1,64"], [], ["sr=16000"])
    assert specs[1].value == 16000 and not specs[1].tensor


def vad_specs():
    return resolve_specs(onnx_like(VAD_INPUTS), ["input=1,64"], [], ["sr=16000"])


def test_data_files_hold_whole_samples_where_inputs_share_no_batch_axis(tmp_path):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "samples.npz", input=rng.random((5, 1, 64), np.float32), state=rng.random((5, 2, 1, 8), np.float32))
    np.savez(tmp_path / "rows.npz", input=rng.random((5, 64), np.float32), state=rng.random((5, 2, 1, 8), np.float32))
    for name in ("samples.npz", "rows.npz"):  # rows of batch 1 read as samples with a batch axis of 1
        data = load_dataset(tmp_path / name, vad_specs(), "calibration", allow_labels=False)
        assert data.whole and data.size == 5
        feeds = [feed for feed, _ in data.batches(1)]
        assert len(feeds) == 5
        assert {k: v.shape for k, v in feeds[0].items()} == {"input": (1, 64), "state": (2, 1, 8), "sr": ()}
        assert feeds[0]["sr"].dtype == np.int64 and int(feeds[0]["sr"]) == 16000  # the constant, in every sample


def test_a_state_given_batch_first_shows_both_readings(tmp_path):
    np.savez(tmp_path / "bad.npz", input=np.zeros((5, 1, 64), np.float32), state=np.zeros((5, 1, 8), np.float32))
    with pytest.raises(UserError) as caught:
        load_dataset(tmp_path / "bad.npz", vad_specs(), "calibration", allow_labels=False)
    text = str(caught.value)
    assert "input 'state' [2, 1, 8] has an array of shape [5, 1, 8]" in text
    assert "as N samples it would be [N, 2, 1, 8], as batch-first rows [N, 1, 8]" in text


def test_scalar_arrays_and_unknown_arrays_are_refused(tmp_path):
    scalar = [InputSpec("x", (1, 4)), InputSpec("gain", (), "float32")]
    np.savez(tmp_path / "ok.npz", x=np.zeros((3, 4), np.float32), gain=np.ones(3, np.float32))
    data = load_dataset(tmp_path / "ok.npz", scalar, "eval-data", allow_labels=True)
    assert data.whole and next(data.batches(1))[0]["gain"].shape == ()
    np.savez(tmp_path / "bad.npz", x=np.zeros((3, 4), np.float32), gain=np.ones((3, 1), np.float32))
    with pytest.raises(UserError, match="input 'gain' is a scalar, so its array must be \\[N\\]"):
        load_dataset(tmp_path / "bad.npz", scalar, "eval-data", allow_labels=True)
    np.savez(tmp_path / "extra.npz", x=np.zeros((3, 4), np.float32), gain=np.ones(3, np.float32), y=np.ones(3))
    with pytest.raises(UserError, match="array\\(s\\) 'y' that are not inputs of the model"):
        load_dataset(tmp_path / "extra.npz", scalar, "eval-data", allow_labels=True)


def test_batch_first_files_keep_working_and_whole_samples_are_equivalent(tmp_path):
    image = [InputSpec("x", (2, 3, 4, 4))]
    rows = np.arange(4 * 3 * 4 * 4, dtype=np.float32).reshape(4, 3, 4, 4)
    np.save(tmp_path / "rows.npy", rows)
    data = load_dataset(tmp_path / "rows.npy", image, "calibration", allow_labels=False)
    assert not data.whole and [f["x"].shape for f, _ in data.batches(2)] == [(2, 3, 4, 4)] * 2
    np.save(tmp_path / "samples.npy", rows.reshape(2, 2, 3, 4, 4))
    data = load_dataset(tmp_path / "samples.npy", image, "calibration", allow_labels=False)
    assert data.whole and [f["x"].shape for f, _ in data.batches(2)] == [(2, 3, 4, 4)] * 2


def test_evaluation_labels_are_class_indices_or_padded_symbol_sequences(tmp_path):
    from edgeopt_converters.source.tensors import load_datasets

    line = [InputSpec("x", (1, 3, 8, 32))]
    images = np.zeros((3, 3, 8, 32), np.float32)
    np.savez(tmp_path / "classes.npz", x=images, labels=np.array([[2], [0], [1]]))
    assert load_dataset(tmp_path / "classes.npz", line, "eval-data", allow_labels=True).labels.tolist() == [2, 0, 1]
    strings = np.array([[5, 6, -1], [7, -1, -1], [8, 9, 10]])
    np.savez(tmp_path / "strings.npz", x=images, labels=strings)
    assert load_dataset(tmp_path / "strings.npz", line, "eval-data", allow_labels=True).labels.shape == (3, 3)
    np.savez(tmp_path / "short.npz", x=images, labels=np.array([[4], [4], [4]]) @ np.ones((1, 2), np.int64))
    joined = load_datasets([tmp_path / "strings.npz", tmp_path / "short.npz"], line, "eval-data", allow_labels=True)
    assert joined.labels.shape == (6, 3) and joined.labels[3].tolist() == [4, 4, -1], "shorter rows padded with -1"
    with pytest.raises(UserError, match="some have class labels"):
        load_datasets([tmp_path / "strings.npz", tmp_path / "classes.npz"], line, "eval-data", allow_labels=True)
    np.savez(tmp_path / "bad.npz", x=images, labels=np.ones((2, 4), np.int64))
    with pytest.raises(UserError, match=r"symbol sequences \[N, L\] padded with -1"):
        load_dataset(tmp_path / "bad.npz", line, "eval-data", allow_labels=True)


def test_random_data_needs_every_dynamic_dim_and_says_which_option_gives_it():
    tokens = [InputSpec("input_ids", (1, -1), "int64", dim_names=("batch", "seq")),
              InputSpec("attention_mask", (1, -1), "int64", dim_names=("batch", "seq"))]
    with pytest.raises(UserError) as caught:
        random_dataset(tokens)
    # one of the two is enough: they share the dim 'seq'
    assert "input 'input_ids' is [1, ?]: give --input-shape input_ids=1,N" in str(caught.value)
    assert "attention_mask" not in str(caught.value)


# --- end to end: convert for x86-64 and rpi4, then `edgeopt bench OUTDIR` with no input options ---

QUICK = ["--runs", "3", "--duration", "0", "--warmup", "1", "--idle", "0", "--no-sensors", "--json"]


def bench_folder(capsys, outdir, *extra):
    code = main(["bench", str(outdir), *QUICK, *map(str, extra)])
    captured = capsys.readouterr()
    return code, json.loads(captured.out) if captured.out.strip() else None, captured.err


def _vad_onnx(tmp_path, nets_path):
    return dict(model=model_files.save_stateful_vad_onnx(tmp_path / "vad.onnx"),
                input_shape={"input": (1, 64)}, input_value={"sr": 16000})


def _vad_torchscript(tmp_path, nets_path):
    return dict(model=model_files.save_stateful_vad_torchscript(tmp_path / "vad.pt"), trust_model_code=True,
                input_shape={"x": (1, 64), "state": (2, 1, 8)}, input_value={"sr": 16000})


def _vad_factory(tmp_path, nets_path):
    return dict(model=f"{nets_path}:stateful_vad", input_shape={"x": (1, 64), "state": (2, 1, 8)},
                input_value={"sr": 16000})


def _mixed(tmp_path, nets_path):
    return dict(model=f"{nets_path}:mixed_inputs", input_shape={"ids": (1, 6), "mask": (1, 6), "features": (1, 4)},
                input_dtype={"ids": "int64", "mask": "int32"})


def _tokens(tmp_path, nets_path):
    rng = np.random.default_rng(0)
    for name, length in (("calib-12", 12), ("calib-6", 6), ("eval", 20)):  # a file set of several lengths
        np.savez(tmp_path / f"{name}.npz", input_ids=rng.integers(0, 50, (8, length)),
                 attention_mask=np.ones((8, length), np.int64))
    return dict(model=model_files.save_token_encoder_onnx(tmp_path / "encoder.onnx"),
                calibration=[tmp_path / "calib-12.npz", tmp_path / "calib-6.npz"], eval_data=tmp_path / "eval.npz")


def _tokens_torch(tmp_path, nets_path):
    files = _tokens(tmp_path, nets_path)
    # '?': the data decides; calibration (12) and evaluation (20) differ, so the dim stays dynamic
    return dict(files, model=f"{nets_path}:token_encoder", input_dtype="int64",
                input_shape={"input_ids": "1,?", "attention_mask": "1,?"})


CASES = {"vad-onnx": _vad_onnx, "vad-torchscript": _vad_torchscript, "vad-factory": _vad_factory,
         "mixed-dtypes": _mixed, "dynamic-seq": _tokens, "dynamic-seq-torch": _tokens_torch}


@pytest.mark.slow
@pytest.mark.parametrize("device", ["x86-64", "rpi4"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_converted_and_benchmarked_with_no_input_options(case, device, tmp_path, nets_path, capsys):
    pytest.importorskip("torch", reason="converting needs the convert extra (torch)")
    import edgeopt

    options = CASES[case](tmp_path, nets_path)
    model = options.pop("model")
    outdir = tmp_path / "out"
    manifest = edgeopt.convert(model, device=device, output_dir=outdir, time_on_host=False, **options)

    formats = {a["format"] for a in manifest["artifacts"]}
    traced = case in ("vad-factory", "mixed-dtypes")  # PyTorch sources of one shape per input
    # rpi4 adds ExecuTorch for those; ncnn takes neither (a batch-2 state input; a graph with integer
    # inputs ncnn cannot parse), and the manifest's warnings say so
    assert formats == ({"onnx", "tflite"} | ({"pte"} if device == "rpi4" else set()) if traced else {"onnx"})
    model_inputs = {i["name"]: i for i in manifest["model"]["inputs"]}
    for artifact in manifest["artifacts"]:
        assert artifact["accuracy"]["cosine_similarity"] > 0.99, artifact["key"]
        # every artifact input says which model input it is, and the shape it was validated with
        for item in artifact["inputs"]:
            assert item["model_input"] in model_inputs
            assert len(item["example_shape"]) == len(item["shape"])
    if case.startswith("vad"):
        assert model_inputs["sr"]["value"] == 16000
        baked = case != "vad-onnx"  # a Python int is baked into the export; an ONNX input is fed it
        for artifact in manifest["artifacts"]:
            names = [i["model_input"] for i in artifact["inputs"]]
            assert ("sr" in names) is not baked
    if case.startswith("dynamic-seq"):
        assert [s["input_ids"] for s in manifest["input_shapes"]["calibration"]] == [[1, 12], [1, 6]]
        assert manifest["input_shapes"]["evaluation"] == [{"input_ids": [1, 20], "attention_mask": [1, 20]}]
        assert manifest["calibration"]["samples"] == 16
        for artifact in manifest["artifacts"]:
            assert isinstance(artifact["inputs"][0]["shape"][1], str)  # the dynamic axis is kept
        if case == "dynamic-seq-torch":  # the profiles' TFLite takes one shape per input
            assert any(n.startswith("TFLite artifacts skipped: input 'input_ids' is [1, 12] and [1, 6] and [1, 20]")
                       for n in manifest["notes"])

    code, report, err = bench_folder(capsys, outdir)
    assert code == 0, err
    results = report["artifacts"]
    assert len(results) == len(manifest["artifacts"]) and all(r["ok"] for r in results), results
    if case.startswith("dynamic-seq"):  # fed at the length validated
        assert all(r["spec"]["inputs"][0]["shape"] == [1, 20] for r in results)

    # one input file keyed by the model's own names serves every artifact, TFLite's included
    arrays = {}
    for name, item in model_inputs.items():
        if "value" in item:
            continue
        shape = manifest["input_shapes"]["evaluation"][0][name]
        arrays[name] = np.zeros(shape, np.dtype(item["dtype"]))
    np.savez(tmp_path / "input.npz", **arrays)
    code, report, err = bench_folder(capsys, outdir, "--input", tmp_path / "input.npz")
    assert code == 0 and all(r["ok"] for r in report["artifacts"]), (err, report)


@pytest.mark.slow
def test_bench_of_a_third_party_artifact_says_which_shape_to_give(tmp_path, capsys):
    pytest.importorskip("torch", reason="building the model needs torch")
    model = model_files.save_token_encoder_onnx(tmp_path / "encoder.onnx")
    code, report, err = bench_folder(capsys, model)
    assert code == 1 and report["ok"] is False
    assert "give its shape (edgeopt bench --input-shape input_ids=...)" in report["error"]["message"]
    code, report, err = bench_folder(capsys, model, "--input-shape", "input_ids=1,9",
                                     "--input-shape", "attention_mask=1,9")
    assert code == 0 and report["ok"], err
    code, report, err = bench_folder(capsys, model, "--input-shape", "ids=1,9")
    assert code == 1 and "the artifact has no input 'ids'; its inputs: input_ids, attention_mask" in \
        report["error"]["message"]


def test_outputs_of_whole_samples_keep_every_element():
    from edgeopt_converters.accuracy import collect_outputs
    from edgeopt_converters.source.tensors import Dataset

    data = Dataset({"x": np.zeros((3, 1, 4), np.float32)}, None, "test", whole=True)
    outputs = collect_outputs(lambda feed: [np.ones((1, 5)), np.ones((2, 1, 8)), np.float32(3)], data, 1)
    # a batch-of-1 output stacks by its batch axis; a state [2, 1, 8] and a scalar get a sample axis
    assert [o.shape for o in outputs] == [(3, 5), (3, 2, 1, 8), (3,)]


def test_calibration_files_of_several_shapes_are_fed_each_at_its_own(tmp_path):
    from edgeopt_converters.source.tensors import DatasetParts, load_datasets

    tokens = [InputSpec("ids", (1, -1), "int64", dim_names=("batch", "seq"))]
    for length in (4, 7, 4):
        np.save(tmp_path / f"c{length}-{len(list(tmp_path.iterdir()))}.npy", np.ones((3, length), np.int64))
    files = sorted(tmp_path.iterdir())
    same = load_datasets([f for f in files if f.name.startswith("c4")], tokens, "calibration", False)
    assert not isinstance(same, DatasetParts) and same.size == 6  # same shapes: joined
    parts = load_datasets(files, tokens, "calibration", False)
    assert isinstance(parts, DatasetParts) and parts.size == 9
    assert sorted(f["ids"].shape[1] for f, _ in parts.batches(1)) == [4] * 6 + [7] * 3
    assert parts.subset(slice(None, 4)).size == 4
    with pytest.raises(UserError, match="give evaluation data of one shape per input"):
        load_datasets(files, tokens, "eval-data", True)


def test_tensorrt_profiles_span_the_shapes_the_data_held(tmp_path, nets_path):
    """min/opt/max of a dynamic axis: the smallest calibration length, the validated one, the largest."""
    import edgeopt
    from edgeopt_agent.bench.spec import BenchmarkSpec
    from edgeopt_agent.wire import check_input_description
    from edgeopt_agent.runners.tensorrt.build import profile_shapes
    from edgeopt_converters.manifest import bench_inputs

    options = _tokens(tmp_path, nets_path)
    manifest = edgeopt.convert(options.pop("model"), device="x86-64", output_dir=tmp_path / "out", precisions=["fp32"],
                               time_on_host=False, **options)
    (artifact,) = manifest["artifacts"]
    described = check_input_description(bench_inputs(artifact))
    ids = next(d for d in described if d["name"] == "input_ids")
    assert (ids["min_shape"], ids["shape"], ids["max_shape"]) == ([1, 6], [1, 20], [1, 20])
    spec = BenchmarkSpec(artifact=tmp_path / "out" / artifact["path"], runtime="tensorrt", inputs=described)
    runner = spec.runner_options()
    shapes = profile_shapes([("input_ids", (-1, -1))], max_batch=1, known=runner["input_shapes"],
                            ranges=runner["input_ranges"])
    assert shapes == [("input_ids", (1, 6), (1, 20), (1, 20))]


def test_a_shape_range_must_bound_its_shape():
    from edgeopt_agent.errors import UserError
    from edgeopt_agent.wire import check_input_description

    ok = check_input_description([{"name": "x", "shape": [1, 8], "min_shape": [1, 4], "max_shape": [1, 16]}])
    assert ok[0]["min_shape"] == [1, 4]
    for bad in ({"min_shape": [1, 9]}, {"max_shape": [1, 7]}, {"min_shape": [4]}, {"max_shape": "1,16"}):
        with pytest.raises(UserError, match="must list 2 integers bounding its shape"):
            check_input_description([{"name": "x", "shape": [1, 8], **bad}])
