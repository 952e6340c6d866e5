"""ONNX -> ncnn (`.param` graph + `.bin` weights) through the pnnx converter that the pnnx wheel ships.

The step reads the FP32 ONNX artifact, not the source: pnnx takes ONNX or TorchScript, never a
torch.export program, and starting from ONNX serves ONNX sources too. pnnx's own Python helper
traces with TorchScript and ignores the converter's exit status, so the step calls the converter
binary itself.

Patterns pnnx would leave to ncnn as operators it has no layer for are rewritten in the ONNX graph
first (`ncnn_rewrites`: a Focus stem's strided slices); an operator still left fails the step with
every such operator named, instead of an artifact ncnn cannot load.

pnnx names the blobs in0.. and out0..; the step renames them to the ONNX model's names and writes
each input's per-sample shape into its Input layer, which is where the ncnn runner reads it.
The artifact is one file, an edgeopt bundle (an uncompressed zip: `unzip model.fp32.ncnn` gives
model.param and model.bin) holding the graph, the weights and the precision (edgeopt_agent.bundle).
"""
from __future__ import annotations

import json
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Set, Tuple

from edgeopt_agent.bundle import write_bundle
from edgeopt_agent.errors import require
from edgeopt_agent.runners.ncnn.runner import FACTS, PARAM, PARAM_MAGIC, WEIGHTS

from .base import Step, StepContext, StepResult, option
from .errors import StepFailed, first_line
from .ncnn_rewrites import Rewrite, rewrite_for_pnnx, unsupported_layers

TIMEOUT_S = 600
# pnnx's names for tensor element types in `inputshape=`.
_PNNX_TYPES = {1: "f32", 10: "f16", 11: "f64", 2: "u8", 3: "i8", 5: "i16", 6: "i32", 7: "i64"}
# ncnn reads layer and blob names with %255s.
_NCNN_NAME = re.compile(r"^\S{1,255}$")


@dataclass(frozen=True)
class NcnnOptions:
    precision: str = option("fp32", "fp32, or fp16 (weights stored as FP16 in the .bin; half its size)")


@dataclass(frozen=True)
class OnnxTensor:
    name: str
    shape: Tuple[int, ...]  # -1 where the model leaves the size open
    elem_type: int


class ExportNcnn(Step):
    """The FP32 ONNX artifact as an ncnn model."""

    name = "export-ncnn"
    Options = NcnnOptions
    requires = (("onnx", "convert"), ("pnnx", "ncnn"), ("ncnn", "ncnn"))

    def __init__(self, options: Optional[NcnnOptions] = None, **overrides):
        super().__init__(options, **overrides)
        if self.options.precision not in ("fp32", "fp16"):
            raise StepFailed(f"ncnn export writes fp32 or fp16 weights, not {self.options.precision}")

    def label(self) -> str:
        return f"convert ONNX to ncnn {self.options.precision.upper()} (pnnx)"

    def run(self, ctx: StepContext, model: Optional[Path], output: Path) -> StepResult:
        if model is None:
            raise StepFailed("ncnn export converts the FP32 ONNX artifact; plan it with that artifact as its base")
        inputs, outputs = read_onnx_io(model)
        if ctx.fix_dims:  # one shape per input in the data: an ONNX source's open sizes are the data's
            inputs = with_example_sizes(inputs, ctx.example)
        with tempfile.TemporaryDirectory(prefix="edgeopt-pnnx-") as work:
            param, weights, rewrites = convert(model, inputs, Path(work), fp16=self.options.precision == "fp16")
            original = param.read_text(encoding="utf-8")
            refuse_unsupported(original, rewrites)
            taken = pnnx_blobs(original)
            text = rewrite_param(original, inputs, outputs, taken)
            # ncnn lists a graph's outputs in layer order, not the model's: the runner reads the order here.
            facts = json.dumps({"precision": self.options.precision,
                                "outputs": blob_names("out", outputs, taken)}).encode("utf-8")
            write_bundle({PARAM: text.encode("utf-8"), WEIGHTS: weights, FACTS: facts}, output)
        pnnx = require("pnnx", "ncnn", "ncnn export")
        info = {"files": [PARAM, WEIGHTS, FACTS], "ncnn_weights": self.options.precision,
                "converter": f"pnnx {getattr(pnnx, '__version__', '?')}"}
        if rewrites:
            info["rewrites"] = [r.text() for r in rewrites]
        return StepResult(output, info)


