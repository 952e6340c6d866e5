"""A linear layer that makes an output, and whether it reads pooled features: a head seen in the graph.

A classifier's logits are a Linear (Gemm, or MatMul then Add) over features pooled over the image or
the sequence (GlobalAveragePool, ReduceMean, or Flatten after a pooling), sometimes through a few
more Linear layers and activations (MobileNetV3, VGG). A regression head is a Linear too; whether it
reads pooled features or not, its values say what it is (regression.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

POOL_OPS = frozenset({"GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "AveragePool", "MaxPool", "ReduceMean",
                      "ReduceMax"})
# Between the pooling and the last Linear: reshapes, dropout, activations, normalisation by fixed
# statistics, further Linear layers and their bias. Not Gather/Slice (a token picked, not pooled), not
# Sub/Div (a LayerNorm's own ReduceMean pools nothing), not Conv (features not yet pooled).
HEAD_OPS = frozenset({"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Cast",
                      "QuantizeLinear", "DequantizeLinear", "Dropout", "Relu", "Clip", "HardSwish", "HardSigmoid",
                      "Sigmoid", "Tanh", "Gelu", "Elu", "LeakyRelu", "Selu", "Softplus", "Mish", "PRelu",
                      "BatchNormalization", "Gemm", "MatMul", "Add", "Mul"})
WEIGHT_OPS = frozenset({"Identity", "Transpose", "Reshape", "Cast", "DequantizeLinear", "Unsqueeze", "Squeeze"})
MAX_HEAD_DEPTH = 16  # ops walked from the last Linear back to a pooling


@dataclass(frozen=True)
class LinearHead:
    layer: str  # "Gemm", "MatMul" or "MatMul+Add"
    pooled: Optional[str] = None  # the pooling op its features come from, or None


def linear_head(node, producers: Mapping[str, object], constants: frozenset) -> Optional[LinearHead]:
    """The head `node` (the op making an output) is part of, when it is a Linear layer: a Gemm, or a
    MatMul by a weight, possibly followed by the Add of a bias."""
    layer = _linear_layer(node, producers, constants)
    if layer is None:
        return None
    linear = producers[_data_input(node, producers, constants)] if layer == "MatMul+Add" else node
    return LinearHead(layer, _pooling(_data_input(linear, producers, constants), producers, constants))


def _linear_layer(node, producers, constants) -> Optional[str]:
    if node.op_type == "Gemm":
        return "Gemm"
    if node.op_type == "MatMul" and any(_constant(name, producers, constants) for name in node.input):
        return "MatMul"
    if node.op_type == "Add" and len(node.input) == 2:
        bias = [name for name in node.input if _constant(name, producers, constants)]
        below = producers.get(_data_input(node, producers, constants) or "")
        if len(bias) == 1 and below is not None and _linear_layer(below, producers, constants) == "MatMul":
            return "MatMul+Add"
    return None


def _constant(name: str, producers, constants, depth: int = 0) -> bool:
    """A weight: an initializer or a Constant, possibly transposed, reshaped or dequantized."""
    if name in constants:
        return True
    node = producers.get(name)
    if node is None or depth > 4:
        return False
    if node.op_type == "Constant":
        return True
    return node.op_type in WEIGHT_OPS and bool(node.input) and _constant(node.input[0], producers, constants, depth + 1)


def _data_input(node, producers, constants) -> Optional[str]:
    """The first input of `node` that is not a weight."""
    return next((name for name in node.input if name and not _constant(name, producers, constants)), None)


def _pooling(name: Optional[str], producers, constants) -> Optional[str]:
    for _ in range(MAX_HEAD_DEPTH):
        node = producers.get(name) if name else None
        if node is None:
            return None
        if node.op_type in POOL_OPS:
            return node.op_type
        if node.op_type not in HEAD_OPS:
            return None
        name = _data_input(node, producers, constants)
    return None
