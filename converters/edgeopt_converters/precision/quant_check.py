"""Is an INT8 artifact really quantized? Its weight bytes against FP32's say so."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from edgeopt_agent.errors import require

MAX_RATIO = 0.35  # INT8 weights are 1/4 of FP32's; scales, zero points and INT32 biases add a little


@dataclass(frozen=True)
class WeightCheck:
    fp32_bytes: int
    bytes: int
    int8_bytes: int  # weights stored as 8-bit (or packed 4-bit) integers

    @property
    def ratio(self) -> float:
        return self.bytes / self.fp32_bytes if self.fp32_bytes else 1.0

    @property
    def quantized(self) -> bool:
        return self.ratio <= MAX_RATIO

    def describe(self) -> str:
        return (f"its weights take {self.bytes / 2**20:.2f} MiB against FP32's {self.fp32_bytes / 2**20:.2f} MiB "
                f"({self.ratio:.2f}x; INT8 weights should be about 0.25x)")

    def to_dict(self) -> dict:
        return {"fp32_bytes": self.fp32_bytes, "bytes": self.bytes, "int8_bytes": self.int8_bytes,
                "ratio": round(self.ratio, 3), "quantized": self.quantized}


LOOKED_UP = {"Gather": 0, "GatherElements": 0, "GatherND": 0}  # op type -> the input it reads rows of


def _graphs(graph):
    """A graph and every subgraph under it (If branches, Loop and Scan bodies)."""
    yield graph
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.g.node:
                yield from _graphs(attribute.g)
            for sub in attribute.graphs:
                yield from _graphs(sub)


def _weight_bytes(path: Path):
    """(bytes of the weights that feed compute, of those stored in 8 bits or fewer). A table only looked up
    by a Gather (an embedding), directly or through its DequantizeLinear, is not compute: quantizing the
    matrix products leaves it as it is."""
    onnx = require("onnx", "convert")
    from onnx import numpy_helper

    model = onnx.load(str(path))
    tensors = []  # (the name the graph uses, the tensor)
    uses: Dict[str, List[Tuple[str, int, Sequence[str]]]] = {}  # name -> (op type, input index, its outputs)
    for graph in _graphs(model.graph):
        tensors += [(t.name, t) for t in graph.initializer]
        for node in graph.node:  # weights a model keeps in Constant nodes count too
            if node.op_type == "Constant":
                tensors += [(node.output[0], a.t) for a in node.attribute if a.name == "value"]
            for index, name in enumerate(node.input):
                uses.setdefault(name, []).append((node.op_type, index, list(node.output)))

    def looked_up(name: str, depth: int = 0) -> bool:
        found = uses.get(name)
        return bool(found) and depth < 4 and all(
            LOOKED_UP.get(op) == index or (op == "DequantizeLinear" and index == 0 and all(looked_up(o, depth + 1) for o in outs))
            for op, index, outs in found)

    total = small = 0
    for name, tensor in tensors:
        if looked_up(name):
            continue
        array = numpy_helper.to_array(tensor)
        if array.size < 16:  # scales, zero points, shapes
            continue
        total += array.nbytes
        if array.dtype.itemsize == 1:
            small += array.nbytes
    return total, small


def check_weights(fp32: Path, quantized: Path) -> WeightCheck:
    fp32_total, _ = _weight_bytes(fp32)
    total, small = _weight_bytes(quantized)
    return WeightCheck(fp32_total, total, small)
