"""What each node of an ONNX graph costs: operations (2 per multiply-accumulate) and bytes moved.

Shapes come from ONNX shape inference with the inputs' free dimensions fixed (given shapes, or 1);
tensors it leaves unknown (shapes computed at run time) take the shape one onnxruntime run gives them.
Bytes are what a kernel reads and writes once: its inputs (weights included) and outputs, each at
its own element size, so an INT8 artifact's weights count one byte each.

What runtimes do to every graph is applied, since it decides what is really moved:
- a QDQ graph runs its quantized nodes as INT8 kernels where runtimes have one (INT8_KERNEL_OPS:
  convolutions, matrix products, additions, multiplications, concatenation, pooling, a few
  activations) and moves INT8 data through layout ops: the DequantizeLinear nodes feeding such
  nodes and the QuantizeLinear nodes after them are folded into the kernels (no pass of their
  own), and the tensors they carry move at their quantized size. Any other node between Q/DQ
  pairs (a division, a normalization) runs in float, with a real dequantize before it and a real
  quantize after it;
- an activation or batch norm right after a convolution or matrix product is fused into it
  (its arithmetic stays, its own pass over memory goes);
- reshapes and other views move nothing;
- a node whose inputs are all weights (or shapes fixed when the graph is loaded) is computed once
  at load time (constant folding), not per run.
Those are guesses at what a runtime does. With `runtime="onnxruntime"` the graph costed is the one
onnxruntime executes on this host (`ort_graph`: its own fusions, layouts and constant folding
applied), and no fusion is guessed: every node left in it runs, each at the precision of the data
it reads (its QLinear* / QGemm / DynamicQuantizeMatMul kernels, and layout moves and pools on
8-bit data, are INT8); a float convolution it leaves outside its NCHWc layout is unfolded into its
float matrix product, whose work (`padded_ops`) fills whole 16-column panels (node_kinds.GEMM_CONV).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from edgeopt_agent import runtimes
from edgeopt_agent.errors import UserError, require

from .node_kinds import DEPTHWISE, GEMM_CONV, gemm_conv_ops, kind_of

COMPUTE = ("Conv", "ConvInteger", "QLinearConv", "FusedConv", "NhwcConv", "ConvTranspose", "MatMul", "MatMulInteger",
           "QLinearMatMul", "FusedMatMul", "Gemm", "FusedGemm", "QGemm", "DynamicQuantizeMatMul",
           "MatMulIntegerToFloat", "Attention", "QAttention", "LSTM", "DynamicQuantizeLSTM", "GRU", "RNN", "Einsum",
           "MatMulNBits")
# Nodes that only relabel a tensor: no arithmetic, no pass over memory.
VIEWS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Shape", "Size", "Constant", "Dropout",
         "ConstantOfShape", "Range")
# Nodes that copy or rearrange: no arithmetic, bytes in and out.
MOVES = ("Transpose", "Concat", "Split", "Slice", "Gather", "GatherElements", "GatherND", "Pad", "Expand", "Tile",
         "Cast", "DepthToSpace", "SpaceToDepth", "Resize", "Upsample", "ScatterND", "Where", "NonZero", "TopK",
         "ReorderInput", "ReorderOutput", "QLinearConcat")
GATHERS = ("Gather", "GatherElements", "GatherND")
_CONVS_WITH_FORM = ("Conv", "ConvInteger", "QLinearConv", "FusedConv", "NhwcConv", "ConvTranspose")
FUSABLE = ("Relu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "LeakyRelu", "Tanh", "BatchNormalization",
           "PRelu", "Elu", "Selu", "Softplus")
POOLS = ("MaxPool", "AveragePool", "LpPool", "NhwcMaxPool", "QLinearAveragePool")
GLOBAL_POOLS = ("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "QLinearGlobalAveragePool")
# Operations per output element where one element costs more than one (an estimate: exp, sums, divisions).
PER_ELEMENT = {"Softmax": 5, "LogSoftmax": 5, "LayerNormalization": 8, "InstanceNormalization": 8,
               "GroupNormalization": 8, "SkipLayerNormalization": 9, "SimplifiedLayerNormalization": 6,
               "SkipSimplifiedLayerNormalization": 7, "FastGelu": 8, "BiasGelu": 9, "QLinearSigmoid": 4, "BatchNormalization": 2, "Erf": 4, "Gelu": 8, "HardSwish": 3,
               "Sigmoid": 4, "Tanh": 4, "Exp": 4, "Log": 4, "Pow": 4, "Sqrt": 2, "Reciprocal": 2, "Div": 2,
               "QuantizeLinear": 3, "DequantizeLinear": 2, "DynamicQuantizeLinear": 4}
_QUANTIZED = ("int8", "uint8", "int4", "uint4")
_NCHWC = "com.microsoft.nchwc"  # the domain of onnxruntime's blocked-layout convolutions in its executed graph
_UNBLOCKED_CONVS = ("Conv", "FusedConv")  # float convolutions it runs as im2col + SGEMM outside that domain
_INT8_KERNELS = ("ConvInteger", "QLinearConv", "MatMulInteger", "QLinearMatMul", "QGemm", "DynamicQuantizeMatMul",
                 "MatMulIntegerToFloat", "QLinearAdd", "QLinearMul", "QLinearConcat", "QLinearSigmoid",
                 "QLinearLeakyRelu", "QLinearAveragePool", "QLinearGlobalAveragePool", "QLinearSoftmax",
                 "DynamicQuantizeLSTM", "QAttention")
# Ops whose QDQ form runtimes run as one INT8 kernel (onnxruntime's QDQ fusions: QLinearConv,
# QLinearMatMul, QGemm, QLinearAdd/Mul, QLinearConcat, QLinear pools and activations; TFLite and
# TensorRT cover at least these) or on INT8 data as it is (layout moves and views).
INT8_KERNEL_OPS = ("Conv", "ConvTranspose", "MatMul", "Gemm", "Add", "Mul", "Concat", "AveragePool",
                   "GlobalAveragePool", "MaxPool", "NhwcMaxPool", "GlobalMaxPool", "Sigmoid", "LeakyRelu", "Relu", "Clip") + MOVES + VIEWS


@dataclass
class NodeCost:
    name: str
    op_type: str
    ops: float  # arithmetic operations (a multiply-accumulate is 2)
    weight_bytes: float
    activation_bytes: float
    precision: str  # the precision its arithmetic runs at: "fp32" | "fp16" | "int8"
    role: str  # "compute" | "elementwise" | "move" | "dispatch" (a view the runtime runs) | "view" | "fused" | "folded"
    note: str = ""
    kind: str = ""  # the kernel kind it runs (node_kinds): what its achieved speed depends on
    padded_ops: float = 0.0  # operations its kernel performs where padding makes them more than `ops`; 0: `ops`
    form: str = ""  # a convolution's kernel and stride, "3x3/1" ("/g" where grouped, not depthwise); "": not one

    @property
    def kernel_ops(self) -> float:
        """Operations its kernel really performs (a GEMM_CONV node's whole SGEMM panels), which its time depends on."""
        return self.padded_ops or self.ops

    @property
    def bytes(self) -> float:
        return self.weight_bytes + self.activation_bytes

    @property
    def intensity(self) -> Optional[float]:
        """Operations per byte moved; None for a node that moves nothing."""
        return self.ops / self.bytes if self.bytes else None

    @property
    def macs(self) -> float:
        return self.ops / 2

    def to_dict(self) -> dict:
        data = asdict(self)
        data["bytes"] = self.bytes
        data["intensity"] = None if self.intensity is None else round(self.intensity, 4)
        return data


@dataclass
class GraphCost:
    nodes: List[NodeCost]
    inputs: Dict[str, Tuple[int, ...]]
    notes: List[str] = field(default_factory=list)

    @property
    def ops(self) -> float:
        return sum(n.ops for n in self.nodes)

    @property
    def bytes(self) -> float:
        return sum(n.bytes for n in self.nodes)

    @property
    def macs(self) -> float:
        """Multiply-accumulates of the convolutions, matrix products and recurrences."""
        return sum(n.macs for n in self.nodes if n.role == "compute")

    @property
    def precision(self) -> str:
        """The artifact's precision: int8 when any compute node runs INT8, else that of its compute nodes."""
        precisions = {n.precision for n in self.nodes if n.role == "compute"}
        for p in ("int8", "fp16"):
            if p in precisions:
                return p
        return "fp32"


_ELEMENT_BYTES = {"float": 4, "float32": 4, "float16": 2, "bfloat16": 2, "double": 8, "float64": 8, "int8": 1,
                  "uint8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "bool": 1,
                  "int4": 0.5, "uint4": 0.5}


@dataclass(frozen=True)
class _Tensor:
    shape: Optional[Tuple[int, ...]]
    dtype: str

    @property
    def elements(self) -> Optional[int]:
        return None if self.shape is None else int(math.prod(self.shape))

    @property
    def nbytes(self) -> float:
        return 0.0 if self.shape is None else self.elements * _ELEMENT_BYTES.get(self.dtype, 4)


InputShapes = Union[Sequence[Sequence[int]], Mapping[str, Sequence[int]]]


def analyze_onnx(model: Union[str, Path, Any], input_shapes: InputShapes = (),
                 runtime: Optional[str] = None) -> GraphCost:
    """Per-node cost of an ONNX model. `input_shapes` fixes the graph inputs' shapes, in order or by name.
    `runtime="onnxruntime"`: cost the graph onnxruntime executes on this host (`ort_graph`) instead; a
    runtime's row says whether its executed graph can be costed (`executed_graph`)."""
    executed = [r.name for r in runtimes.TABLE if r.executed_graph]
    if runtime is not None and runtime not in executed:
        raise UserError(f"no executed graph for runtime {runtime!r}; available: {', '.join(executed)}")
    onnx = require("onnx", "convert")
    if not hasattr(model, "graph"):
        path = Path(model)
        if not path.is_file():
            raise UserError(f"model not found: {path}")
        try:
            model = onnx.load(str(path))
        except Exception as exc:
            raise UserError(f"{path.name} is not an ONNX model: {exc}") from exc
    notes: List[str] = []
    model = _with_fixed_inputs(model, input_shapes, notes)
    if runtime is not None:  # onnxruntime's: the only executed graph the converter can read
        from .ort_graph import LEVEL, optimized

        model = optimized(model)
        notes.append(f"costed as onnxruntime executes it on this host (graph optimized at {LEVEL})")
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception as exc:
        inferred = model
        notes.append(f"shape inference failed ({type(exc).__name__}); nodes with unknown shapes cost nothing here")
    graph = inferred.graph
    tensors = _tensors(onnx, graph)
    unknown = [o for n in graph.node for o in n.output if o and (o not in tensors or tensors[o].shape is None)]
    if unknown:
        found = _shapes_by_running(onnx, model, unknown)
        tensors.update(found)
        if found:
            notes.append(f"shapes of {len(found)} tensor(s) shape inference could not give come from one onnxruntime run")
    weights = {init.name for init in graph.initializer}
    weights |= {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    inputs = {i.name: tensors[i.name].shape for i in graph.input if i.name not in weights}
    folded = _constant_folded(graph, tensors, weights)
    analysis = _Graph(graph, tensors, weights | {o for i, n in enumerate(graph.node) if i in folded for o in n.output}, folded,
                      executed=runtime is not None)
    nodes = [analysis.cost(node, index) for index, node in enumerate(graph.node)]
    unknown = [n.name for n in nodes if n.note.startswith("unknown shape")]
    if unknown:
        notes.append(f"{len(unknown)} node(s) have no inferred shape and count nothing: {', '.join(unknown[:5])}")
    if any(f.op_type in ("If", "Loop", "Scan") for f in nodes):
        notes.append("control-flow subgraphs (If/Loop/Scan) are not analysed")
    return GraphCost(nodes, inputs, notes)


def _constant_folded(graph, tensors: Mapping[str, "_Tensor"], weights: set) -> set:
    """Positions in graph.node of the nodes a runtime computes once, when it loads the graph: every
    input a weight or itself computed once, or the shape of a tensor whose shape is fixed.
    Quantize/dequantize nodes stay (runtimes keep them to fuse into INT8 kernels). Positions, not
    id(): protobuf hands out a new wrapper object, and so a new (or reused) id, on each access."""
    constant = set(weights)
    folded = set()
    for index, node in enumerate(graph.node):
        inputs = [i for i in node.input if i]
        # Control flow reads outer tensors its inputs do not list: never computed once.
        if node.op_type in ("QuantizeLinear", "DequantizeLinear", "Constant", "If", "Loop", "Scan"):
            continue
        static_shape = node.op_type in ("Shape", "Size") and inputs and tensors.get(inputs[0]) is not None \
            and tensors[inputs[0]].shape is not None
        if static_shape or (inputs and all(i in constant for i in inputs)):
            folded.add(index)
            constant.update(o for o in node.output if o)
    return folded


def _shapes_by_running(onnx, model, names: Sequence[str]) -> Dict[str, "_Tensor"]:
    """Run the model once in onnxruntime (no graph optimization) with `names` as extra outputs."""
    try:
        import numpy as np
        import onnxruntime as ort
    except ImportError:
        return {}
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    existing = {o.name for o in probe.graph.output}
    probe.graph.output.extend(onnx.ValueInfoProto(name=n) for n in dict.fromkeys(names) if n not in existing)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])
        feeds = {}
        for i in session.get_inputs():
            dtype = onnx.helper.tensor_dtype_to_np_dtype(
                next(v for v in probe.graph.input if v.name == i.name).type.tensor_type.elem_type)
            shape = [d if isinstance(d, int) else 1 for d in i.shape]
            feeds[i.name] = (np.random.default_rng(0).random(shape).astype(dtype) if dtype.kind == "f"
                             else np.zeros(shape, dtype))
        values = session.run([o.name for o in session.get_outputs()], feeds)
    except Exception:  # the analysis goes on with the shapes inference gave; the note names what is missing
        return {}
    wanted = set(names)
    return {o.name: _Tensor(tuple(int(d) for d in np.shape(v)), np.asarray(v).dtype.name)
            for o, v in zip(session.get_outputs(), values) if o.name in wanted}


