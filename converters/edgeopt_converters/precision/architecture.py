"""What kind of network an ONNX graph is, from its operators: it decides which INT8 modes are built."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from edgeopt_agent.errors import require

RECURRENT_OPS = ("LSTM", "GRU", "RNN")
ATTENTION_OPS = ("Attention", "MultiHeadAttention", "LayerNormalization", "SkipLayerNormalization")


@dataclass(frozen=True)
class Architecture:
    kind: str  # "cnn" | "transformer" | "recurrent" | "other"
    why: str


def classify(model: Path) -> Architecture:
    onnx = require("onnx", "convert")
    graph = onnx.load(str(model), load_external_data=False).graph
    ops = Counter(n.op_type for n in graph.node)
    recurrent = sum(ops[o] for o in RECURRENT_OPS)
    if recurrent:
        return Architecture("recurrent", f"{recurrent} recurrent ops ({', '.join(o for o in RECURRENT_OPS if ops[o])})")
    matmuls = ops["MatMul"] + ops["Gemm"]
    attention = sum(ops[o] for o in ATTENTION_OPS)
    if attention or (ops["Softmax"] and matmuls >= 4 and matmuls > ops["Conv"]):
        return Architecture("transformer", f"{matmuls} MatMul/Gemm, {ops['Softmax']} Softmax"
                            + (f", {attention} attention/LayerNorm ops" if attention else ""))
    if ops["Conv"]:
        return Architecture("cnn", f"{ops['Conv']} Conv")
    return Architecture("other", "no Conv, MatMul attention or recurrent op")
