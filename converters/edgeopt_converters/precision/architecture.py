"""What kind of network an ONNX graph is, from its operators: it decides which INT8 modes are built.

"transformer" needs attention itself: a fused attention op, or a Softmax beside a MatMul/Gemm of
two computed tensors (QK^T -> Softmax -> V, through the scale, mask and reshapes between them) in a
graph whose MatMul/Gemm outnumber its Conv (a CNN with a few attention blocks stays a CNN).
Softmax and LayerNormalization alone are not attention: a CNN may end in a Softmax over its bins and
normalize its layers (PESTO, a pitch CNN), and a classifier's Gemm into a Softmax multiplies by weights.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Set

from edgeopt_agent import runtimes
from edgeopt_agent.errors import require
from edgeopt_agent.profiles import DeviceProfile

from ..passes.base import StepCall
from ..passes.preprocess_onnx import PreprocessOptions
from ..passes.quantize_dynamic import RECURRENT_OPS as DYNAMIC_RECURRENT_OPS
from ..passes.quantize_dynamic import TRANSFORMER_OPS, OnnxDynamicOptions
from ..recipe import Plan, PlannedArtifact

RECURRENT_OPS = ("LSTM", "GRU", "RNN")
FUSED_ATTENTION_OPS = ("Attention", "MultiHeadAttention", "GroupQueryAttention", "PackedAttention")
NORM_OPS = ("LayerNormalization", "SkipLayerNormalization")
PRODUCT_OPS = ("MatMul", "Gemm", "Einsum")  # Einsum: attention written with torch.einsum or tf2onnx
# What attention puts between its products and its Softmax: the scale, the mask, reshapes, casts.
BETWEEN_OPS = ("Div", "Mul", "Add", "Sub", "Where", "Cast", "Reshape", "Transpose", "Unsqueeze", "Squeeze",
               "Expand", "Dropout", "Identity")
MAX_BETWEEN = 3  # such ops on the way from a product to the Softmax or back


@dataclass(frozen=True)
class Architecture:
    kind: str  # "cnn" | "transformer" | "recurrent" | "other"
    why: str


def architecture_variants(plan: Plan, arch: Architecture, profile: DeviceProfile) -> List[PlannedArtifact]:
    """INT8 modes beside static QDQ that suit the architecture (onnxruntime targets only)."""
    static = next((a for a in plan.artifacts if a.int8 is not None), None)
    dynamic = any(runtimes.BY_NAME[r].dynamic_int8 for r in profile.runtimes)
    if static is None or not dynamic or (static.int8 and static.int8.symmetric_activations):
        return []
    reduce_range = bool(static.int8 and static.int8.reduce_range)
    if arch.kind == "transformer":
        pre = PreprocessOptions(transformer_fusion=True)
        options = OnnxDynamicOptions(TRANSFORMER_OPS, reduce_range=reduce_range)
        why = f"transformer ({arch.why}): attention/LayerNorm/GELU fused, then dynamic INT8 MatMul/Gemm"
    elif arch.kind == "recurrent":
        pre = PreprocessOptions()
        options = OnnxDynamicOptions(DYNAMIC_RECURRENT_OPS, reduce_range=reduce_range)
        why = f"recurrent ({arch.why}): dynamic INT8, ranges follow the state"
    else:
        return []
    return [PlannedArtifact("onnx", "int8", why, variant="dynamic", base="onnx-fp32",
                            steps=(StepCall("preprocess-onnx", pre), StepCall("quantize-onnx-dynamic", options)))]


def classify(model: Path) -> Architecture:
    onnx = require("onnx", "convert")
    graph = onnx.load(str(model), load_external_data=False).graph
    ops = Counter(n.op_type for n in graph.node)
    recurrent = sum(ops[o] for o in RECURRENT_OPS)
    if recurrent:
        return Architecture("recurrent", f"{recurrent} recurrent ops ({', '.join(o for o in RECURRENT_OPS if ops[o])})")
    fused = sum(ops[o] for o in FUSED_ATTENTION_OPS)
    attention = attention_softmaxes(graph)
    matmuls, norms = sum(ops[o] for o in PRODUCT_OPS), sum(ops[o] for o in NORM_OPS)
    evidence = ([f"{fused} fused attention ops"] if fused else []) + (
        [f"{attention} Softmax beside a MatMul/Gemm of two computed tensors (QK^T, attention x V)"] if attention else [])
    if fused or (attention and matmuls > ops["Conv"]):
        return Architecture("transformer", ", ".join(evidence + [f"{matmuls} MatMul/Gemm", f"{ops['Softmax']} Softmax"]
                                                     + ([f"{norms} LayerNorm"] if norms else [])))
    not_attention = ""
    if attention:  # a CNN with a few attention blocks (PP-OCRv4's recogniser): its arithmetic is in the Conv
        not_attention = f"; {evidence[-1]}, but its {matmuls} MatMul/Gemm do not outnumber the Conv"
    elif ops["Softmax"] or norms:
        found = " and ".join(f"{count} {name}" for count, name in ((ops["Softmax"], "Softmax"), (norms, "LayerNorm"))
                             if count)
        not_attention = f"; {found} but no attention (no MatMul/Gemm of two computed tensors beside a Softmax)"
    if ops["Conv"]:
        return Architecture("cnn", f"{ops['Conv']} Conv{not_attention}")
    return Architecture("other", f"no Conv, attention or recurrent op{not_attention}")


def attention_softmaxes(graph) -> int:
    """The Softmax nodes fed by, or feeding, a MatMul/Gemm of two computed tensors within MAX_BETWEEN
    scale/mask/reshape ops."""
    constant = constant_tensors(graph)
    producer = {out: node for node in graph.node for out in node.output}
    consumers: Dict[str, List] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)

    def dynamic_product(node) -> bool:
        return node.op_type in PRODUCT_OPS and len(node.input) >= 2 and not ({node.input[0], node.input[1]} & constant)

    def fed_by_product(name: str, depth: int) -> bool:
        node = producer.get(name)
        if node is None or name in constant:
            return False
        if dynamic_product(node):
            return True
        return depth < MAX_BETWEEN and node.op_type in BETWEEN_OPS and any(
            fed_by_product(i, depth + 1) for i in node.input if i)

    def feeds_product(name: str, depth: int) -> bool:
        for node in consumers.get(name, ()):
            if dynamic_product(node):
                return True
            if depth < MAX_BETWEEN and node.op_type in BETWEEN_OPS and any(
                    feeds_product(o, depth + 1) for o in node.output):
                return True
        return False

    return sum(1 for node in graph.node if node.op_type == "Softmax"
               and (fed_by_product(node.input[0], 0) or feeds_product(node.output[0], 0)))


def constant_tensors(graph) -> Set[str]:
    """Initializers and what nodes compute from constants alone (a Constant, a transposed weight)."""
    constant = {init.name for init in graph.initializer} | {s.values.name for s in graph.sparse_initializer}
    constant.discard("")
    for node in graph.node:  # ONNX graphs list nodes in topological order
        if all(name in constant for name in node.input if name):
            constant.update(out for out in node.output if out)
    return constant