def _with_fixed_inputs(model, shapes: InputShapes, notes: List[str]):
    """A copy of `model` with every graph input's free dimensions fixed: to `shapes` (in input order,
    or by input name), else to 1, which `notes` reports for any axis but the batch axis."""
    onnx = require("onnx", "convert")
    model_copy = onnx.ModelProto()
    model_copy.CopyFrom(model)
    initializers = {i.name for i in model_copy.graph.initializer}
    graph_inputs = [i for i in model_copy.graph.input if i.name not in initializers]
    names = [i.name for i in graph_inputs]
    if isinstance(shapes, Mapping):
        unknown = [name for name in shapes if name not in names]
        if unknown:
            raise UserError(f"the model has no input '{unknown[0]}'; its inputs: {', '.join(names)}")
        wanted_shapes = [shapes.get(name) for name in names]
    else:
        if shapes and len(shapes) != len(graph_inputs):
            raise UserError(f"the model has {len(graph_inputs)} inputs ({', '.join(names)}), "
                            f"got {len(shapes)} input shapes")
        wanted_shapes = list(shapes) if shapes else [None] * len(graph_inputs)
    defaulted = []
    for graph_input, wanted in zip(graph_inputs, wanted_shapes):
        dims = graph_input.type.tensor_type.shape.dim
        wanted = list(wanted) if wanted is not None else None
        if wanted is not None and len(wanted) != len(dims):
            raise UserError(f"input '{graph_input.name}' has {len(dims)} dimensions, got shape {wanted}")
        for axis, dim in enumerate(dims):
            if wanted is not None and int(wanted[axis]) > 0:  # a "?" (-1) dim stays free: 1 below
                dim.Clear()
                dim.dim_value = int(wanted[axis])
            elif not dim.HasField("dim_value") or dim.dim_value <= 0:
                dim.Clear()
                dim.dim_value = 1
                if axis > 0:
                    defaulted.append(f"'{graph_input.name}' axis {axis}")
    if defaulted:
        notes.append(f"free size{'s' if len(defaulted) > 1 else ''} costed at 1: {', '.join(defaulted)}; "
                     f"give the input shapes the model runs with (--input-shape)")
    return model_copy


