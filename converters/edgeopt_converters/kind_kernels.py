"""One small single-node ONNX model per kernel kind and precision: what this host reaches on each.

Shapes are those of typical nodes of the CNNs and transformers edgeopt converts (a 3x3 convolution
of 64 channels at 28x28, a depthwise 3x3 of 96 channels at 56x56, a 128x384x384 matrix product,
...). INT8 kernels are written as a converter writes them (QDQ around a float op, U8 activations,
S8 weights in the 7-bit range of reduce_range), so onnxruntime fuses them into the same INT8
kernels it runs an artifact with (QLinearConv, QLinearAdd, ...); the matrix product is
MatMulInteger, as dynamic quantization of transformers runs it. A kind with two kernels gets the
better of each figure (an envelope, as a roofline is).

Each kernel's operations and bytes come from `graph_cost`, the same counting the prediction uses.
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
    ops: float
    bytes: float


_RNG_SEED = 0


def _model(nodes, inputs: Sequence[Tuple[str, int, Sequence[int]]], initializers=(), output_type: int = 1):
    """A graph of `nodes` from `inputs` (name, element type, shape) to one output "y" (float unless told)."""
    onnx = require("onnx", "convert")
    helper = onnx.helper
    graph = helper.make_graph(nodes, "kind_kernel", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info("y", output_type, None)], list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _float_kernels(onnx, rng) -> List[Tuple[str, str, str, Any]]:
    h, F = onnx.helper, onnx.TensorProto.FLOAT

    def w(name, shape):
        return onnx.numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    def conv(what, x, weight, **attrs):
        return (k.CONV if what == "conv" else what, f"Conv x{x} w{weight}",
                _model([h.make_node("Conv", ["x", "w"], ["y"], **attrs)], [("x", F, x)], [w("w", weight)]))

    ln = [w("scale", (384,)), w("bias", (384,))]
    scales = onnx.numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    qparams = [onnx.numpy_helper.from_array(np.array(0.05, np.float32), "s"),
               onnx.numpy_helper.from_array(np.array(128, np.uint8), "z")]
    return [
        conv("conv", [1, 64, 28, 28], (64, 64, 3, 3), pads=[1, 1, 1, 1]),
        conv(k.DEPTHWISE, [1, 96, 56, 56], (96, 1, 3, 3), pads=[1, 1, 1, 1], group=96),
        conv(k.POINTWISE, [1, 64, 28, 28], (128, 64, 1, 1)),
        (k.GEMM, "MatMul 128x384 @ 384x384",
         _model([h.make_node("MatMul", ["x", "w"], ["y"])], [("x", F, [128, 384])], [w("w", (384, 384))])),
        (k.ELEMENTWISE, "Mul of two 1x64x56x56",
         _model([h.make_node("Mul", ["x", "x2"], ["y"])], [("x", F, [1, 64, 56, 56]), ("x2", F, [1, 64, 56, 56])])),
        (k.ELEMENTWISE, "Sigmoid 1x64x56x56", _model([h.make_node("Sigmoid", ["x"], ["y"])], [("x", F, [1, 64, 56, 56])])),
        (k.NORMALIZATION, "LayerNormalization 1x128x384",
         _model([h.make_node("LayerNormalization", ["x", "scale", "bias"], ["y"], axis=-1)], [("x", F, [1, 128, 384])], ln)),
        (k.NORMALIZATION, "Softmax 12x128x128",
         _model([h.make_node("Softmax", ["x"], ["y"], axis=-1)], [("x", F, [12, 128, 128])])),
        (k.POOL, "MaxPool 3x3/2 of 1x64x112x112",
         _model([h.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])],
                [("x", F, [1, 64, 112, 112])])),
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


def _int8_kernels(onnx, rng) -> List[Tuple[str, str, str, Any]]:
    """QDQ around one float op, U8 activations in and out, S8 weights in the 7-bit range."""
    h, U8 = onnx.helper, onnx.TensorProto.UINT8
    qparams = [onnx.numpy_helper.from_array(np.array(0.05, np.float32), "s"),
               onnx.numpy_helper.from_array(np.array(128, np.uint8), "z")]

    def qdq(op, inputs: Sequence[Tuple[str, Sequence[int]]], weight=None, **attrs):
        nodes = [h.make_node("DequantizeLinear", [n, "s", "z"], [f"{n}_f"]) for n, _ in inputs]
        names = [f"{n}_f" for n, _ in inputs]
        inits = list(qparams)
        if weight is not None:
            inits += [onnx.numpy_helper.from_array(np.array(0.01, np.float32), "ws"),
                      onnx.numpy_helper.from_array(np.array(0, np.int8), "wz"),
                      onnx.numpy_helper.from_array(rng.integers(-64, 64, weight).astype(np.int8), "wq")]
            nodes.append(h.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w_f"]))
            names.append("w_f")
        nodes += [h.make_node(op, names, ["y_f"], **attrs), h.make_node("QuantizeLinear", ["y_f", "s", "z"], ["y"])]
        return _model(nodes, [(n, U8, s) for n, s in inputs], inits, U8)

    matmul = _model([h.make_node("MatMulInteger", ["x", "w"], ["y"])], [("x", U8, [128, 384])],
                    [onnx.numpy_helper.from_array(rng.integers(-64, 64, (384, 384)).astype(np.int8), "w")],
                    onnx.TensorProto.INT32)
    return [
        (k.CONV, "QDQ Conv x[1,64,28,28] w(64,64,3,3)",
         qdq("Conv", [("x", [1, 64, 28, 28])], (64, 64, 3, 3), pads=[1, 1, 1, 1])),
        (k.DEPTHWISE, "QDQ Conv x[1,96,56,56] w(96,1,3,3) depthwise",
         qdq("Conv", [("x", [1, 96, 56, 56])], (96, 1, 3, 3), pads=[1, 1, 1, 1], group=96)),
        (k.POINTWISE, "QDQ Conv x[1,64,28,28] w(128,64,1,1)", qdq("Conv", [("x", [1, 64, 28, 28])], (128, 64, 1, 1))),
        (k.GEMM, "MatMulInteger 128x384 @ 384x384", matmul),
        (k.ELEMENTWISE, "QDQ Add of two 1x64x56x56", qdq("Add", [("x", [1, 64, 56, 56]), ("x2", [1, 64, 56, 56])])),
        (k.POOL, "QDQ MaxPool 3x3/2 of 1x64x112x112",
         qdq("MaxPool", [("x", [1, 64, 112, 112])], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
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


def _work(model, precision: str, kind: str) -> Tuple[float, float]:
    """Operations and bytes of the kernel's nodes of this kind, as the prediction counts them."""
    from .graph_cost import analyze_onnx

    nodes = [n for n in analyze_onnx(model).nodes if n.kind == kind and n.precision == precision]
    return sum(n.ops for n in nodes), sum(n.bytes for n in nodes)


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
            ops, moved = _work(model, precision, kind)
            found.append(KindKernel(f"{precision}/{kind}:{index}", precision, kind, what, model, _feeds(model, rng),
                                    ops, moved))
    return tuple(found)
