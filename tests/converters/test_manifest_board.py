"""Each manifest artifact carries how its board runs it ("board": runtime, engine precision, threads,
fallback runtimes, the on-target engine build), taken from the device profile; `board_options`
turns it into benchmark options with the user's overrides, and an older manifest without it still
reads."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgeopt_agent.errors import UserError
from edgeopt_agent.profiles import load_profile
from edgeopt_agent.runtimes import BY_NAME
from edgeopt_converters import manifest
from edgeopt_converters.manifest import board_options
from edgeopt_converters.precision.architecture import architecture_variants
from edgeopt_converters.recipe import board_config, make_plan, with_int8

NETS = Path(__file__).resolve().parent / "nets.py"


def _convert(tmp_path_factory, device: str, formats):
    pytest.importorskip("torch", reason="converting needs the convert extra (torch)")
    import edgeopt

    outdir = tmp_path_factory.mktemp(f"board-{device}")
    edgeopt.convert(f"{NETS}:small_cnn", device=device, output_dir=outdir, input_shape="1,3,16,16",
                    formats=formats, time_on_host=False)
    return manifest.read(outdir)


@pytest.fixture(scope="module")
def x86(tmp_path_factory):
    return _convert(tmp_path_factory, "x86-64", ("onnx",))


@pytest.fixture(scope="module")
def rpi4(tmp_path_factory):
    pytest.importorskip("litert_torch", reason="TFLite export needs the tflite extra (litert-torch)")
    return _convert(tmp_path_factory, "rpi4", ("onnx", "tflite"))


@pytest.fixture(scope="module")
def jetson(tmp_path_factory):
    return _convert(tmp_path_factory, "jetson-orin-nano", ("onnx",))


def _expected_runtime(profile, fmt):
    return next(r for r in profile.runtimes if fmt in BY_NAME[r].formats)


@pytest.mark.parametrize("name", ["x86", "rpi4"])
def test_a_cpu_board_runs_each_artifact_on_the_profiles_runtime_for_its_format(name, request):
    read = request.getfixturevalue(name)
    profile = load_profile(read.data["device"])
    formats = {a.format for a in read.artifacts}
    assert formats == ({"onnx"} if name == "x86" else {"onnx", "tflite"})
    for artifact in read.artifacts:
        board = artifact.data["board"]
        assert board == {"runtime": _expected_runtime(profile, artifact.format), "precision": None,
                         "threads": profile.default_threads, "fallback_runtimes": []}
        # what deploy sends and `edgeopt bench OUTDIR` uses
        assert board_options(artifact.data) == {"runtime": board["runtime"], "threads": profile.default_threads}


def test_a_jetson_builds_a_tensorrt_engine_on_the_board_from_each_onnx_artifact(jetson):
    profile = load_profile("jetson-orin-nano")
    assert [a.key for a in jetson.artifacts] == ["onnx-fp32", "onnx-fp16", "onnx-int8"]
    for artifact in jetson.artifacts:
        board = artifact.data["board"]
        # the engine is built at the artifact's own precision: FP32/FP16 from the float ONNX, INT8 from the QDQ ONNX
        # what the board reads from the job to build it; nothing is planned on the host that the board would not read
        assert board == {"runtime": "tensorrt", "precision": artifact.precision, "threads": profile.default_threads,
                         "fallback_runtimes": ["onnxruntime"]}
        assert "on_target_steps" not in artifact.data
        assert (jetson.folder / artifact.path).stat().st_size == artifact.size_bytes  # the host steps wrote the file
        assert board_options(artifact.data) == {"runtime": "tensorrt", "precision": artifact.precision,
                                                "threads": 6, "fallback_runtimes": ["onnxruntime"]}


def test_an_int8_onnx_not_in_tensorrts_layout_runs_on_onnxruntime():
    profile = load_profile("jetson-orin-nano")
    static = next(a for a in make_plan(profile).artifacts if a.key == "onnx-int8")
    assert board_config(profile, static)["runtime"] == "tensorrt"
    asymmetric = with_int8(static, type(static.int8)("uint8", "int8", reduce_range=True))
    assert board_config(profile, asymmetric) == {"runtime": "onnxruntime", "precision": None, "threads": 6,
                                                 "fallback_runtimes": []}


def test_a_dynamic_int8_variant_is_not_planned_for_an_engine():
    from edgeopt_converters.precision.architecture import Architecture

    profile = load_profile("x86-64")
    plan = make_plan(profile)
    [dynamic] = architecture_variants(plan, Architecture("transformer", "attention blocks"), profile)
    assert board_config(profile, dynamic)["runtime"] == "onnxruntime"


def test_overrides_replace_the_planned_configuration():
    entry = {"key": "onnx-fp16", "board": {"runtime": "tensorrt", "precision": "fp16", "threads": 6,
                                           "fallback_runtimes": ["onnxruntime"], "engine_build": None}}
    assert board_options(entry, threads=2) == {"runtime": "tensorrt", "precision": "fp16", "threads": 2,
                                               "fallback_runtimes": ["onnxruntime"]}
    assert board_options(entry, precision="fp32")["precision"] == "fp32"
    # another runtime: the planned engine precision and fallbacks do not apply to it
    assert board_options(entry, runtime="onnxruntime") == {"runtime": "onnxruntime", "threads": 6}
    assert board_options(entry, runtime="onnxruntime-tensorrt", precision="int8") == {
        "runtime": "onnxruntime-tensorrt", "precision": "int8", "threads": 6}
    cpu = {"key": "onnx-int8", "board": {"runtime": "onnxruntime", "precision": None, "threads": 4}}
    with pytest.raises(UserError, match="artifact 'onnx-int8' runs on onnxruntime: leave the precision out"):
        board_options(cpu, precision="int8")


def test_a_manifest_from_before_the_board_configuration_gives_only_the_overrides():
    old = {"key": "onnx-fp32", "path": "model.fp32.onnx"}
    assert board_options(old) == {}
    assert board_options(old, threads=3) == {"threads": 3}
    assert board_options(old, runtime="onnxruntime") == {"runtime": "onnxruntime"}


@pytest.mark.parametrize("board", [["tensorrt"], {"runtime": "openvino"}, {"threads": 0},
                                   {"fallback_runtimes": "onnxruntime"}, {"precision": "int4"}])
def test_a_board_configuration_edgeopt_does_not_know_is_refused(board):
    with pytest.raises(UserError, match="re-run `edgeopt convert`"):
        board_options({"key": "onnx-fp32", "board": board})


def test_an_old_manifest_file_still_reads(tmp_path, x86):
    data = json.loads(x86.path.read_text())
    for entry in data["artifacts"]:
        del entry["board"]
        (tmp_path / entry["path"]).write_bytes((x86.folder / entry["path"]).read_bytes())
    manifest.write(data, tmp_path / manifest.FILE_NAME)
    read = manifest.read(tmp_path)
    assert [a.key for a in read.artifacts] == [a.key for a in x86.artifacts]
    assert all(board_options(a.data) == {} for a in read.artifacts)
