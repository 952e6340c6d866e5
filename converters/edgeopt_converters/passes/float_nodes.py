"""Nodes kept in float stay float where onnxruntime runs them.

onnxruntime's WeightBiasQuantization graph transformer (on by default since 1.20, on a board as here)
gives a Conv, ConvTranspose or Gemm whose input comes from a DequantizeLinear and whose weight is a
float initializer symmetric per-tensor INT8 weights when it loads the model. A node the quantizer left in
float (the search's float sets, a crash repair's, nodes_to_exclude) between quantized neighbours thus ran
with coarser weights than the per-channel INT8 it was kept from: a MobileNetV2 with its 17 depthwise
convolutions "in float" lost 3.8 expected top-1 points where all-INT8 lost 1.7, and 1.5 really in float
(2026-11-28, 240 crops, onnxruntime 1.32). A Clip over the whole float range between the
DequantizeLinear and such a node keeps it float: no QDQ pattern matches through it and it changes no value.
Only the main graph is guarded (an If or Loop body's nodes are not).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from edgeopt_agent.errors import require

from .errors import StepFailed, first_line
from .preprocess_onnx import default_opset

REQUANTIZED_BY_ORT = ("Conv", "ConvTranspose", "Gemm")
FLOAT_MAX = float(np.finfo(np.float32).max)
GUARD_SUFFIX = "_kept_float"
CLIP_BOUNDS_AS_INPUTS = 11  # opset from which Clip takes min/max as inputs, not attributes


def is_float_guard(node) -> bool:
    """Whether an ONNX node is one of guard_float_nodes' Clips."""
    return node.op_type == "Clip" and node.name.endswith(GUARD_SUFFIX)


def guard_float_nodes(model: Path) -> int:
    """Put a no-op Clip before each float-weight Conv/ConvTranspose/Gemm that reads a DequantizeLinear's
    output, in the ONNX file `model` (rewritten in place where any is found). Returns how many."""
    onnx = require("onnx", "convert")
    try:
        proto = onnx.load(str(model))
        guarded = _guard(onnx, proto)
        if guarded:
            onnx.save(proto, str(model))
    except Exception as exc:
        raise StepFailed(f"keeping float nodes float in {model.name} failed: {first_line(exc)}") from exc
    return guarded


def _guard(onnx, proto) -> int:
    from onnx import TensorProto, helper, numpy_helper

    graph = proto.graph
    producers = {out: node for node in graph.node for out in node.output}
    float_weights = {i.name for i in graph.initializer if i.data_type == TensorProto.FLOAT}
    float_weights |= {n.output[0] for n in graph.node if n.op_type == "Constant" and n.attribute
                      and n.attribute[0].type == onnx.AttributeProto.TENSOR and n.attribute[0].t.data_type == TensorProto.FLOAT}
    opset = default_opset(proto) or CLIP_BOUNDS_AS_INPUTS
    taken = {n.name for n in graph.node} | {t for n in graph.node for t in n.output} | {i.name for i in graph.initializer}

    def fresh(base: str, suffix: str = "") -> str:
        unique, count = f"{base}{suffix}", 1
        while unique in taken:
            unique, count = f"{base}_{count}{suffix}", count + 1
        taken.add(unique)
        return unique

    bounds = None
    nodes, guarded = [], 0
    for node in graph.node:
        source = producers.get(node.input[0]) if node.input else None
        if (node.op_type in REQUANTIZED_BY_ORT and len(node.input) > 1 and node.input[1] in float_weights
                and source is not None and source.op_type == "DequantizeLinear"):
            name, kept = fresh(node.name or node.output[0], GUARD_SUFFIX), fresh(node.input[0], GUARD_SUFFIX)
            if opset >= CLIP_BOUNDS_AS_INPUTS:
                if bounds is None:
                    bounds = fresh("float_range_low"), fresh("float_range_high")
                    graph.initializer.extend([numpy_helper.from_array(np.array(-FLOAT_MAX, np.float32), bounds[0]),
                                              numpy_helper.from_array(np.array(FLOAT_MAX, np.float32), bounds[1])])
                nodes.append(helper.make_node("Clip", [node.input[0], *bounds], [kept], name=name))
            else:
                nodes.append(helper.make_node("Clip", [node.input[0]], [kept], name=name, min=-FLOAT_MAX, max=FLOAT_MAX))
            node.input[0] = kept
            guarded += 1
        nodes.append(node)
    if guarded:
        del graph.node[:]
        graph.node.extend(nodes)
    return guarded