def read_onnx_io(model: Path) -> Tuple[List[OnnxTensor], List[str]]:
    onnx = require("onnx", "convert")
    graph = onnx.load(str(model), load_external_data=False).graph
    initializers = {i.name for i in graph.initializer}
    inputs = []
    for value in graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        shape = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim)
        inputs.append(OnnxTensor(value.name, shape, tensor.elem_type))
    return inputs, [value.name for value in graph.output]


def with_example_sizes(inputs: Sequence[OnnxTensor], example) -> List[OnnxTensor]:
    """The inputs with each open size past the batch axis taken from the feed the conversion traces with."""
    sized = []
    for tensor in inputs:
        sample = (example or {}).get(tensor.name)
        shape = getattr(sample, "shape", None)
        if shape is not None and len(shape) == len(tensor.shape) and tensor.shape:
            tensor = OnnxTensor(tensor.name, tensor.shape[:1] + tuple(d if d > 0 else int(s) for d, s in
                                                                       zip(tensor.shape[1:], shape[1:])),
                                tensor.elem_type)
        sized.append(tensor)
    return sized


def input_shape_argument(inputs: Sequence[OnnxTensor]) -> str:
    """pnnx's `inputshape=` value: every input at batch 1 (ncnn runs one sample at a time)."""
    parts = []
    for tensor in inputs:
        if not tensor.shape:
            raise StepFailed(f"ncnn needs a batch axis and a fixed shape; input '{tensor.name}' is a scalar")
        rest = tensor.shape[1:]
        if any(d < 1 for d in rest):
            raise StepFailed(f"ncnn needs fixed input sizes; '{tensor.name}' has shape {list(tensor.shape)} "
                             "(-1: open): give the sizes with --input-shape")
        if tensor.shape[0] not in (1, -1):
            raise StepFailed(f"ncnn runs one sample at a time; input '{tensor.name}' is fixed at batch {tensor.shape[0]}")
        kind = _PNNX_TYPES.get(tensor.elem_type)
        if kind is None:
            raise StepFailed(f"input '{tensor.name}' has ONNX element type {tensor.elem_type}, which pnnx cannot take")
        parts.append("[" + ",".join(str(d) for d in (1,) + rest) + "]" + kind)
    return ",".join(parts)