def _tensors(onnx, graph) -> Dict[str, _Tensor]:
    found: Dict[str, _Tensor] = {}

    def dtype_name(elem_type: int) -> str:
        return onnx.helper.tensor_dtype_to_np_dtype(elem_type).name if elem_type else "float32"

    for value in list(graph.input) + list(graph.value_info) + list(graph.output):
        tensor_type = value.type.tensor_type
        dims = tensor_type.shape.dim if tensor_type.HasField("shape") else None
        shape = None
        if dims is not None and all(d.HasField("dim_value") for d in dims):
            shape = tuple(int(d.dim_value) for d in dims)
        found[value.name] = _Tensor(shape, dtype_name(tensor_type.elem_type))
    for init in graph.initializer:
        found[init.name] = _Tensor(tuple(int(d) for d in init.dims), dtype_name(init.data_type))
    for node in graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value":
                    found[node.output[0]] = _Tensor(tuple(int(d) for d in attr.t.dims), dtype_name(attr.t.data_type))
    return found


def _attribute(node, name: str, default=None):
    for attr in node.attribute:
        if attr.name == name:
            if attr.type == attr.INT:
                return attr.i
            if attr.type == attr.INTS:
                return list(attr.ints)
            if attr.type == attr.FLOAT:
                return attr.f
            if attr.type == attr.STRING:
                return attr.s.decode()
    return default


