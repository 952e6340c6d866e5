"""Nodes kept in float stay float where onnxruntime runs them.

onnxruntime's WeightBiasQuantization graph transformer (on by default since 1.20, on a board as here)
gives a Conv, ConvTranspose or Gemm whose input comes from a DequantizeLinear and whose weight is a
float initializer symmetric per-tensor INT8 weights when it loads the model. A node the quantizer left in
float (the search's float sets, a crash repair's, nodes_to_exclude) between quantized neighbours thus ran
with coarser weights than the per-channel INT8 it was kept from: a MobileNetV2 with its 17 depthwise
convolutions "in float" lost 3.8 expected top-1 points where all-INT8 lost 1.7, and 1.5 really in float
(2026-11-28, 240 crops, onnxruntime 1.32). A Clip over the whole float range between the
DequantizeLinear and such a node keeps it float: no QDQ pattern matches through it and it changes no value.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from edgeopt_agent.errors import require

REQUANTIZED_BY_ORT = ("Conv", "ConvTranspose", "Gemm")
FLOAT_MAX = float(np.finfo(np.float32).max)
GUARD_SUFFIX = "_kept_float"


def guard_float_nodes(model: Path) -> int:
    """Put a no-op Clip before each float-weight Conv/ConvTranspose/Gemm that reads a DequantizeLinear's
    output, in the ONNX file `model` (rewritten in place where any is found). Returns how many."""
    onnx = require("onnx", "convert")
    from onnx import TensorProto, helper, numpy_helper

    proto = onnx.load(str(model))
    graph = proto.graph
    producers = {out: node for node in graph.node for out in node.output}
    float_weights = {i.name for i in graph.initializer if i.data_type == TensorProto.FLOAT}
    nodes, guarded = [], 0
    for node in graph.node:
        source = producers.get(node.input[0]) if node.input else None
        if (node.op_type in REQUANTIZED_BY_ORT and len(node.input) > 1 and node.input[1] in float_weights
                and source is not None and source.op_type == "DequantizeLinear"):
            name = f"{node.name or node.output[0]}{GUARD_SUFFIX}"
            low, high, kept = f"{name}_low", f"{name}_high", f"{node.input[0]}{GUARD_SUFFIX}_{guarded}"
            graph.initializer.extend([numpy_helper.from_array(np.array(-FLOAT_MAX, np.float32), low),
                                      numpy_helper.from_array(np.array(FLOAT_MAX, np.float32), high)])
            nodes.append(helper.make_node("Clip", [node.input[0], low, high], [kept], name=name))
            node.input[0] = kept
            guarded += 1
        nodes.append(node)
    if guarded:
        del graph.node[:]
        graph.node.extend(nodes)
        onnx.save(proto, str(model))
    return guarded
