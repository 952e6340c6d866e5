"""ONNX FP32 -> ONNX FP32 ready to quantize: weights as initializers, opset >= 13, fixed dims, shapes.

Each sub-step either works, recovers with a one-line note saying why (e.g. symbolic shape
inference gives up on a dynamic detector head, so plain ONNX shape inference is used), or fails
the artifact with a one-line reason. Nothing fails silently. The model's metadata (a CTC
dictionary, class names) is carried over: package decoders read it.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

from edgeopt_agent.errors import require

from ._quiet import captured_output
from .base import Step, StepContext, StepResult, option
from .errors import StepFailed, first_line
from .onnx_steps import onnx_and_onnxruntime

MIN_QUANT_OPSET = 13  # per-channel DequantizeLinear needs `axis`, which opset 13 introduced


@dataclass(frozen=True)
class PreprocessOptions:
    fold_constants: bool = option(True, "turn Constant nodes holding weights into initializers")
    min_opset: int = option(MIN_QUANT_OPSET, "upgrade the default-domain opset to at least this")
    fix_dims: bool = option(True, "fix dynamic non-batch dimensions to the converted input shape")
    optimize: bool = option(True, "onnxruntime's graph optimizer (constant folding, BatchNorm fusion)")
    transformer_fusion: bool = option(False, "fuse attention, LayerNorm and GELU with onnxruntime's transformer optimizer")


def fold_constant_nodes(model) -> int:
    """Move every Constant node that holds a tensor into the graph's initializers; returns how many."""
    onnx = require("onnx", "convert")
    kept, moved = [], 0
    for node in model.graph.node:
        attrs = {a.name: a for a in node.attribute}
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and "value" in attrs and len(node.output) == 1:
            tensor = onnx.TensorProto()
            tensor.CopyFrom(attrs["value"].t)
            tensor.name = node.output[0]
            model.graph.initializer.append(tensor)
            moved += 1
        else:
            kept.append(node)
    if moved:
        del model.graph.node[:]
        model.graph.node.extend(kept)
    return moved


def default_opset(model) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def name_nodes(graph) -> int:
    """Name every unnamed node `<op type>_<index>` (older exporters leave names empty, and a node is kept in
    float by its name); returns how many were named."""
    taken = {n.name for n in graph.node if n.name}
    named = 0
    for index, node in enumerate(graph.node):
        if node.name:
            continue
        name = f"{node.op_type}_{index}"
        while name in taken:
            name += "_"
        node.name = name
        taken.add(name)
        named += 1
    return named


def copy_metadata(source, target) -> None:
    """Metadata props of `source` that `target` lacks (decoders read dictionaries and labels there)."""
    have = {p.key for p in target.metadata_props}
    for prop in source.metadata_props:
        if prop.key not in have:
            target.metadata_props.add(key=prop.key, value=prop.value)


class PreprocessOnnx(Step):
    name = "preprocess-onnx"
    Options = PreprocessOptions

    def label(self) -> str:
        return "pre-process ONNX"

    def run(self, ctx: StepContext, model: Optional[Path], output: Path) -> StepResult:
        onnx = onnx_and_onnxruntime("ONNX pre-processing")
        o = self.options
        original = onnx.load(str(model))
        graph = onnx.ModelProto()
        graph.CopyFrom(original)
        done: List[str] = []
        if o.fold_constants:
            moved = fold_constant_nodes(graph)
            if moved:
                done.append(f"{moved} Constant nodes folded into initializers")
        opset = default_opset(graph)
        if opset and opset < o.min_opset:
            try:
                graph = onnx.version_converter.convert_version(graph, o.min_opset)
            except Exception as exc:
                raise StepFailed(f"upgrading opset {opset} to {o.min_opset} (needed for per-channel INT8) failed: "
                                 f"{first_line(exc)}") from exc
            done.append(f"opset {opset} -> {o.min_opset}")
        if o.fix_dims and ctx.fix_dims:
            fixed = _fix_dims(graph, ctx)
            if fixed:
                done.append("fixed " + ", ".join(fixed))
        with tempfile.TemporaryDirectory(prefix="edgeopt-pre-") as tmp:
            staged = Path(tmp) / "staged.onnx"
            onnx.save(graph, str(staged))
            if o.transformer_fusion:
                fused = Path(tmp) / "fused.onnx"
                summary = _fuse_transformer(staged, fused)
                if summary:
                    done.append("fused " + summary)
                    staged = fused
            notes = _quant_pre_process(staged, output, o.optimize)
        final = onnx.load(str(output))
        copy_metadata(original, final)
        named = name_nodes(final.graph)
        if named:
            done.append(f"{named} unnamed nodes named (so they can be kept in float)")
        onnx.save(final, str(output))
        done += notes
        return StepResult(output, {"preprocess": done})


