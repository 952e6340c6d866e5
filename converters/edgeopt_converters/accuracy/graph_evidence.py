"""Which ONNX op produces each graph output: a Softmax says probabilities over classes, a Sigmoid a probability."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, Optional, Union

from edgeopt_agent.errors import require

# Ops that move, relabel, pick or average values without changing what they are (a mean of
# probabilities is a probability): the op before them says what the values are.
PASS_THROUGH = frozenset({"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Cast",
                          "QuantizeLinear", "DequantizeLinear", "Slice", "Gather", "ReduceMean", "ReduceMax",
                          "ReduceMin"})


def graph_evidence(onnx_path: Union[str, Path, None]) -> Dict[str, str]:
    """{output name: op type of the node producing it}, looking through PASS_THROUGH ops.

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
    return {name: op for name, op in ((o.name, _producer_op(model.graph, o.name)) for o in model.graph.output) if op}


def _producer_op(graph, name: str, depth: int = 0, outer: Optional[Dict[str, object]] = None):
    """The op type that makes `name` in `graph`, through PASS_THROUGH ops and into the branches of an
    If (a model that branches on a setting, as Silero VAD on its sample rate; a branch may read the
    values of the graphs around it): the op both branches end in, when they agree. None where
    nothing produces it."""
    producers = {**(outer or {}), **{out: node for node in graph.node for out in node.output}}
    node, seen = producers.get(name), 0
    while node is not None and node.op_type in PASS_THROUGH and node.input and seen < len(producers):
        name = node.input[0]
        node, seen = producers.get(name), seen + 1
    if node is None:
        return None
    if node.op_type != "If" or depth >= 4:
        return node.op_type
    index = list(node.output).index(name)
    branches = [a.g for a in node.attribute if a.name in ("then_branch", "else_branch")]
    ops = {_producer_op(b, b.output[index].name, depth + 1, producers) for b in branches if len(b.output) > index}
    return ops.pop() if len(ops) == 1 and None not in ops else "If"
