"""TFLite runner on a real int8 model (int8 input and output) made with litert-torch."""
from __future__ import annotations

import numpy as np
import pytest

from edgeopt_agent.runners import InputError, dequantize, open_runner, quantize


def test_quantized_io_carries_scale_and_zero_point(int8_tflite):
    path, _, _ = int8_tflite
    with open_runner(path, threads=1) as runner:
        (x,), (y,) = runner.inputs(), runner.outputs()
        described = runner.describe()
    assert x.dtype == "int8" and y.dtype == "int8"
    assert x.quantization is not None and x.quantization.scale > 0
    assert y.quantization is not None and y.quantization.scale > 0
    assert x.shape == (1, 3, 8, 8)
    assert described["runtime"] == "tflite" and described["xnnpack"] is True
    assert described["runtime_package"] in ("ai-edge-litert", "tflite-runtime", "tensorflow")


def test_real_inputs_are_quantized_and_outputs_dequantized(int8_tflite):
    path, _, example = int8_tflite
    x = example.numpy()
    with open_runner(path, threads=1) as runner:
        (xi,), (yi,) = runner.inputs(), runner.outputs()
        prepared = runner.prepare({xi.name: x})
        expected_q = quantize(x, xi.quantization, "int8")
        np.testing.assert_array_equal(prepared[xi.name], expected_q)
        raw = runner.bind(prepared)()[0]
        assert raw.dtype == np.int8
        real = runner.infer({xi.name: x})[yi.name]
    assert real.dtype == np.float32
    np.testing.assert_array_equal(real, dequantize(raw, yi.quantization))


def test_int8_model_tracks_the_float_model(int8_tflite):
    torch = pytest.importorskip("torch")
    path, module, _ = int8_tflite
    x = torch.rand(1, 3, 8, 8, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want = module(x).numpy()
    with open_runner(path, threads=1) as runner:
        (xi,), (yi,) = runner.inputs(), runner.outputs()
        got = runner.infer({xi.name: x.numpy()})[yi.name]
    # int8 error: a few output quantization steps plus the input's rounding carried through
    assert np.max(np.abs(got - want)) < 12 * yi.quantization.scale + 0.05


def test_int8_array_passes_through_untouched(int8_tflite):
    path, _, _ = int8_tflite
    raw = np.random.default_rng(0).integers(-128, 127, (1, 3, 8, 8), dtype=np.int8)
    with open_runner(path) as runner:
        name = runner.inputs()[0].name
        np.testing.assert_array_equal(runner.prepare({name: raw})[name], raw)


def test_fixed_shape_cannot_be_resized(int8_tflite):
    path, _, _ = int8_tflite
    with open_runner(path) as runner:
        name = runner.inputs()[0].name
        with pytest.raises(InputError, match="fixed size 1 on axis 0"):
            runner.prepare({name: np.zeros((2, 3, 8, 8), np.float32)})


def test_xnnpack_can_be_turned_off(int8_tflite):
    path, _, example = int8_tflite
    with open_runner(path, threads=1, xnnpack=False) as runner:
        assert runner.describe()["xnnpack"] is False
        out = runner.infer({runner.inputs()[0].name: example.numpy()})
    assert next(iter(out.values())).shape == (1, 5)


def test_outputs_are_identical_across_calls(int8_tflite):
    path, _, example = int8_tflite
    with open_runner(path, threads=2) as runner:
        name = runner.inputs()[0].name
        call = runner.bind(runner.prepare({name: example.numpy()}))
        first = call()[0].copy()
        for _ in range(5):
            np.testing.assert_array_equal(call()[0], first)


def test_dynamic_batch_input_is_resized_between_calls(dynamic_batch_tflite):
    x = np.random.default_rng(2).random((5, 3, 8, 8), dtype=np.float32)
    with open_runner(dynamic_batch_tflite, threads=1) as runner:
        (xi,), (yi,) = runner.inputs(), runner.outputs()
        assert xi.shape == (None, 3, 8, 8)
        five = runner.infer({xi.name: x})[yi.name]
        three = runner.infer({xi.name: x[:3]})[yi.name]
    assert five.shape == (5, 4, 6, 6) and three.shape == (3, 4, 6, 6)
    np.testing.assert_allclose(three, five[:3], rtol=1e-5, atol=1e-6)
