"""Which runner a file gets, and the errors for files that are not models."""
from __future__ import annotations

import shutil

import pytest

from edgeopt_agent.runners import (
    ArtifactError,
    InputError,
    UnsupportedModelError,
    detect_format,
    open_runner,
    resolve_runtime,
)


def test_runtime_follows_the_extension(dynamic_onnx, int8_tflite):
    assert resolve_runtime(dynamic_onnx) == "onnxruntime"
    assert resolve_runtime(int8_tflite[0]) == "tflite"
    assert open_runner(dynamic_onnx).runtime == "onnxruntime"
    assert open_runner(int8_tflite[0]).runtime == "tflite"


def test_tflite_is_recognised_by_its_file_identifier(int8_tflite, tmp_path):
    renamed = tmp_path / "model.bin"
    shutil.copy(int8_tflite[0], renamed)
    assert detect_format(renamed) == "tflite"


def test_missing_file(tmp_path):
    with pytest.raises(ArtifactError, match="artifact not found"):
        open_runner(tmp_path / "absent.onnx")


def test_not_a_model(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    with pytest.raises(ArtifactError, match="not a model: expected a .onnx, .tflite"):
        open_runner(path)


def test_runtime_that_cannot_run_the_format(dynamic_onnx):
    with pytest.raises(
        UnsupportedModelError,
        match="cannot run a .onnx file; use: onnxruntime, tensorrt, onnxruntime-tensorrt, onnxruntime-cuda",
    ):
        open_runner(dynamic_onnx, runtime="tflite")
    with pytest.raises(UnsupportedModelError, match="unknown runtime 'openvino'"):
        open_runner(dynamic_onnx, runtime="openvino")


@pytest.mark.parametrize(
    "runtime, provider",
    [("onnxruntime-tensorrt", "TensorrtExecutionProvider"), ("onnxruntime-cuda", "CUDAExecutionProvider")],
)
def test_onnxruntime_gpu_runtimes_need_their_provider_in_this_build(dynamic_onnx, runtime, provider):
    ort = pytest.importorskip("onnxruntime")
    if provider in ort.get_available_providers():
        pytest.skip(f"this onnxruntime build has {provider}: nothing to refuse")
    with pytest.raises(UnsupportedModelError, match=f"no {provider}; available: .*CPUExecutionProvider"):
        open_runner(dynamic_onnx, runtime=runtime)


def test_threads_must_be_positive(dynamic_onnx):
    with pytest.raises(InputError, match="threads must be at least 1"):
        open_runner(dynamic_onnx, threads=0)
