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


def test_rpi4_recipe_builds_onnx_and_tflite_fp32_first():
    plan = make_plan(load_profile("rpi4"))
    assert keys(plan) == ["onnx-fp32", "tflite-fp32", "onnx-int8", "tflite-int8"]


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
    assert keys(plan) == ["onnx-fp32", "onnx-int8"]
    assert any("TFLite artifacts skipped" in n for n in plan.notes)
    with pytest.raises(UserError, match="torch.export"):
        make_plan(load_profile("rpi4"), formats=["tflite"], source_kind="onnx")
