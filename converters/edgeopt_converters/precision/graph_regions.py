"""Regions of an ONNX graph found by its structure, for mixed precision to keep in float as a whole.

The post-processing tail: the nodes after the last heavy compute node on every path to an output
(a detector's box decoding, anchor grids and the concatenation of pixel boxes with class scores).
They do almost no arithmetic, so keeping them in float costs next to nothing, and they are where
one INT8 scale would have to cover values of very different ranges. A node is heavy when it
multiplies and accumulates (Conv, ConvTranspose, MatMul, Gemm) at least LIGHT_SHARE of the graph's
multiply-accumulates; a tiny convolution such as YOLOv8's 16-tap DFL belongs to the tail.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from edgeopt_agent.errors import require

MAC_OPS = ("Conv", "ConvTranspose", "MatMul", "Gemm")
LIGHT_SHARE = 0.001  # a MAC node below this share of the graph's MACs does no heavy compute


def typed_values(model) -> list:
    """Every value the graph declares or ONNX shape inference can type (inputs, outputs, intermediates)."""
    onnx = require("onnx", "convert")
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:
        inferred = model
    return [v for v in list(inferred.graph.value_info) + list(inferred.graph.output) + list(inferred.graph.input)
            if v.type.HasField("tensor_type")]


def _shapes(model) -> Dict[str, List[int]]:
    """Fixed shapes of the graph's values, with a symbolic batch (first input dim) taken as 1."""
    onnx = require("onnx", "convert")
    one = onnx.ModelProto()
    one.CopyFrom(model)
    for value in one.graph.input:
        dims = value.type.tensor_type.shape.dim if value.type.HasField("tensor_type") else []
        if dims and not dims[0].HasField("dim_value"):
            dims[0].Clear()
            dims[0].dim_value = 1
    shapes = {}
    for value in typed_values(one):
        dims = value.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") for d in dims):
            shapes[value.name] = [d.dim_value for d in dims]
    for init in model.graph.initializer:
        shapes[init.name] = list(init.dims)
    return shapes


def _product(values: Sequence[int]) -> int:
    total = 1
    for v in values:
        total *= max(int(v), 1)
    return total


def node_macs(node, shapes: Dict[str, List[int]]) -> Optional[int]:
    """Multiply-accumulates of a MAC node at the graph's fixed shapes; None when a shape is unknown."""
    if node.op_type not in MAC_OPS or len(node.input) < 2:
        return 0 if node.op_type not in MAC_OPS else None
    out = shapes.get(node.output[0])
    if out is None:
        return None
    if node.op_type in ("Conv", "ConvTranspose"):
        weight = shapes.get(node.input[1])
        if weight is None:
            return None
        if node.op_type == "Conv":  # each output value: in_channels/group x kernel taps
            return _product(out) * _product(weight[1:])
        source = shapes.get(node.input[0])
        return None if source is None else _product(source) * _product(weight[1:])
    a = shapes.get(node.input[0])
    if a is None:
        return None
    transposed = node.op_type == "Gemm" and any(x.name == "transA" and x.i for x in node.attribute)
    inner = a[-2] if transposed and len(a) >= 2 else a[-1]
    return _product(out) * max(int(inner), 1)


def post_processing_tail(model) -> List[str]:
    """Names of the nodes from which no heavy MAC node is reachable, in graph order (see module doc).

    A MAC node whose cost is unknown counts as heavy, so an unknown shape never puts compute in the tail.
    """
    nodes = list(model.graph.node)
    shapes = _shapes(model)
    costs = {i: node_macs(n, shapes) for i, n in enumerate(nodes) if n.op_type in MAC_OPS}
    total = sum(c for c in costs.values() if c)
    heavy = {i for i, c in costs.items() if c is None or not total or c >= LIGHT_SHARE * total}
    consumers: Dict[str, List[int]] = {}
    producer: Dict[str, int] = {}
    for i, node in enumerate(nodes):
        for name in node.input:
            consumers.setdefault(name, []).append(i)
        for name in node.output:
            producer[name] = i
    reaches: Dict[int, bool] = {}
    for i in reversed(range(len(nodes))):  # ONNX keeps nodes in topological order: consumers first
        reaches[i] = i in heavy or any(reaches.get(c, True) for out in nodes[i].output for c in consumers.get(out, []))
    feeds_output, stack = set(), [producer[o.name] for o in model.graph.output if o.name in producer]
    while stack:
        i = stack.pop()
        if i not in feeds_output:
            feeds_output.add(i)
            stack.extend(producer[name] for name in nodes[i].input if name in producer)
    return [n.name for i, n in enumerate(nodes) if n.name and not reaches[i] and i in feeds_output]


def mac_shares(model) -> List[Tuple[str, float]]:
    """(node, share of the graph's multiply-accumulates done up to and including it), in graph order.

    The input side of a CNN, where resolution is high and channels few, is where INT8 error enters
    first and is carried by everything after it: keeping a prefix of the graph in float is the
    coarsest region mixed precision can try. Empty when no MAC node has a known cost.
    """
    nodes = list(model.graph.node)
    shapes = _shapes(model)
    costs = [node_macs(n, shapes) or 0 for n in nodes]
    total = float(sum(costs))
    if not total:
        return []
    shares, done = [], 0.0
    for node, cost in zip(nodes, costs):
        done += cost
        shares.append((node.name, done / total))
    return shares
