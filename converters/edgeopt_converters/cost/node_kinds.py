"""Which kind of kernel a node runs: what a runtime's speed depends on, more than its precision alone.

A runtime reaches very different fractions of its peak on a dense 3x3 convolution, a depthwise
one, a 1x1 one or a matrix product, and elementwise, normalization, pooling, layout and
quantize/dequantize nodes are bound by memory and per-node overhead, each at its own rate
(nn-Meter's observation: predict latency per kernel kind, not per graph). The roofline times each
node with its kind's own achieved throughput and bandwidth where they are known.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

CONV = "conv"  # dense convolution with a spatial kernel (grouped ones included)
DEPTHWISE = "depthwise"  # one input channel per group
POINTWISE = "pointwise"  # 1x1 convolution, one group
# A float convolution onnxruntime runs outside its blocked NCHWc kernels (1-D convolutions, channel counts its
# blocks do not divide): unfolded (im2col) into its float matrix product, which fills 16-column panels.
GEMM_CONV = "gemm-conv"
GEMM = "gemm"  # matrix products and recurrences
DYNAMIC_GEMM = "dynamic-gemm"  # dynamic INT8: the activation quantized inside the product's kernel, float out
ELEMENTWISE = "elementwise"  # activations and arithmetic, element by element
NORMALIZATION = "normalization"  # batch/layer/instance norms and softmax (reductions over an axis)
POOL = "pool"  # pooling, reductions, resizing
MOVE = "move"  # copies and rearrangements: no arithmetic
QDQ = "qdq"  # quantize / dequantize passes a runtime does not fold into an INT8 kernel
VIEW = "view"  # relabels a tensor: no work

KINDS = (CONV, DEPTHWISE, POINTWISE, GEMM_CONV, GEMM, DYNAMIC_GEMM, ELEMENTWISE, NORMALIZATION, POOL, MOVE, QDQ)

_CONVS = ("Conv", "ConvInteger", "QLinearConv", "FusedConv", "NhwcConv", "ConvTranspose")
_GEMMS = ("MatMul", "MatMulInteger", "QLinearMatMul", "FusedMatMul", "Gemm", "Einsum", "LSTM", "GRU", "RNN", "QGemm",
          "FusedGemm", "Attention", "MatMulNBits")
# onnxruntime's dynamic INT8 kernels (its fusions of DynamicQuantizeLinear + MatMulInteger + rescale, and of
# dynamically quantized attention and LSTM)
_DYNAMIC_GEMMS = ("DynamicQuantizeMatMul", "MatMulIntegerToFloat", "QAttention", "DynamicQuantizeLSTM")
_NORMALIZATIONS = ("BatchNormalization", "LayerNormalization", "InstanceNormalization", "GroupNormalization",
                   "SimplifiedLayerNormalization", "SkipLayerNormalization", "SkipSimplifiedLayerNormalization",
                   "LpNormalization", "Softmax", "LogSoftmax", "QLinearSoftmax")
_POOLS = ("MaxPool", "NhwcMaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "Resize",
          "Upsample", "QLinearAveragePool", "QLinearGlobalAveragePool")
_QDQ = ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear")


def conv_kind(weight_shape: Optional[Sequence[int]], group: int) -> str:
    """Dense, depthwise or pointwise, from the weight's shape (M, C/group, k...) and the group count."""
    if not weight_shape or len(weight_shape) < 2:
        return CONV
    if group > 1 and weight_shape[1] == 1:
        return DEPTHWISE
    if group == 1 and math.prod(weight_shape[2:]) == 1:
        return POINTWISE
    return CONV


def kind_of(op_type: str, weight_shape: Optional[Sequence[int]] = None, group: int = 1,
            views: Sequence[str] = (), moves: Sequence[str] = ()) -> str:
    """The kernel kind of an ONNX node; `views` and `moves` are the op types that relabel or copy."""
    if op_type in _CONVS:
        return conv_kind(weight_shape, group)
    if op_type in _GEMMS:
        return GEMM
    if op_type in _DYNAMIC_GEMMS:
        return DYNAMIC_GEMM
    if op_type in _NORMALIZATIONS:
        return NORMALIZATION
    if op_type in _POOLS or op_type.startswith("Reduce"):
        return POOL
    if op_type in _QDQ:
        return QDQ
    if op_type in views:
        return VIEW
    if op_type in moves:
        return MOVE
    return ELEMENTWISE


# onnxruntime's float matrix product (MLAS SGEMM) packs the right-hand matrix in panels of this many columns
# and computes whole panels; a product with one column runs as a matrix-vector product instead.
SGEMM_PANEL = 16


def gemm_conv_ops(ops: float, positions: int) -> float:
    """The operations a GEMM_CONV node's matrix product performs: its `positions` output columns padded to
    whole SGEMM panels (one column: a matrix-vector product, no padding)."""
    if positions <= 1:
        return ops
    return ops * math.ceil(positions / SGEMM_PANEL) * SGEMM_PANEL / positions
