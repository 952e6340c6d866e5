"""ONNX Runtime runner on real ONNX files built with the onnx helper API."""
from __future__ import annotations

import numpy as np
import pytest

from edgeopt_agent.runners import ArtifactError, InputError, UnsupportedModelError, open_runner


def test_infer_matches_numpy_reference(dynamic_onnx, matmul_weights):
    x = np.random.default_rng(1).standard_normal((3, 16)).astype(np.float32)
    with open_runner(dynamic_onnx, threads=1) as runner:
        y = runner.infer({"x": x})["y"]
    np.testing.assert_allclose(y, np.maximum(x @ matmul_weights, 0), rtol=1e-5, atol=1e-5)


def test_metadata_keeps_dynamic_dims_and_dtypes(dynamic_onnx):
    with open_runner(dynamic_onnx) as runner:
        (x,), (y,) = runner.inputs(), runner.outputs()
        described = runner.describe()
    assert (x.name, x.shape, x.dtype, x.quantization) == ("x", ("N", 16), "float32", None)
    assert (y.name, y.shape) == ("y", ("N", 8))
    assert described["runtime"] == "onnxruntime"
    assert described["providers"][-1] == "CPUExecutionProvider"


def test_float64_input_is_cast_and_bound_call_returns_raw_outputs(dynamic_onnx, matmul_weights):
    x = np.ones((2, 16))
    with open_runner(dynamic_onnx, threads=2) as runner:
        prepared = runner.prepare({"x": x})
        assert prepared["x"].dtype == np.float32
        outputs = runner.bind(prepared)()
    assert len(outputs) == 1 and outputs[0].shape == (2, 8)
    np.testing.assert_allclose(outputs[0], np.maximum(x.astype(np.float32) @ matmul_weights, 0), rtol=1e-5)


@pytest.mark.parametrize(
    "feeds, message",
    [
        ({"x": np.ones((2, 15), np.float32)}, "fixed size 16 on axis 1"),
        ({"x": np.ones((16,), np.float32)}, "rank 2"),
        ({"wrong": np.ones((1, 16), np.float32)}, "missing 'x'; unknown 'wrong'"),
        ({"x": np.ones((1, 16), np.complex64)}, "takes float32, got complex64"),
    ],
)
def test_bad_feeds_are_named(dynamic_onnx, feeds, message):
    with open_runner(dynamic_onnx) as runner, pytest.raises(InputError, match=message):
        runner.infer(feeds)


def test_fixed_batch_model_rejects_another_batch(fixed_onnx):
    with open_runner(fixed_onnx) as runner:
        assert runner.inputs()[0].shape == (1, 16)
        assert runner.infer({"x": np.ones((1, 16), np.float32)})["y"].shape == (1, 8)
        with pytest.raises(InputError, match="fixed size 1 on axis 0"):
            runner.infer({"x": np.ones((4, 16), np.float32)})


def test_corrupt_file_is_a_bad_artifact(tmp_path):
    path = tmp_path / "corrupt.onnx"
    path.write_bytes(b"\x08\x07garbage that is not a protobuf model")
    runner = open_runner(path)
    with pytest.raises(ArtifactError, match="not a valid ONNX model"):
        runner.load()
    assert not runner.loaded


def test_unknown_operator_is_unsupported(tmp_path):
    onnx = pytest.importorskip("onnx", reason="building test models needs the onnx package")
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("NoSuchOperator", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    path = tmp_path / "unknown_op.onnx"
    onnx.save(model, str(path))
    with pytest.raises(UnsupportedModelError, match="NoSuchOperator"):
        open_runner(path).load()


def test_inference_before_load_is_a_programming_error(dynamic_onnx):
    runner = open_runner(dynamic_onnx)
    with pytest.raises(RuntimeError, match="load"):
        runner.infer({"x": np.ones((1, 16), np.float32)})


def test_close_releases_and_reload_works(dynamic_onnx):
    runner = open_runner(dynamic_onnx).load()
    runner.close()
    assert not runner.loaded
    assert runner.load().infer({"x": np.ones((1, 16), np.float32)})["y"].shape == (1, 8)