def _fix_dims(graph, ctx: StepContext) -> List[str]:
    """Dynamic non-batch dims become the converted shape; the batch stays as the model has it."""
    specs = {s.name: s for s in ctx.specs}
    fixed = []
    for value in graph.graph.input:
        spec = specs.get(value.name)
        dims = value.type.tensor_type.shape.dim if value.type.HasField("tensor_type") else []
        if spec is None or len(dims) != len(spec.shape):
            continue
        for i, dim in enumerate(dims):
            if i == 0 or dim.HasField("dim_value") or spec.shape[i] <= 0:
                continue
            label = dim.dim_param or "?"
            dim.Clear()
            dim.dim_value = int(spec.shape[i])
            fixed.append(f"{value.name}[{i}] {label}={spec.shape[i]}")
    return fixed


def _fuse_transformer(model: Path, output: Path) -> str:
    """onnxruntime's BERT fusions; returns what was fused ('' when nothing was)."""
    from onnxruntime.transformers.optimizer import optimize_model

    try:
        with captured_output("transformer optimizer"):
            optimized = optimize_model(str(model), model_type="bert", num_heads=0, hidden_size=0, opt_level=0)
            counts = optimized.get_fused_operator_statistics()
    except Exception as exc:
        raise StepFailed(f"onnxruntime's transformer optimizer failed: {first_line(exc)}") from exc
    fused = {k: v for k, v in counts.items() if v and k in
             ("Attention", "MultiHeadAttention", "SkipLayerNormalization", "LayerNormalization", "Gelu", "FastGelu",
              "BiasGelu", "EmbedLayerNormalization", "SkipSimplifiedLayerNormalization")}
    if not fused:
        return ""
    optimized.save_model_to_file(str(output))
    return ", ".join(f"{v} {k}" for k, v in sorted(fused.items()))


@contextlib.contextmanager
def _private_cwd():
    """onnxruntime's pre-processing leaves sym_shape_infer_temp.onnx and <uuid>.data files in the current
    folder: let it write them into a temporary one."""
    previous = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="edgeopt-ort-cwd-") as scratch:
        os.chdir(scratch)
        try:
            yield
        finally:
            os.chdir(previous)


def _quant_pre_process(model: Path, output: Path, optimize: bool) -> List[str]:
    """onnxruntime's pre-processing; symbolic shape inference first, plain ONNX inference if it gives up."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    model, output = Path(model).resolve(), Path(output).resolve()

    notes: List[str] = []
    attempts = [dict(skip_symbolic_shape=False), dict(skip_symbolic_shape=True)]
    if optimize:
        attempts.append(dict(skip_symbolic_shape=True, skip_optimization=True))
    else:
        attempts = [dict(a, skip_optimization=True) for a in attempts]
    errors = []
    for kwargs in attempts:
        try:
            with captured_output("quant_pre_process"), _private_cwd():
                quant_pre_process(str(model), str(output), **kwargs)
        except Exception as exc:
            errors.append(first_line(exc) or type(exc).__name__)
            continue
        if errors:
            what = "symbolic shape inference" if not kwargs.get("skip_optimization") else "graph optimisation"
            notes.append(f"onnxruntime pre-processing: {what} failed ({errors[-1]}); used "
                         + ("ONNX shape inference" if len(errors) == 1 else "shape inference without optimisation"))
        return notes
    raise StepFailed(f"onnxruntime pre-processing failed: {errors[-1]}")
