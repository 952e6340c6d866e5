"""What the graph says of each output: the op that makes it (a Softmax says probabilities over
classes, a Sigmoid a probability) and, where a Linear layer makes it, whether that layer reads
pooled features (a classifier's head; graph_heads.py)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Union

from edgeopt_agent.errors import require

from .graph_heads import POOL_OPS, LinearHead, linear_head

# Ops that move, relabel, pick or average values without changing what they are (a mean of
# probabilities is a probability): the op before them says what the values are.
PASS_THROUGH = frozenset({"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Cast",
                          "QuantizeLinear", "DequantizeLinear", "Slice", "Gather", "ReduceMean", "ReduceMax",
                          "ReduceMin"})


@dataclass(frozen=True)
class OutputGraph:
    op: str  # the op type making the output, through PASS_THROUGH ops (and an If's branches)
    head: Optional[LinearHead] = None  # the Linear layer that op belongs to, if it is one
    pooled: Optional[str] = None  # the pooling op on the way to the output (a ReduceMean over space), if any


def graph_evidence(onnx_path: Union[str, Path, None]) -> Dict[str, OutputGraph]:
    """{output name: what the graph says of it}, looking through PASS_THROUGH ops.

    An output fed straight by a graph input or initializer is left out; a path that is missing or
    not an ONNX model gives {} (graph evidence is optional: kinds fall back to names and values)."""
    if onnx_path is None or not Path(onnx_path).is_file():
        return {}
    onnx = require("onnx", "convert", "to read which op produces each output")
    from google.protobuf.message import DecodeError
    try:
        model = onnx.load(str(onnx_path), load_external_data=False)
    except (DecodeError, OSError):  # not an ONNX model: no graph evidence (loading it is another step's job)
        return {}
    graph = model.graph
    producers = {out: node for node in graph.node for out in node.output}
    constants = frozenset([i.name for i in graph.initializer] + [o for n in graph.node if n.op_type == "Constant"
                                                                  for o in n.output])
    found = {}
    for output in graph.output:
        op = _producer_op(graph, output.name)
        if op:
            node, _ = _through(producers, output.name)
            found[output.name] = OutputGraph(op, linear_head(node, producers, constants) if node is not None else None,
                                             _pooled(producers, output.name))
    return found


def _through(producers, name: str):
    """(the node making `name` looking through PASS_THROUGH ops, the name it makes), node None where
    nothing makes it."""
    node, seen = producers.get(name), 0
    while node is not None and node.op_type in PASS_THROUGH and node.input and seen < len(producers):
        name = node.input[0]
        node, seen = producers.get(name), seen + 1
    return node, name


def _pooled(producers, name: str) -> Optional[str]:
    """The first pooling op met walking from `name` back through PASS_THROUGH ops, the op reached included."""
    node, seen = producers.get(name), 0
    while node is not None and seen < len(producers):
        if node.op_type in POOL_OPS:
            return node.op_type
        if node.op_type not in PASS_THROUGH or not node.input:
            return None
        node, seen = producers.get(node.input[0]), seen + 1
    return None


def _producer_op(graph, name: str, depth: int = 0, outer: Optional[Dict[str, object]] = None):
    """The op type that makes `name` in `graph`, through PASS_THROUGH ops and into the branches of an
    If (a model that branches on a setting, as Silero VAD on its sample rate; a branch may read the
    values of the graphs around it): the op both branches end in, when they agree. None where
    nothing produces it."""
    producers = {**(outer or {}), **{out: node for node in graph.node for out in node.output}}
    node, name = _through(producers, name)
    if node is None:
        return None
    if node.op_type != "If" or depth >= 4:
        return node.op_type
    index = list(node.output).index(name)
    branches = [a.g for a in node.attribute if a.name in ("then_branch", "else_branch")]
    ops = {_producer_op(b, b.output[index].name, depth + 1, producers) for b in branches if len(b.output) > index}
    return ops.pop() if len(ops) == 1 and None not in ops else "If"

