"""ONNX patterns pnnx would leave to ncnn as operators ncnn has no layer for, rewritten before pnnx reads the graph.

pnnx lowers most ONNX operators to ncnn layers; what it cannot lower stays a pnnx operator in the
.param (a layer type such as `Tensor.slice`) and ncnn refuses to load the model. Each rewrite here
replaces one such pattern by operators pnnx lowers to native layers, computing the same values:

- space to depth by strided slices, the Focus stem of YOLOv5 (before v6) and YOLOX:
  x[..., ::2, ::2], x[..., 1::2, ::2], x[..., ::2, 1::2], x[..., 1::2, 1::2] concatenated on channels.
  ncnn's Crop takes no step, so pnnx keeps the four slices as Tensor.slice. Rewritten as
  Reshape [N, C, H/2, 2, W/2, 2] -> Transpose (0, 1, 3, 5, 2, 4) -> Reshape [N, 4C, H/2, W/2], which
  pnnx fuses into ncnn's Reorg (pixel-unshuffle order: channel c*4 + 2*row + column); the
  concatenation's own channel order is restored by permuting the input channels of the convolution
  that reads it, or, where something else reads it, by a channel Split and Concat.
  (ONNX's SpaceToDepth is no way round: pnnx lowers it to Reorg in pixel-unshuffle order, though
  SpaceToDepth's is depth-column-row, so it computes other values.)

`unsupported_layers` names what is left after pnnx: each layer type ncnn lacks and how many layers use it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

INT64_MAX = 2 ** 63 - 1


@dataclass(frozen=True)
class Rewrite:
    what: str  # the pattern, in words
    where: str  # the node it replaced

    def text(self) -> str:
        return f"{self.what} at {self.where}"


def rewrite_for_pnnx(model) -> List[Rewrite]:
    """Rewrite `model` (an onnx.ModelProto, changed in place) where pnnx would leave ncnn an operator it lacks."""
    return _focus_slices(model)


def unsupported_layers(param_text: str, has_layer) -> Dict[str, int]:
    """Layer type -> layers of that type in an ncnn .param that `has_layer(type)` says ncnn does not have."""
    counts: Dict[str, int] = {}
    for line in param_text.splitlines()[2:]:
        fields = line.split()
        if fields and not has_layer(fields[0]):
            counts[fields[0]] = counts.get(fields[0], 0) + 1
    return counts


# --- space to depth by strided slices -----------------------------------------------------------------


@dataclass(frozen=True)
class _Chain:
    source: str  # the tensor the slices start from
    offsets: Tuple[int, int]  # start row, start column (step 2 on both)
    nodes: Tuple[str, ...]  # the Slice nodes' outputs on the way


def _focus_slices(model) -> List[Rewrite]:
    import onnx

    graph = model.graph
    shapes = _static_shapes(onnx, model)
    constants = _constants(graph)
    producers = {o: n for n in graph.node for o in n.output}
    done: List[Rewrite] = []
    for concat in [n for n in graph.node if n.op_type == "Concat"]:
        axis = _attribute(concat, "axis", 0)
        chains = [_slice_chain(name, producers, constants, shapes) for name in concat.input]
        if any(c is None for c in chains) or len(chains) != 4:
            continue
        source = chains[0].source
        shape = shapes.get(source)
        if (len({c.source for c in chains}) != 1 or shape is None or len(shape) != 4 or axis not in (1, -3)
                or shape[2] % 2 or shape[3] % 2 or sorted(c.offsets for c in chains) != [(0, 0), (0, 1), (1, 0), (1, 1)]):
            continue
        _replace(onnx, graph, concat, source, shape, [c.offsets for c in chains], constants)
        done.append(Rewrite("space to depth by four strided slices (Focus) as a pixel-unshuffle Reorg",
                            concat.name or concat.output[0]))
    if done:
        _drop_unused(graph)
    return done


def _replace(onnx, graph, concat, source: str, shape: Sequence[int], offsets: Sequence[Tuple[int, int]],
             constants: Mapping[str, np.ndarray]) -> None:
    """Put a Reshape/Transpose/Reshape in the Concat's place and restore its channel order."""
    helper, numpy_helper = onnx.helper, onnx.numpy_helper
    n, c, h, w = (int(d) for d in shape)
    out = concat.output[0]
    name = (concat.name or out) + "_space_to_depth"
    s6, s4 = f"{name}_shape6", f"{name}_shape4"
    graph.initializer.extend([numpy_helper.from_array(np.array([n, c, h // 2, 2, w // 2, 2], np.int64), s6),
                              numpy_helper.from_array(np.array([n, 4 * c, h // 2, w // 2], np.int64), s4)])
    unshuffled = f"{name}_out"
    nodes = [helper.make_node("Reshape", [source, s6], [f"{name}_6d"], name=f"{name}_reshape6"),
             helper.make_node("Transpose", [f"{name}_6d"], [f"{name}_t"], name=f"{name}_transpose", perm=[0, 1, 3, 5, 2, 4]),
             helper.make_node("Reshape", [f"{name}_t", s4], [unshuffled], name=f"{name}_reshape4")]
    # Concatenated channel k*C + ch (k: the slice's place) is unshuffled channel ch*4 + 2*row + column.
    order = [ch * 4 + 2 * a + b for (a, b) in offsets for ch in range(c)]
    readers = [node for node in graph.node if out in node.input]
    if out not in {o.name for o in graph.output} and readers and all(
            _permutable_conv(node, out, constants, graph) for node in readers):
        for conv in readers:
            weight = next(i for i in graph.initializer if i.name == conv.input[1])
            values = numpy_helper.to_array(weight)
            permuted = np.empty_like(values)
            permuted[:, order] = values
            weight.CopyFrom(numpy_helper.from_array(permuted, weight.name))
            conv.input[0] = unshuffled
    else:
        pieces = [f"{name}_channel{i}" for i in range(4 * c)]
        split = f"{name}_split_sizes"
        graph.initializer.append(numpy_helper.from_array(np.ones(4 * c, np.int64), split))
        nodes += [helper.make_node("Split", [unshuffled, split], pieces, name=f"{name}_split", axis=1),
                  helper.make_node("Concat", [pieces[i] for i in order], [out], name=f"{name}_reorder", axis=1)]
    position = list(graph.node).index(concat)
    graph.node.remove(concat)
    for offset, node in enumerate(nodes):
        graph.node.insert(position + offset, node)


def _permutable_conv(node, tensor: str, constants: Mapping[str, np.ndarray], graph) -> bool:
    """A dense convolution that reads `tensor` as its data and has a weight of its own to reorder."""
    if node.op_type != "Conv" or node.input[0] != tensor or len(node.input) < 2 or _attribute(node, "group", 1) != 1:
        return False
    weight = node.input[1]
    users = sum(1 for other in graph.node for i in other.input if i == weight)
    return users == 1 and any(i.name == weight for i in graph.initializer)


def _slice_chain(name: str, producers, constants, shapes) -> Optional[_Chain]:
    """Follow Slice nodes back from `name` to the tensor they cut; None unless the chain as a whole takes
    every other row and column of a 4-D tensor from offset 0 or 1, and nothing else."""
    start = {2: 0, 3: 0}
    step = {2: 1, 3: 1}
    nodes: List[str] = []
    current = name
    while current in producers and producers[current].op_type == "Slice":
        node = producers[current]
        data = node.input[0]
        rank = len(shapes[data]) if shapes.get(data) is not None else None
        cut = _slice_ranges(node, constants, rank)
        if rank != 4 or cut is None:
            return None
        for axis, (s, e, t) in cut.items():
            if axis not in (2, 3) or s < 0 or t < 1 or e < shapes[data][axis]:
                return None  # only whole rows and columns, cut from their start
            start[axis] += s * step[axis]
            step[axis] *= t
        nodes.append(current)
        current = data
    if not nodes or step != {2: 2, 3: 2} or not all(v in (0, 1) for v in start.values()):
        return None
    return _Chain(current, (start[2], start[3]), tuple(nodes))


def _slice_ranges(node, constants, rank: Optional[int]) -> Optional[Dict[int, Tuple[int, int, int]]]:
    """axis -> (start, end, step) of a Slice node whose starts, ends, axes and steps are constants."""
    values = []
    for position in range(1, 5):
        if position >= len(node.input) or not node.input[position]:
            values.append(None)
            continue
        if node.input[position] not in constants:
            return None
        values.append([int(v) for v in np.asarray(constants[node.input[position]]).reshape(-1)])
    starts, ends, axes, steps = values
    if starts is None or ends is None or rank is None:
        return None
    axes = axes if axes is not None else list(range(len(starts)))
    steps = steps if steps is not None else [1] * len(starts)
    return {(a + rank) % rank: (s, min(e, INT64_MAX), t) for a, s, e, t in zip(axes, starts, ends, steps)}


def _constants(graph) -> Dict[str, np.ndarray]:
    from onnx import numpy_helper

    found = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            found[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return found


def _static_shapes(onnx, model) -> Dict[str, Optional[Tuple[int, ...]]]:
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes: Dict[str, Optional[Tuple[int, ...]]] = {}
    for value in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output):
        dims = value.type.tensor_type.shape.dim
        shapes[value.name] = (tuple(int(d.dim_value) for d in dims)
                              if dims and all(d.HasField("dim_value") and d.dim_value > 0 for d in dims) else None)
    return shapes


def _attribute(node, name: str, default):
    for attr in node.attribute:
        if attr.name == name:
            return attr.i
    return default


def _drop_unused(graph) -> None:
    """Remove nodes (and initializers) nothing reads any more, last first."""
    outputs = {o.name for o in graph.output}
    while True:
        read = {i for node in graph.node for i in node.input} | outputs
        dead = [node for node in graph.node if node.output and not any(o in read for o in node.output)]
        if not dead:
            break
        for node in dead:
            graph.node.remove(node)
    read = {i for node in graph.node for i in node.input} | {i.name for i in graph.input}
    for init in [i for i in graph.initializer if i.name not in read]:
        graph.initializer.remove(init)
