"""One small single-node ONNX model per kernel kind and precision: what this host reaches on each.

Shapes are those of typical nodes of the CNNs and transformers edgeopt converts (a 3x3 convolution
of 64 channels at 28x28, a depthwise 3x3 of 96 channels at 56x56, a 128x384x384 matrix product,
..., and in float a 1-D convolution of 96 channels at 16 positions, which onnxruntime runs outside
its NCHWc layout as one full SGEMM panel); convolutions and pools run three in a row, so the layout
changes a runtime makes once per graph (NCHWc, NHWC) are not charged to one node. INT8 kernels are
written as a converter writes them (QDQ around a float op, U8 activations, S8 weights in the 7-bit
range of reduce_range), so onnxruntime fuses them into the same INT8 kernels it runs an artifact
with (QLinearConv, QLinearAdd, ...); the matrix product is MatMulInteger, and dynamic quantization's
fused product is onnxruntime's DynamicQuantizeMatMul (the activation quantized inside the kernel,
float out), as it runs dynamically quantized transformers. A kind with two kernels gets the better
of each figure (an envelope, as a roofline is).

Each kernel's operations and bytes come from `graph_cost` on the graph onnxruntime executes, the same
counting the prediction uses.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from edgeopt_agent.errors import require

from . import node_kinds as k


@dataclass(frozen=True)
class KindKernel:
    name: str  # "fp32/depthwise:0"
    precision: str
    kind: str
    what: str  # a few words on its shape
    model: Any  # onnx.ModelProto
    feeds: Dict[str, np.ndarray]
    ops: float  # of its nodes of this kind and precision, as their kernels perform them (padding included)
    bytes: float
    nodes: int  # how many nodes of this kind and precision it runs
    others: Tuple[Any, ...] = ()  # graph_cost.NodeCost of the nodes it runs besides (their time is taken off)


_RNG_SEED = 0
# Kinds whose kernels measure throughput; their nodes' bytes move at the machine's bandwidth.
COMPUTE_KINDS = (k.CONV, k.POINTWISE, k.GEMM_CONV, k.GEMM, k.DYNAMIC_GEMM)
COMPUTE_ROLE_KINDS = COMPUTE_KINDS + (k.DEPTHWISE,)  # kinds whose nodes are convolutions or matrix products


def _model(nodes, inputs: Sequence[Tuple[str, int, Sequence[int]]], initializers=(), output_type: int = 1):
    """A graph of `nodes` from `inputs` (name, element type, shape) to one output "y" (float unless told)."""
    onnx = require("onnx", "convert")
    helper = onnx.helper
    graph = helper.make_graph(nodes, "kind_kernel", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info("y", output_type, None)], list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])


def _float_kernels(onnx, rng) -> List[Tuple[str, str, str, Any]]:
    h, F = onnx.helper, onnx.TensorProto.FLOAT

    def w(name, shape):
        return onnx.numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    ln = [w("scale", (384,)), w("bias", (384,))]
    scales = onnx.numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    qparams = [onnx.numpy_helper.from_array(np.array(0.05, np.float32), "s"),
               onnx.numpy_helper.from_array(np.array(128, np.uint8), "z")]
    return _chains(onnx, rng, quantized=False) + [
        (k.GEMM, "MatMul 128x384 @ 384x384",
         _model([h.make_node("MatMul", ["x", "w"], ["y"])], [("x", F, [128, 384])], [w("w", (384, 384))])),
        (k.ELEMENTWISE, "Mul of two 1x64x56x56",
         _model([h.make_node("Mul", ["x", "x2"], ["y"])], [("x", F, [1, 64, 56, 56]), ("x2", F, [1, 64, 56, 56])])),
        (k.ELEMENTWISE, "Sigmoid 1x64x56x56", _model([h.make_node("Sigmoid", ["x"], ["y"])], [("x", F, [1, 64, 56, 56])])),
        (k.NORMALIZATION, "LayerNormalization 1x128x384",
         _model([h.make_node("LayerNormalization", ["x", "scale", "bias"], ["y"], axis=-1)], [("x", F, [1, 128, 384])], ln)),
        (k.NORMALIZATION, "Softmax 12x128x128",
         _model([h.make_node("Softmax", ["x"], ["y"], axis=-1)], [("x", F, [12, 128, 128])])),
        (k.POOL, "Resize nearest 2x of 1x64x40x40",
         _model([h.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest")], [("x", F, [1, 64, 40, 40])],
                [scales])),
        (k.MOVE, "Concat of two 1x64x40x40",
         _model([h.make_node("Concat", ["x", "x2"], ["y"], axis=1)], [("x", F, [1, 64, 40, 40]), ("x2", F, [1, 64, 40, 40])])),
        (k.MOVE, "Transpose 1x128x12x32",
         _model([h.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 1, 3])], [("x", F, [1, 128, 12, 32])])),
        (k.QDQ, "QuantizeLinear 1x64x56x56",
         _model([h.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])], [("x", F, [1, 64, 56, 56])], qparams,
                onnx.TensorProto.UINT8)),
        (k.QDQ, "DequantizeLinear 1x64x56x56",
         _model([h.make_node("DequantizeLinear", ["x", "s", "z"], ["y"])],
                [("x", onnx.TensorProto.UINT8, [1, 64, 56, 56])], qparams)),
    ]


def _chain(onnx, rng, quantized: bool, x: Sequence[int], layers) -> Any:
    """Nodes one after another from input "x" to output "y"; QDQ around each (U8 activations, S8 weights
    in the 7-bit range) where quantized, as a converter writes an INT8 graph."""
    h = onnx.helper
    nodes, inits = [], []
    if quantized:
        inits = [onnx.numpy_helper.from_array(np.array(0.05, np.float32), "s"),
                 onnx.numpy_helper.from_array(np.array(128, np.uint8), "z"),
                 onnx.numpy_helper.from_array(np.array(0.01, np.float32), "ws"),
                 onnx.numpy_helper.from_array(np.array(0, np.int8), "wz")]
    current = "x"
    for index, (op, weight, attrs) in enumerate(layers):
        data = current
        if quantized:
            data = f"d{index}"
            nodes.append(h.make_node("DequantizeLinear", [current, "s", "z"], [data]))
        inputs = [data]
        if weight is not None:
            name = f"w{index}"
            if quantized:
                inits.append(onnx.numpy_helper.from_array(rng.integers(-64, 64, weight).astype(np.int8), f"{name}q"))
                nodes.append(h.make_node("DequantizeLinear", [f"{name}q", "ws", "wz"], [name]))
            else:
                inits.append(onnx.numpy_helper.from_array(rng.standard_normal(weight).astype(np.float32), name))
            inputs.append(name)
        last = index == len(layers) - 1
        out = "y" if last and not quantized else f"t{index}"
        nodes.append(h.make_node(op, inputs, [out], **attrs))
        if quantized:
            nodes.append(h.make_node("QuantizeLinear", [out, "s", "z"], ["y" if last else f"q{index}"]))
            out = f"q{index}"
        current = out
    element = onnx.TensorProto.UINT8 if quantized else onnx.TensorProto.FLOAT
    return _model(nodes, [("x", element, x)], inits, element)


def _chains(onnx, rng, quantized: bool) -> List[Tuple[str, str, str, Any]]:
    """Convolutions and pools, three in a row: a runtime changes their layout (NCHWc, NHWC) once per chain,
    as it does once per graph, not once per node. The pool chain starts with a pointwise convolution,
    which sets the layout as in a network; its time (at the pointwise roof) is taken off."""
    same, one = {"pads": [1, 1, 1, 1]}, {}
    what = "QDQ " if quantized else ""
    return [
        (k.CONV, f"3x {what}Conv 3x3 64->64 at 28x28",
         _chain(onnx, rng, quantized, [1, 64, 28, 28], [("Conv", (64, 64, 3, 3), same)] * 3)),
        (k.DEPTHWISE, f"3x {what}depthwise Conv 3x3 of 96 channels at 56x56",
         _chain(onnx, rng, quantized, [1, 96, 56, 56], [("Conv", (96, 1, 3, 3), dict(same, group=96))] * 3)),
        (k.POINTWISE, f"3x {what}Conv 1x1 96->96 at 28x28",
         _chain(onnx, rng, quantized, [1, 96, 28, 28], [("Conv", (96, 96, 1, 1), one)] * 3)),
    ] + ([] if quantized else [
        (k.GEMM_CONV, "3x 1-D Conv 5 taps 96->96 at 16 positions (one SGEMM panel)",
         _chain(onnx, rng, False, [1, 96, 16], [("Conv", (96, 96, 5), {"pads": [2, 2]})] * 3)),
    ]) + [
        (k.POOL, f"{what}MaxPool 3x3/2 then 3x3/1 of 64 channels at 112x112, after a 1x1 Conv",
         _chain(onnx, rng, quantized, [1, 16, 112, 112], [
             ("Conv", (64, 16, 1, 1), one), ("MaxPool", None, dict(same, kernel_shape=[3, 3], strides=[2, 2])),
             ("MaxPool", None, dict(same, kernel_shape=[3, 3]))])),
    ]


def _int8_kernels(onnx, rng) -> List[Tuple[str, str, str, Any]]:
    """QDQ around float ops, U8 activations in and out, S8 weights in the 7-bit range; the matrix
    product as dynamic quantization runs it (MatMulInteger)."""
    h, U8 = onnx.helper, onnx.TensorProto.UINT8
    # Each tensor its own scale, as calibration gives them: with one scale for all, onnxruntime may run a
    # plain copy (a Concat of 8-bit data) where a model's node requantizes.
    scales = {"x": 0.05, "x2": 0.07, "y_f": 0.09}

    def qdq(op, inputs: Sequence[Tuple[str, Sequence[int]]], **attrs):
        qparams = [onnx.numpy_helper.from_array(np.array(128, np.uint8), "z")] + [
            onnx.numpy_helper.from_array(np.array(scales[n], np.float32), f"s_{n}") for n in [i for i, _ in inputs] + ["y_f"]]
        nodes = [h.make_node("DequantizeLinear", [n, f"s_{n}", "z"], [f"{n}_f"]) for n, _ in inputs]
        nodes += [h.make_node(op, [f"{n}_f" for n, _ in inputs], ["y_f"], **attrs),
                  h.make_node("QuantizeLinear", ["y_f", "s_y_f", "z"], ["y"])]
        return _model(nodes, [(n, U8, s) for n, s in inputs], qparams, U8)

    matmul = _model([h.make_node("MatMulInteger", ["x", "w"], ["y"])], [("x", U8, [128, 384])],
                    [onnx.numpy_helper.from_array(rng.integers(-64, 64, (384, 384)).astype(np.int8), "w")],
                    onnx.TensorProto.INT32)
    dynamic = _model([h.make_node("DynamicQuantizeMatMul", ["x", "w", "ws", "wz"], ["y"], domain="com.microsoft")],
                     [("x", onnx.TensorProto.FLOAT, [128, 384])],
                     [onnx.numpy_helper.from_array(rng.integers(-127, 128, (384, 384)).astype(np.int8), "w"),
                      onnx.numpy_helper.from_array(np.array(0.01, np.float32), "ws"),
                      onnx.numpy_helper.from_array(np.array(0, np.int8), "wz")])
    return _chains(onnx, rng, quantized=True) + [
        (k.GEMM, "MatMulInteger 128x384 @ 384x384", matmul),
        (k.DYNAMIC_GEMM, "DynamicQuantizeMatMul 128x384 @ 384x384 (float in and out)", dynamic),
        (k.ELEMENTWISE, "QDQ Add of two 1x64x56x56", qdq("Add", [("x", [1, 64, 56, 56]), ("x2", [1, 64, 56, 56])])),
        (k.MOVE, "QDQ Concat of two 1x64x40x40", qdq("Concat", [("x", [1, 64, 40, 40]), ("x2", [1, 64, 40, 40])], axis=1)),
    ]


def _feeds(model, rng) -> Dict[str, np.ndarray]:
    onnx = require("onnx", "convert")
    feeds = {}
    initializers = {i.name for i in model.graph.initializer}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
        feeds[value.name] = (rng.standard_normal(shape).astype(dtype) if dtype.kind == "f"
                             else rng.integers(0, 256, shape).astype(dtype))
    return feeds


def _work(model, precision: str, kind: str):
    """The kernel's executed nodes of this kind and precision, and the others, as the prediction counts them."""
    from .graph_cost import analyze_onnx
    from .roofline import EXECUTED

    executed = [n for n in analyze_onnx(model, runtime="onnxruntime").nodes if n.role in EXECUTED]
    mine = [n for n in executed if n.kind == kind and n.precision == precision]
    return mine, tuple(n for n in executed if n not in mine)


@functools.lru_cache(maxsize=1)
def kind_kernels() -> Tuple[KindKernel, ...]:
    onnx = require("onnx", "convert")
    rng = np.random.default_rng(_RNG_SEED)
    found: List[KindKernel] = []
    for precision, specs in (("fp32", _float_kernels(onnx, rng)), ("int8", _int8_kernels(onnx, rng))):
        counts: Dict[str, int] = {}
        for kind, what, model in specs:
            index = counts.get(kind, 0)
            counts[kind] = index + 1
            mine, others = _work(model, precision, kind)
            found.append(KindKernel(f"{precision}/{kind}:{index}", precision, kind, what, model, _feeds(model, rng),
                                    sum(n.kernel_ops for n in mine), sum(n.bytes for n in mine), len(mine), others))
    return tuple(found)
