"""Mixed precision's op-type stage: only the multiply-accumulate ops in INT8, every other op in float.

Conv, ConvTranspose, MatMul and Gemm do nearly all of a network's arithmetic, so quantizing only
them keeps nearly all of INT8's speed-up, while the light ops between them (element-wise affine
blocks, HardSwish and other activations, normalisations, Softmax, Concat) stop rounding their
outputs to INT8. Measured on PP-OCRv4's recognizer (AVX-512 VNNI host, U8S8 per-channel QDQ,
minmax): CTC steps changed 12.6 -> 6.6 points with 8-bit weights (13.96 -> 9.48 with 7-bit), at
1.33x FP32 against 1.35x for the whole graph (docs/BENCHMARKS.md).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Dict, Optional, Tuple

from .graph_regions import MAC_OPS
from ..passes.quantize_onnx import OnnxInt8Options

MAC_ONLY_STAGE = "multiply-accumulate ops only"


def mac_op_types(int8: OnnxInt8Options) -> Optional[Tuple[str, ...]]:
    """The op types this stage quantizes; None when the scheme already chooses its op types
    (TensorRT's layout quantizes the inputs of a fixed set)."""
    return None if int8.op_types else MAC_OPS


def mac_only_stage(search, report: Dict[str, Any]) -> None:
    """One attempt with the best float set and calibrator so far, quantizing only MAC ops; later stages
    build on it when it beats the best attempt."""
    ops = mac_op_types(search.best.planned.int8)
    if ops is not None and search.attempt(search.floats, MAC_ONLY_STAGE, op_types=ops):
        report["op_types"] = list(ops)


def restricted(int8: OnnxInt8Options, op_types: Optional[Tuple[str, ...]]) -> OnnxInt8Options:
    return int8 if op_types is None else replace(int8, op_types=tuple(op_types))
