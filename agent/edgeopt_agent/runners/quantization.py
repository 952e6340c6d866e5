"""Affine (scale, zero-point) conversion between real values and a quantized tensor's integers."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Quantization:
    """Per-tensor affine quantization: real = scale * (q - zero_point)."""

    scale: float
    zero_point: int


def quantize(values: np.ndarray, q: Quantization, dtype: str) -> np.ndarray:
    """Real values to the integer type `dtype`, rounded to nearest and clipped to its range."""
    info = np.iinfo(dtype)
    scaled = np.rint(np.asarray(values, dtype=np.float64) / q.scale) + q.zero_point
    return np.clip(scaled, info.min, info.max).astype(dtype)


def dequantize(values: np.ndarray, q: Quantization) -> np.ndarray:
    return ((np.asarray(values).astype(np.float32) - np.float32(q.zero_point)) * np.float32(q.scale)).astype(
        np.float32
    )
