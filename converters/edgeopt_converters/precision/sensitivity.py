"""Which nodes of a quantized (or FP16) model lose the most precision, measured against FP32.

Both models are run with every intermediate float tensor exposed. For each node of the low-precision
model, the signal-to-quantization-noise ratio (SQNR, dB) of what it reads is compared with the SQNR
of what its consumers read from it (after its output's Q/DQ, where there is one). The drop between
the two is the error that node adds: the node to keep in float first is the one with the largest.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Set

import numpy as np

from edgeopt_agent.errors import require
from edgeopt_agent.runners.onnxruntime.importing import import_onnxruntime

from ..passes.float_nodes import is_float_guard
from .graph_regions import typed_values

CAP_DB = 60.0  # SQNR past this is as good as exact: keeps drops finite and ignores harmless rounding
_QDQ = ("QuantizeLinear", "DequantizeLinear")
_RENAMED = ("_QuantizeLinear_Input",)  # onnxruntime renames a quantized graph output's producer output


@dataclass(frozen=True)
class NodeSensitivity:
    name: str
    op_type: str
    drop_db: float  # SQNR lost across this node
    output_sqnr_db: float

    def to_dict(self) -> dict:
        return {"node": self.name, "op_type": self.op_type, "sqnr_drop_db": round(self.drop_db, 2),
                "output_sqnr_db": round(self.output_sqnr_db, 2)}


def _float_tensor_types(model) -> Dict[str, int]:
    return {value.name: value.type.tensor_type.elem_type for value in typed_values(model)}


def _expose(model, names: Iterable[str], elem_types: Mapping[str, int]):
    """A copy of `model` whose graph outputs include `names` (typed, shapes left to the runtime)."""
    onnx = require("onnx", "convert")
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    present = {o.name for o in copy.graph.output}
    for name in names:
        if name not in present:
            copy.graph.output.append(onnx.helper.make_tensor_value_info(name, elem_types.get(name, onnx.TensorProto.FLOAT), None))
            present.add(name)
    return copy


def _run_all(model, names: Sequence[str], feeds: Sequence[Mapping[str, np.ndarray]], threads: int) -> Iterable[Dict[str, np.ndarray]]:
    ort = import_onnxruntime("convert", "sensitivity analysis")
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # keep every tensor
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    inputs = {i.name for i in session.get_inputs()}
    wanted = [o.name for o in session.get_outputs() if o.name in set(names)]
    for feed in feeds:
        values = session.run(wanted, {k: v for k, v in feed.items() if k in inputs})
        yield dict(zip(wanted, values))


def node_sensitivity(float_model: Path, low_model: Path, feeds: Sequence[Mapping[str, np.ndarray]],
                     threads: int = 1, candidates: Optional[Set[str]] = None) -> List[NodeSensitivity]:
    """Nodes of `low_model`, the most sensitive first. `candidates` limits which are ranked."""
    onnx = require("onnx", "convert")
    reference = onnx.load(str(float_model))
    low = onnx.load(str(low_model))
    ref_types = _float_tensor_types(reference)
    low_types = _float_tensor_types(low)
    floats = {n for n, t in ref_types.items() if t == onnx.TensorProto.FLOAT}
    initializers = {i.name for i in low.graph.initializer}
    producer = {out: node for node in low.graph.node for out in node.output}
    consumers: Dict[str, list] = {}
    for node in low.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)

    cast_to = {n.input[0]: n.output[0] for n in low.graph.node if n.op_type == "Cast"}

    def float_name(tensor: str, seen_casts: int = 0) -> Optional[str]:
        """The FP32 model's name for a tensor of the low-precision model (Casts keep the value)."""
        if tensor in floats:
            return tensor
        if seen_casts < 4:
            node = producer.get(tensor)
            if node is not None and node.op_type == "Cast":
                return float_name(node.input[0], seen_casts + 1)
            if tensor in cast_to and cast_to[tensor] in floats:
                return cast_to[tensor]
        for suffix in _RENAMED:
            if tensor.endswith(suffix) and tensor[: -len(suffix)] in floats:
                return tensor[: -len(suffix)]
        node = producer.get(tensor)
        if node is not None and is_float_guard(node):  # a no-op Clip that keeps its reader in float
            return float_name(node.input[0], seen_casts)
        if node is not None and node.op_type == "DequantizeLinear":
            source = producer.get(node.input[0])
            if source is None:
                return None  # a quantized weight
            if source.op_type == "QuantizeLinear":
                return float_name(source.input[0])
        return None

    def seen(tensor: str) -> str:
        """What consumers read of `tensor`: the DequantizeLinear after its QuantizeLinear, if any."""
        for q in consumers.get(tensor, []):
            if q.op_type == "QuantizeLinear":
                for dq in consumers.get(q.output[0], []):
                    if dq.op_type == "DequantizeLinear":
                        return dq.output[0]
        return tensor

    pairs: Dict[str, str] = {}  # low-precision tensor -> FP32 tensor
    plan = []
    for node in low.graph.node:
        if (node.op_type in _QDQ + ("Cast",) or is_float_guard(node)
                or (candidates is not None and node.name not in candidates)):
            continue
        ins = [(i, float_name(i)) for i in node.input if i and i not in initializers]
        ins = [(i, f) for i, f in ins if f is not None]
        outs = [(seen(o), float_name(o)) for o in node.output if o]
        outs = [(s, f) for s, f in outs if f is not None]
        if not outs:
            continue
        plan.append((node, ins, outs))
        pairs.update(dict(ins))
        pairs.update(dict(outs))
    if not plan:
        return []
    signal: Dict[str, float] = {}
    noise: Dict[str, float] = {}
    ref_runs = _run_all(_expose(reference, set(pairs.values()), ref_types), list(set(pairs.values())), feeds, threads)
    low_runs = _run_all(_expose(low, set(pairs), low_types), list(pairs), feeds, threads)
    for ref, got in zip(ref_runs, low_runs):
        for tensor, name in pairs.items():
            if tensor not in got or name not in ref:
                continue
            a = np.asarray(ref[name], np.float64)
            b = np.asarray(got[tensor], np.float64)
            if a.shape != b.shape:
                continue
            axes = tuple(i for i in range(a.ndim) if i != 1) if a.ndim >= 2 else None
            with np.errstate(over="ignore", invalid="ignore"):  # float-min masks: their noise is infinite
                signal[tensor] = signal.get(tensor, 0.0) + np.nan_to_num(np.sum(a * a, axis=axes), posinf=1e300)
                noise[tensor] = noise.get(tensor, 0.0) + np.nan_to_num(np.sum((a - b) ** 2, axis=axes), nan=1e300,
                                                                       posinf=1e300)

    def sqnr(tensor: str) -> float:
        """Mean over channels (axis 1) of each channel's SQNR: a concatenation of a large-valued and a
        small-valued part (boxes and scores) shows the part that quantization crushed."""
        if tensor not in signal:
            return CAP_DB
        sig, err = np.atleast_1d(signal[tensor]), np.atleast_1d(noise[tensor])
        live = sig > sig.max() * 1e-12
        if not live.any():
            return CAP_DB
        with np.errstate(divide="ignore"):
            per_channel = np.clip(10 * np.log10(sig[live] / np.maximum(err[live], 1e-300)), 0.0, CAP_DB)
        return float(per_channel.mean())

    ranked = []
    for node, ins, outs in plan:
        incoming = float(np.mean([sqnr(i) for i, _ in ins])) if ins else CAP_DB
        outgoing = min(sqnr(o) for o, _ in outs)
        ranked.append(NodeSensitivity(node.name, node.op_type, max(0.0, incoming - outgoing), outgoing))
    ranked.sort(key=lambda s: (-s.drop_db, s.output_sqnr_db, s.name))
    return ranked


def quantized_nodes(model: Path) -> Set[str]:
    """Nodes that read a DequantizeLinear output or whose output goes through a QuantizeLinear."""
    onnx = require("onnx", "convert")
    graph = onnx.load(str(model), load_external_data=False).graph
    dq_out = {o for n in graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    q_in = {n.input[0] for n in graph.node if n.op_type == "QuantizeLinear"}
    return {n.name for n in graph.node if n.op_type not in _QDQ and n.name and not is_float_guard(n)
            and (set(n.input) & dq_out or set(n.output) & q_in)}
