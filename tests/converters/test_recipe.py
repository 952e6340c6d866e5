from dataclasses import replace

import pytest

from edgeopt_agent.errors import UserError
from edgeopt_agent.profiles import load_profile
from edgeopt_converters.recipe import make_plan, onnx_int8_options


def keys(plan):
    return [a.key for a in plan.artifacts]


def test_x86_without_vnni_gets_u8s8_with_reduce_range():
    options = onnx_int8_options(load_profile("x86-64"))
    assert (options.activation_type, options.weight_type, options.reduce_range) == ("uint8", "int8", True)


def test_x86_with_vnni_drops_reduce_range():
    profile = load_profile("x86-64")
    vnni = replace(profile, cpu=replace(profile.cpu, isa_features=profile.cpu.isa_features + ("avx512_vnni",)))
    assert onnx_int8_options(vnni).reduce_range is False


def test_arm_gets_s8s8_and_tensorrt_gets_symmetric_activations():
    arm = onnx_int8_options(load_profile("rpi5"))
    assert (arm.activation_type, arm.weight_type, arm.symmetric_activations) == ("int8", "int8", False)
    trt = onnx_int8_options(load_profile("jetson-orin-nano"))
    assert trt.symmetric_activations and trt.activation_type == "int8"


def test_rpi4_recipe_builds_every_runtimes_fp32_first():
    plan = make_plan(load_profile("rpi4"))
    assert keys(plan) == ["onnx-fp32", "tflite-fp32", "pte-fp32", "ncnn-fp32", "onnx-int8", "tflite-int8", "pte-int8"]
    ncnn = next(a for a in plan.artifacts if a.format == "ncnn")
    assert ncnn.base == "onnx-fp32" and [c.name for c in ncnn.steps] == ["export-ncnn"]


def test_rpi5_adds_ncnn_fp16_for_its_fp16_arithmetic_and_format_overrides_keep_each_formats_precisions():
    plan = make_plan(load_profile("rpi5"))
    assert keys(plan)[-1] == "ncnn-fp16" and "ncnn-fp16" not in keys(make_plan(load_profile("rpi4")))
    assert keys(make_plan(load_profile("rpi5"), formats=["onnx"])) == ["onnx-fp32", "onnx-int8"]
    assert keys(make_plan(load_profile("rpi5"), formats=["ncnn"])) == ["onnx-fp32", "ncnn-fp32", "ncnn-fp16"]
    with pytest.raises(UserError, match="ncnn INT8 is not offered; the formats offer: ncnn fp32/fp16"):
        make_plan(load_profile("rpi5"), formats=["ncnn"], precisions=["int8"])


def test_a_format_whose_host_tools_are_missing_is_skipped_with_the_install_line(monkeypatch):
    from edgeopt_converters.passes.export_executorch import ExportExecuTorch

    monkeypatch.setattr(ExportExecuTorch, "requires", (("edgeopt_no_such_module", "executorch"),))
    plan = make_plan(load_profile("rpi5"))
    assert not [k for k in keys(plan) if k.startswith("pte")]
    assert "ExecuTorch artifacts skipped: the host cannot convert to pte without its tools: " \
           "pip install 'edgeopt[executorch]'" in plan.notes


def test_jetson_nano_recipe_stops_at_fp16_and_says_why():
    plan = make_plan(load_profile("jetson-nano"))
    assert keys(plan) == ["onnx-fp32", "onnx-fp16"]
    assert any("no INT8" in note for note in plan.notes)


def test_overrides_add_the_fp32_baseline_and_reject_unknown_values():
    plan = make_plan(load_profile("rpi4"), formats=["tflite"], precisions=["int8"])
    assert keys(plan) == ["tflite-fp32", "tflite-int8"]
    with pytest.raises(UserError, match="unknown --precision"):
        make_plan(load_profile("rpi4"), precisions=["int4"])


def test_onnx_source_skips_tflite_or_refuses_it_when_asked():
    plan = make_plan(load_profile("rpi4"), source_kind="onnx")
    assert keys(plan) == ["onnx-fp32", "ncnn-fp32", "onnx-int8"]  # ncnn converts the ONNX, not the source
    assert any("TFLite artifacts skipped" in n for n in plan.notes)
    assert any("ExecuTorch artifacts skipped" in n for n in plan.notes)
    with pytest.raises(UserError, match="torch.export"):
        make_plan(load_profile("rpi4"), formats=["tflite"], source_kind="onnx")