def convert(model: Path, inputs: Sequence[OnnxTensor], work: Path, fp16: bool) -> Tuple[Path, Path, List[Rewrite]]:
    """Run the pnnx binary on a copy of `model` in `work`, rewritten where pnnx would leave operators ncnn
    lacks; returns the .param and .bin it wrote and the rewrites made."""
    pnnx = require("pnnx", "ncnn", "ncnn export")
    source = work / "model.onnx"  # pnnx writes its side files next to its input
    onnx = require("onnx", "convert")
    graph = onnx.load(str(model))
    rewrites = rewrite_for_pnnx(graph)
    if rewrites:
        onnx.save(graph, str(source))
    else:
        source.write_bytes(model.read_bytes())
    param, weights = work / "model.ncnn.param", work / "model.ncnn.bin"
    command = [pnnx.EXEC_PATH, str(source), "inputshape=" + input_shape_argument(inputs), "device=cpu",
               f"fp16={1 if fp16 else 0}", f"ncnnparam={param}", f"ncnnbin={weights}",
               f"ncnnpy={work / 'model_ncnn.py'}", f"pnnxparam={work / 'model.pnnx.param'}",
               f"pnnxbin={work / 'model.pnnx.bin'}", f"pnnxpy={work / 'model_pnnx.py'}",
               f"pnnxonnx={work / 'model.pnnx.onnx'}"]
    try:
        done = subprocess.run(command, cwd=str(work), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StepFailed(f"pnnx could not run: {first_line(exc)}") from exc
    if done.returncode != 0 or not param.is_file() or not weights.is_file():
        tail = done.stdout.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        raise StepFailed(f"pnnx could not convert {model.name} (exit status {done.returncode}): {tail[0]}")
    return param, weights, rewrites


def refuse_unsupported(param_text: str, rewrites: Sequence[Rewrite] = ()) -> None:
    """Fail with every operator pnnx left that this ncnn has no layer for (and the count of each)."""
    ncnn = require("ncnn", "ncnn", "ncnn export")
    left = unsupported_layers(param_text, lambda kind: ncnn.layer_to_index(kind) >= 0)
    if left:
        made = f" (after rewriting {'; '.join(r.text() for r in rewrites)})" if rewrites else ""
        raise StepFailed(f"pnnx left operators ncnn {getattr(ncnn, '__version__', '')} has no layer for{made}: "
                         + ", ".join(f"{kind} ({count} layer{'s' if count > 1 else ''})" for kind, count in sorted(left.items())))


def pnnx_blobs(text: str) -> Set[str]:
    """The names of the blobs pnnx made inside the graph (1, 2, ...), its in0../out0.. left out: an ONNX
    name equal to one of them (torch.onnx names outputs "3") cannot take an input's or output's place."""
    blobs: Set[str] = set()
    for line in text.splitlines()[2:]:
        fields = line.split()
        if len(fields) >= 4 and fields[2].isdigit() and fields[3].isdigit():
            blobs.update(fields[4:4 + int(fields[2]) + int(fields[3])])
    return {b for b in blobs if not re.fullmatch(r"(in|out)\d+", b)}


def rewrite_param(text: str, inputs: Sequence[OnnxTensor], outputs: Sequence[str], taken: Set[str] = frozenset()) -> str:
    """pnnx's .param with the ONNX names for in0.., out0.. and each Input layer's per-sample shape."""
    renames: Dict[str, str] = {}
    for prefix, names in (("in", [t.name for t in inputs]), ("out", list(outputs))):
        renames.update((f"{prefix}{index}", blob) for index, blob in enumerate(blob_names(prefix, names, taken)))
    shapes = {renames.get(f"in{i}", f"in{i}"): t.shape[1:] for i, t in enumerate(inputs)}
    lines = text.splitlines()
    if not lines or lines[0].strip() != PARAM_MAGIC:
        raise StepFailed("pnnx wrote a .param without ncnn's magic line")
    rewritten = lines[:2]
    for line in lines[2:]:
        fields = line.split()
        if not fields:
            continue
        bottoms, tops = int(fields[2]), int(fields[3])
        blobs = [renames.get(b, b) for b in fields[4:4 + bottoms + tops]]
        params = fields[4 + bottoms + tops:]
        if fields[0] == "Input" and tops == 1 and blobs[0] in shapes:
            params = _shape_params(shapes[blobs[0]]) + [p for p in params if p.split("=")[0] not in ("0", "1", "2", "11")]
        rewritten.append(" ".join(fields[:4] + blobs + params))
    return "\n".join(rewritten) + "\n"


def blob_names(prefix: str, names: Sequence[str], taken: Set[str] = frozenset()) -> List[str]:
    """The ncnn blob of each of the model's inputs ("in") or outputs ("out"), in order: its name where
    ncnn can read it and no blob inside the graph has it (`taken`), else pnnx's own (in0, out1, ...)."""
    return [name if _NCNN_NAME.match(name) and name not in taken else f"{prefix}{index}"
            for index, name in enumerate(names)]


def _shape_params(sample: Sequence[int]) -> List[str]:
    """ncnn's Input parameters (0=w 1=h 11=d 2=c) for a per-sample shape, outermost axis first."""
    keys = {1: ("0",), 2: ("1", "0"), 3: ("2", "1", "0"), 4: ("2", "11", "1", "0")}.get(len(sample))
    if keys is None:
        raise StepFailed(f"ncnn takes inputs of 1 to 4 axes per sample, not {len(sample)}")
    return [f"{key}={size}" for key, size in zip(keys, sample)]

