"""Everything up to the TensorRT boundary that decides how an engine is built and how a job asks for it:
runtime names, precision rules, builder flags, optimization profiles, ONNX Runtime's GPU provider
options, the benchmark spec's new fields and the summaries of GPU timings."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from edgeopt_agent.bench import BenchmarkSpec
from edgeopt_agent.bench.stats import device_timing_fields
from edgeopt_agent.errors import UserError
from edgeopt_agent.runners import UnsupportedModelError, resolve_runtime
from edgeopt_agent.runners.formats import check_precision
from edgeopt_agent.runtimes import ORT_PROVIDERS
from edgeopt_agent.runners.onnxruntime.runner import choose_providers
from edgeopt_agent.runners.onnxruntime.gpu_runner import provider_options
from edgeopt_agent.runners.tensorrt.build import create, plan_precision, profile_shapes
from edgeopt_agent.runners.tensorrt.runner import activation_memory_mb

ALL_PROVIDERS = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]


# -- runtime names ------------------------------------------------------------------------------------


def test_onnx_files_take_native_tensorrt_and_onnxruntime_gpu_providers(dynamic_onnx, tmp_path):
    for runtime in ("tensorrt", "onnxruntime-tensorrt", "onnxruntime-cuda", "onnxruntime"):
        assert resolve_runtime(dynamic_onnx, runtime) == runtime
    tflite = tmp_path / "m.tflite"  # the runtime is chosen from the extension; nothing is parsed
    tflite.write_bytes(b"\x1c\x00\x00\x00TFL3")
    with pytest.raises(UnsupportedModelError, match="runtime 'tensorrt' cannot run a .tflite file; use: tflite"):
        resolve_runtime(tflite, "tensorrt")


def test_each_onnxruntime_gpu_runtime_insists_on_its_provider_and_falls_back_below_it():
    assert ORT_PROVIDERS == {"onnxruntime-tensorrt": "TensorrtExecutionProvider", "onnxruntime-cuda": "CUDAExecutionProvider"}
    assert choose_providers(ALL_PROVIDERS, ORT_PROVIDERS["onnxruntime-tensorrt"]) == ALL_PROVIDERS
    assert choose_providers(ALL_PROVIDERS, ORT_PROVIDERS["onnxruntime-cuda"]) == ALL_PROVIDERS[1:]


# -- precision ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("runtime", ["tensorrt", "onnxruntime-tensorrt", None])
def test_precision_is_for_runtimes_that_build_an_engine(runtime):
    check_precision(runtime, "int8")
    check_precision(runtime, None)


@pytest.mark.parametrize("runtime", ["onnxruntime", "onnxruntime-cuda", "tflite"])
def test_precision_is_refused_where_the_artifact_decides(runtime):
    with pytest.raises(UnsupportedModelError, match=f"with runtime '{runtime}' the artifact's own precision is what runs"):
        check_precision(runtime, "fp16")
    with pytest.raises(UnsupportedModelError, match="unknown precision 'int4'"):
        check_precision("tensorrt", "int4")


@pytest.mark.parametrize(
    "requested, model, fast_fp16, fast_int8, precision, flags",
    [
        (None, "fp32", True, True, "fp32", ()),
        ("fp16", "fp32", True, True, "fp16", ("FP16",)),
        (None, "fp16", True, False, "fp16", ("FP16",)),
        (None, "int8", True, True, "int8", ("INT8", "FP16")),  # QDQ: explicit INT8, the rest in FP16
        ("int8", "int8", None, None, "int8", ("INT8", "FP16")),  # TensorRT 10.5+: no platform_has_fast_*
        ("int8", "int8", False, True, "int8", ("INT8",)),
    ],
)
def test_builder_flags_for_each_precision(requested, model, fast_fp16, fast_int8, precision, flags):
    plan = plan_precision(requested, model, fast_fp16, fast_int8)
    assert (plan.precision, plan.flags) == (precision, flags)


def test_int8_comes_only_from_a_qdq_model():
    with pytest.raises(UnsupportedModelError, match="precision int8 needs an INT8 QDQ ONNX .* m.onnx has no Q/DQ nodes"):
        plan_precision("int8", "fp32", True, True, "m.onnx")


@pytest.mark.parametrize("requested", ["fp32", "fp16"])
def test_a_qdq_model_builds_only_at_int8(requested):
    with pytest.raises(UnsupportedModelError, match=f"m.int8.onnx holds Q/DQ nodes .* for {requested}, give the FP32 ONNX"):
        plan_precision(requested, "int8", True, True, "m.int8.onnx")


def test_a_gpu_without_int8_refuses_int8_and_warns_about_fp16():
    # Jetson Nano's Maxwell GPU: FP16 yes, INT8 no.
    with pytest.raises(UnsupportedModelError, match="no fast INT8 path .* build at fp16 instead"):
        plan_precision("int8", "int8", True, False)
    assert plan_precision("fp16", "fp32", True, False).notes == ()
    # A desktop Pascal GPU (sm_61): INT8 yes, fast FP16 no.
    notes = plan_precision("fp16", "fp32", False, True).notes
    assert notes == ("this GPU has no fast FP16: TensorRT may choose FP32 kernels for FP16 layers",)


@pytest.mark.parametrize("model", ["fp32", "fp16", "int8"])
def test_strongly_typed_tensorrt_builds_each_model_at_its_own_precision_without_flags(model):
    # TensorRT 11: no BuilderFlag.FP16/INT8 and no platform_has_fast_* (read off the 11.4 bindings).
    plan = plan_precision(None, model, None, None, strongly_typed=True)
    assert (plan.precision, plan.flags) == (model, ())
    assert plan_precision(model, model, None, None, strongly_typed=True).flags == ()


def test_strongly_typed_int8_says_the_unquantized_layers_stay_fp32():
    (note,) = plan_precision("int8", "int8", None, None, strongly_typed=True).notes
    assert "layers outside Q/DQ pairs run at the ONNX file's float type (FP32" in note


@pytest.mark.parametrize(
    "requested, model, artifact",
    [("fp16", "fp32", "the FP16 ONNX artifact"), ("fp32", "fp16", "the FP32 ONNX artifact")],
)
def test_strongly_typed_tensorrt_asks_for_the_artifact_of_the_wanted_precision(requested, model, artifact):
    with pytest.raises(UnsupportedModelError, match=f"strongly typed .* m.onnx builds only at its own precision, {model}; "
                                                    f"for {requested}, give {artifact}"):
        plan_precision(requested, model, None, None, "m.onnx", strongly_typed=True)


def test_strongly_typed_tensorrt_keeps_the_qdq_rules():
    with pytest.raises(UnsupportedModelError, match="precision int8 needs an INT8 QDQ ONNX"):
        plan_precision("int8", "fp32", None, None, strongly_typed=True)
    with pytest.raises(UnsupportedModelError, match="holds Q/DQ nodes"):
        plan_precision("fp16", "int8", None, None, strongly_typed=True)


def test_activation_memory_prefers_the_v2_figure_and_admits_not_knowing():
    mib = 1 << 20
    assert activation_memory_mb(SimpleNamespace(device_memory_size_v2=3 * mib, device_memory_size=2 * mib)) == 3.0
    assert activation_memory_mb(SimpleNamespace(device_memory_size=2 * mib)) == 2.0  # TensorRT 8.x
    assert activation_memory_mb(SimpleNamespace()) is None


def test_a_builder_or_runtime_tensorrt_cannot_create_is_refused_with_its_reason():
    said = SimpleNamespace(errors=lambda: ["CUDA initialization failure with error: 35"])
    silent = SimpleNamespace(errors=lambda: [])

    def returns_null(logger):
        return None

    def pybind_null(logger):  # how the bindings report a null factory result
        raise TypeError("pybind11::init(): factory function returned nullptr")

    with pytest.raises(UnsupportedModelError, match=r"could not create a runtime \(is the GPU usable\?\): CUDA initialization failure"):
        create(pybind_null, said, "runtime")
    with pytest.raises(UnsupportedModelError, match=r"could not create a builder .*: factory function returned nullptr"):
        create(pybind_null, silent, "builder")
    with pytest.raises(UnsupportedModelError, match=r"could not create a builder .*: no reason given"):
        create(returns_null, silent, "builder")


# -- optimization profile --------------------------------------------------------------------------------


def test_a_dynamic_batch_axis_gets_a_profile_up_to_the_largest_batch():
    shapes = profile_shapes([("image", (-1, 3, 224, 224)), ("scale", (1, 1))], max_batch=8)
    assert shapes == [("image", (1, 3, 224, 224), (8, 3, 224, 224), (8, 3, 224, 224))]
    assert profile_shapes([("image", (1, 3, 224, 224))], max_batch=8) == []


def test_other_dynamic_axes_take_the_described_shape_or_are_refused_with_what_to_do():
    with pytest.raises(UnsupportedModelError, match=r"input 'tokens' has dynamic sizes on axes \[1\] .* "
                                                    r"\(edgeopt bench --input-shape tokens=\.\.\."):
        profile_shapes([("tokens", (-1, -1))], max_batch=1)
    shapes = profile_shapes([("tokens", (-1, -1)), ("state", (2, -1, 8))], max_batch=4,
                            known={"tokens": [1, 128], "state": [2, 1, 8]})
    # batch 1..4; the sequence at the length validated; a state's dynamic axis 1 is not a batch axis
    assert shapes == [("tokens", (1, 128), (4, 128), (4, 128)), ("state", (2, 1, 8), (2, 1, 8), (2, 1, 8))]


# -- ONNX Runtime's TensorRT provider ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "precision, fp16, int8", [(None, False, False), ("fp32", False, False), ("fp16", True, False), ("int8", True, True)]
)
def test_tensorrt_provider_options_follow_the_precision_and_cache_under_the_engine_folder(tmp_path, precision, fp16, int8):
    options = provider_options("TensorrtExecutionProvider", precision, tmp_path)
    assert options == {
        "trt_fp16_enable": fp16,
        "trt_int8_enable": int8,
        "trt_engine_cache_enable": True,
        "trt_engine_cache_path": str(tmp_path / "onnxruntime-tensorrt"),
    }


def test_the_cuda_provider_takes_no_options_from_edgeopt(tmp_path):
    assert provider_options("CUDAExecutionProvider", None, tmp_path) == {}


# -- benchmark spec --------------------------------------------------------------------------------------------


def test_spec_carries_precision_and_engine_folder_to_the_runner(tmp_path):
    spec = BenchmarkSpec(artifact="m.onnx", runtime="tensorrt", precision="int8", engine_cache_dir=tmp_path,
                         batch_sizes=[1, 4, 2])
    assert BenchmarkSpec.from_dict(spec.to_dict()) == spec
    assert spec.runner_options() == {"precision": "int8", "cache_dir": str(tmp_path), "max_batch": 4,
                                     "input_shapes": None}
    ort_trt = BenchmarkSpec(artifact="m.onnx", runtime="onnxruntime-tensorrt", precision="fp16")
    assert ort_trt.runner_options() == {"precision": "fp16", "cache_dir": None}
    assert BenchmarkSpec(artifact="m.onnx", runtime="tensorrt").runner_options()["max_batch"] == 1
    assert BenchmarkSpec(artifact="m.onnx").runner_options() == {}


@pytest.mark.parametrize(
    "options, message",
    [
        ({"precision": "int4"}, "unknown precision 'int4'; choose from fp32, fp16, int8"),
        ({"precision": "fp16", "runtime": "onnxruntime"}, "precision applies to runtimes that build an engine"),
        ({"precision": "fp16", "runtime": "tflite"}, "not to 'tflite'"),
    ],
)
def test_spec_refuses_a_precision_it_cannot_act_on(options, message):
    with pytest.raises(UserError, match=message):
        BenchmarkSpec(artifact="m.onnx", **options)


def test_a_precision_for_the_default_onnx_runtime_is_refused_before_anything_runs(dynamic_onnx):
    from edgeopt_agent.bench import run_benchmark

    with pytest.raises(UserError, match="with runtime 'onnxruntime' the artifact's own precision is what runs"):
        run_benchmark(BenchmarkSpec(artifact=str(dynamic_onnx), precision="fp16", idle_s=0))


# -- GPU timings ---------------------------------------------------------------------------------------------------


def test_gpu_timings_are_summarized_like_latency():
    timings = {"gpu_compute": [1.0, 2.0, 3.0, 4.0], "h2d": [0.1] * 4, "d2h": [0.2] * 4, "gpu_latency": [1.3, 2.3, 3.3, 4.3],
               "enqueue": [0.05] * 4}
    fields = device_timing_fields(timings)
    assert set(fields) == {"gpu_compute_ms", "h2d_ms", "d2h_ms", "gpu_latency_ms", "enqueue_ms"}
    assert fields["gpu_compute_ms"]["p50"] == 2.0 and fields["gpu_compute_ms"]["p99"] == 4.0
    assert fields["gpu_compute_ms"]["mean"] == 2.5 and fields["h2d_ms"]["max"] == 0.1
    assert device_timing_fields({"gpu_compute": [], "h2d": []}) == {}


@pytest.mark.parametrize("runtime", ["onnxruntime-tensorrt", "onnxruntime-cuda"])
def test_a_gpu_provider_that_does_not_start_is_refused_not_replaced(dynamic_onnx, tmp_path, monkeypatch, runtime):
    """A GPU build of onnxruntime lists its providers even on a machine whose CUDA or TensorRT libraries
    are missing, then quietly runs on the next one. Here this CPU build is made to list them: the
    session really falls back to the CPU, and the runner must refuse rather than report CPU numbers."""
    ort = pytest.importorskip("onnxruntime")
    provider = ORT_PROVIDERS[runtime]
    if provider in ort.get_available_providers():
        pytest.skip(f"this onnxruntime build really has {provider}")
    from edgeopt_agent.runners import open_runner

    monkeypatch.setattr(ort, "get_available_providers", lambda: ALL_PROVIDERS)
    runner = open_runner(dynamic_onnx, runtime=runtime, precision="fp16" if runtime == "onnxruntime-tensorrt" else None,
                         cache_dir=tmp_path)
    with pytest.warns(UserWarning, match="is not in available provider names"):
        with pytest.raises(UnsupportedModelError, match=f"could not start {provider} .* fell back to CPUExecutionProvider"):
            runner.load()
    assert not runner.loaded
