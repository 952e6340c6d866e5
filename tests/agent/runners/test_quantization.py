"""Affine quantization arithmetic on known values."""
from __future__ import annotations

import numpy as np

from edgeopt_agent.runners import Quantization, dequantize, quantize


def test_quantize_rounds_to_nearest_and_adds_zero_point():
    q = Quantization(scale=0.5, zero_point=-3)
    got = quantize(np.array([0.0, 0.2, 0.3, 1.0, -1.0]), q, "int8")
    # 0/0.5=0 -> -3; 0.4 -> 0 -> -3; 0.6 -> 1 -> -2; 2 -> -1; -2 -> -5
    np.testing.assert_array_equal(got, np.array([-3, -3, -2, -1, -5], dtype=np.int8))
    assert got.dtype == np.int8


def test_quantize_clips_to_the_integer_range():
    q = Quantization(scale=0.1, zero_point=0)
    np.testing.assert_array_equal(quantize(np.array([100.0, -100.0]), q, "int8"), [127, -128])
    np.testing.assert_array_equal(quantize(np.array([100.0, -100.0]), Quantization(0.1, 128), "uint8"), [255, 0])


def test_dequantize_inverts_quantize_within_half_a_step():
    q = Quantization(scale=0.02, zero_point=5)
    values = np.linspace(-2.0, 2.0, 101, dtype=np.float32)
    back = dequantize(quantize(values, q, "int8"), q)
    assert back.dtype == np.float32
    assert np.max(np.abs(back - values)) <= q.scale / 2 + 1e-6


def test_dequantize_known_values():
    q = Quantization(scale=0.25, zero_point=10)
    np.testing.assert_array_equal(dequantize(np.array([10, 14, 6], np.int8), q), np.array([0.0, 1.0, -1.0], np.float32))