class _Graph:
    def __init__(self, graph, tensors: Mapping[str, _Tensor], weights: set, folded: set = frozenset(),
                 executed: bool = False):
        self.executed = executed  # the runtime's own optimized graph: no fusion to guess, every node runs
        self.tensors = tensors
        self.weights = weights
        self.folded = folded  # positions in graph.node of the nodes computed once at load time
        self.producer = {o: n for n in graph.node for o in n.output}
        self.consumers: Dict[str, list] = {}
        for n in graph.node:
            for i in n.input:
                if i:
                    self.consumers.setdefault(i, []).append(n)
        self.graph_outputs = {o.name for o in graph.output}
        self.graph_inputs = {i.name for i in graph.input}

    def tensor(self, name: str) -> _Tensor:
        return self.tensors.get(name, _Tensor(None, "float32"))

    def _dq_source(self, name: str) -> Optional[str]:
        """The quantized tensor a DequantizeLinear output was made from, if it was."""
        node = self.producer.get(name)
        if node is not None and node.op_type == "DequantizeLinear":
            return node.input[0]
        return None

    def int8_kernel(self, node) -> bool:
        return node.op_type in _INT8_KERNELS or node.op_type in INT8_KERNEL_OPS

    def read_bytes(self, name: str, reader) -> float:
        """Bytes `reader` reads for `name`: an INT8 kernel reads a dequantized tensor at its quantized size."""
        source = None if self.executed else self._dq_source(name)
        return self.tensor(source).nbytes if source and self.int8_kernel(reader) else self.tensor(name).nbytes

    def write_bytes(self, name: str, writer) -> float:
        """Bytes `writer` writes for `name`: an INT8 kernel whose output is only quantized writes it quantized."""
        users = self.consumers.get(name, [])
        if (not self.executed and users and name not in self.graph_outputs and self.int8_kernel(writer)
                and all(u.op_type == "QuantizeLinear" for u in users)):
            return self.tensor(users[0].output[0]).nbytes
        return self.tensor(name).nbytes

    def is_weight(self, name: str) -> bool:
        if name in self.weights:
            return True
        source = self._dq_source(name)
        return source is not None and source in self.weights

    def _quantized_inputs(self, node) -> bool:
        if node.op_type in _INT8_KERNELS:
            return True
        if node.op_type not in INT8_KERNEL_OPS:
            return False
        if self.executed:  # a layout move or pool the runtime left on 8-bit data
            return bool(node.input) and self.tensor(node.input[0]).dtype in _QUANTIZED
        data = [i for i in node.input[:2] if i]
        return bool(data) and all(self._dq_source(i) is not None and self.tensor(self._dq_source(i)).dtype in _QUANTIZED
                                  for i in data)

    def _fused_into_producer(self, node) -> bool:
        if self.executed or node.op_type not in FUSABLE or not node.input:
            return False
        source = self.producer.get(node.input[0])
        return (source is not None and source.op_type in COMPUTE
                and len(self.consumers.get(node.input[0], [])) == 1 and node.input[0] not in self.graph_outputs)

    def _folded_qdq(self, node) -> bool:
        """A Q/DQ node the runtime folds into its neighbours' INT8 kernels."""
        if self.executed:
            return False
        if node.op_type == "DequantizeLinear":
            users = self.consumers.get(node.output[0], [])
            if not users or node.output[0] in self.graph_outputs or not all(self.int8_kernel(u) for u in users):
                return False
            return node.input[0] in self.weights or node.input[0] in self.producer or node.input[0] in self.graph_inputs
        if node.op_type == "QuantizeLinear":
            users = self.consumers.get(node.output[0], [])
            producer = self.producer.get(node.input[0])
            return (producer is not None and self.int8_kernel(producer)
                    and (bool(users) or node.output[0] in self.graph_outputs)
                    and all(u.op_type == "DequantizeLinear" for u in users))
        return False

    def kind(self, node, precision: str) -> str:
        """The kernel kind `node` runs, `precision` being the one its arithmetic runs at (`_precision`)."""
        weight = None
        if len(node.input) > 1:
            weight = self.tensor(node.input[3 if node.op_type == "QLinearConv" else 1]).shape
        kind = kind_of(node.op_type, weight, int(_attribute(node, "group", 1)), VIEWS, MOVES)
        if (self.executed and node.op_type in _UNBLOCKED_CONVS and node.domain != _NCHWC and kind != DEPTHWISE
                and precision == "fp32"):
            return GEMM_CONV
        return kind

    def conv_form(self, node, kind: str) -> str:
        """A convolution's kernel and stride, "3x3/1" (and "/g" when grouped but not depthwise): what runtimes
        pick their algorithm by (Winograd for 3x3 stride 1); "" for any other node."""
        if node.op_type not in _CONVS_WITH_FORM:
            return ""
        weight = self.tensor(node.input[3 if node.op_type == "QLinearConv" else 1]).shape if len(node.input) > 1 else None
        kernel = _attribute(node, "kernel_shape", None) or (list(weight[2:]) if weight else [])
        strides = _attribute(node, "strides", None) or [1] * len(kernel)
        if not kernel:
            return ""
        grouped = int(_attribute(node, "group", 1)) > 1 and kind != DEPTHWISE
        return "x".join(str(k) for k in kernel) + "/" + "x".join(str(s) for s in dict.fromkeys(strides)) + \
            ("/g" if grouped else "")

    def cost(self, node, index: int) -> NodeCost:
        name = node.name or f"{node.op_type}_{index}"
        op = node.op_type
        outputs = [self.tensor(o) for o in node.output if o]
        precision = self._precision(node)
        kind = self.kind(node, precision)
        if op in VIEWS and not (self.executed and index not in self.folded):
            return NodeCost(name, op, 0.0, 0.0, 0.0, precision, "view", kind=kind)
        if op in VIEWS:  # the runtime still runs it: no work, but one kernel dispatch
            return NodeCost(name, op, 0.0, 0.0, 0.0, precision, "dispatch", "relabels a tensor; still a kernel call",
                            kind)
        if index in self.folded:
            return NodeCost(name, op, 0.0, 0.0, 0.0, precision, "folded", "computed once when the graph is loaded "
                            "(constant inputs)", kind)
        if op in ("QuantizeLinear", "DequantizeLinear") and self._folded_qdq(node):
            return NodeCost(name, op, 0.0, 0.0, 0.0, precision, "folded", "folded into the INT8 kernels next to it",
                            kind)
        if any(t.shape is None for t in outputs):
            return NodeCost(name, op, 0.0, 0.0, 0.0, precision, "compute" if op in COMPUTE else "elementwise",
                            "unknown shape", kind)
        read = {i: self.read_bytes(i, node) for i in node.input if i}
        if op in GATHERS and node.input[0] in read:  # reads the rows it gathers, not the whole table
            read[node.input[0]] = min(read[node.input[0]], outputs[0].nbytes)
        weight_bytes = sum(b for i, b in read.items() if self.is_weight(i))
        activation_bytes = sum(b for i, b in read.items() if not self.is_weight(i))
        activation_bytes += sum(self.write_bytes(o, node) for o in node.output if o)
        ops, role = self._ops(node, outputs)
        if self._fused_into_producer(node):
            return NodeCost(name, op, ops, 0.0, 0.0, precision, "fused", "fused into the node before it", kind)
        padded = gemm_conv_ops(ops, math.prod(outputs[0].shape[2:])) if kind == GEMM_CONV else 0.0
        return NodeCost(name, op, ops, weight_bytes, activation_bytes, precision, role, kind=kind,
                        padded_ops=padded if padded > ops else 0.0, form=self.conv_form(node, kind))

    def _precision(self, node) -> str:
        if node.op_type == "MatMulNBits":  # weight-only: the product runs in float unless accuracy_level 4 asks int8
            return "int8" if int(_attribute(node, "accuracy_level", 0)) == 4 else "fp32"
        if self._quantized_inputs(node):
            return "int8"
        data = [i for i in node.input[:1] if i]
        if data and self.tensor(data[0]).dtype == "float16":
            return "fp16"
        return "fp32"

    def _ops(self, node, outputs: List[_Tensor]) -> Tuple[float, str]:
        op = node.op_type
        out = outputs[0]

        def shape(position: int) -> Optional[Tuple[int, ...]]:
            return self.tensor(node.input[position]).shape if len(node.input) > position and node.input[position] else None

        if op in ("Conv", "ConvInteger", "FusedConv", "NhwcConv", "QLinearConv"):
            weight = shape(3 if op == "QLinearConv" else 1)
            if weight is None:
                return 0.0, "compute"
            return 2.0 * out.elements * weight[1] * math.prod(weight[2:]), "compute"
        if op == "ConvTranspose":
            data, weight = shape(0), shape(1)
            if weight is None or data is None:
                return 0.0, "compute"
            return 2.0 * math.prod(data) * weight[1] * math.prod(weight[2:]), "compute"
        if op in ("MatMul", "MatMulInteger", "FusedMatMul", "QLinearMatMul", "DynamicQuantizeMatMul",
                  "MatMulIntegerToFloat"):
            a = shape(0)
            if a is None:
                return 0.0, "compute"
            k = a[-2] if op == "FusedMatMul" and _attribute(node, "transA", 0) else a[-1]
            return 2.0 * out.elements * k, "compute"
        if op == "MatMulNBits":  # weights packed in 4/8-bit blocks; K and N are attributes
            a = shape(0)
            k = int(_attribute(node, "K", 0)) or (a[-1] if a else 0)
            return 2.0 * out.elements * k, "compute"
        if op in ("Gemm", "FusedGemm", "QGemm"):
            a = shape(0)
            if a is None:
                return 0.0, "compute"
            k = a[0] if _attribute(node, "transA", 0) else a[-1]
            return 2.0 * out.elements * k, "compute"
        if op in ("Attention", "QAttention"):
            return self._attention_ops(node), "compute"
        if op in ("LSTM", "DynamicQuantizeLSTM", "GRU", "RNN"):
            return self._recurrent_ops(node), "compute"
        if op in POOLS:
            return float(out.elements * math.prod(_attribute(node, "kernel_shape", [1]))), "elementwise"
        if op in GLOBAL_POOLS or op.startswith("Reduce"):
            data = shape(0)
            return float(math.prod(data) if data else out.elements), "elementwise"
        if op in MOVES:
            return 0.0, "move"
        return float(PER_ELEMENT.get(op, 1) * out.elements), "elementwise"

    def _attention_ops(self, node) -> float:
        """onnxruntime's fused self-attention: the Q, K and V projections (input (B, S, H) @ weights (H, 3H)),
        scores and context (two (S x S x H) products per batch) and the softmax over the scores."""
        data, weight = self.tensor(node.input[0]).shape, self.tensor(node.input[1]).shape
        if data is None or weight is None or len(data) != 3:
            return 0.0
        batch, steps, _ = data
        heads = int(_attribute(node, "num_heads", 1))
        projection = 2.0 * batch * steps * weight[0] * weight[1]
        core = 2.0 * 2.0 * batch * steps * steps * (weight[1] // 3)
        return projection + core + PER_ELEMENT["Softmax"] * batch * heads * steps * steps

    def _recurrent_ops(self, node) -> float:
        data, weight = self.tensor(node.input[0]).shape, self.tensor(node.input[1]).shape
        recurrence = self.tensor(node.input[2]).shape
        if data is None or weight is None or recurrence is None:
            return 0.0
        steps, batch = data[0], data[1]
        if node.op_type == "DynamicQuantizeLSTM":  # its weights are stored transposed: (directions, input, 4 * hidden)
            (directions, input_size, gates_hidden), hidden = weight, recurrence[1]
        else:
            (directions, gates_hidden, input_size), hidden = weight, recurrence[2]
        return 2.0 * steps * batch * directions * gates_hidden * (input_size + hidden)


def by_op_type(nodes: Sequence[NodeCost]) -> Dict[str, Dict[str, float]]:
    """Operations, bytes and node count per op type."""
    totals: Dict[str, Dict[str, float]] = {}
    for n in nodes:
        t = totals.setdefault(n.op_type, {"nodes": 0, "ops": 0.0, "bytes": 0.0})
        t["nodes"] += 1
        t["ops"] += n.ops
        t["bytes"] += n.bytes
    return totals
