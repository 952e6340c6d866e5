"""PyTorch -> ONNX FP32 (torch.onnx's exporter)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from edgeopt_agent.errors import UserError, require

from ..source.isolated_program import IsolatedProgram
from ..source.tensors import InputSpec, shared_batch
from ._quiet import captured_output, log
from .output_names import model_output_names
from .base import Step, StepContext, StepResult, option


@dataclass(frozen=True)
class OnnxExportOptions:
    opset: int = option(18, "ONNX opset of the export")
    dynamic_batch: bool = option(True, "export the batch dimension as dynamic when the model allows it")
    dynamic_axes: Tuple[Tuple[str, int, str], ...] = option(
        (), "further axes kept dynamic: (input name, axis, group); axes of one group share one size")


def example_args(specs: Sequence[InputSpec], example: Optional[Mapping[str, np.ndarray]] = None):
    """Tensors to trace with: a real sample where one is given, else seeded random data."""
    torch = require("torch", "convert")
    if example is not None:
        # A sample sliced from numpy data can carry odd strides on its size-1 axes ([1, 1, 8, 8] as
        # (64, 1, 8, 1)), which torch.export reads as a channels-last dim order: the ONNX graph then
        # gains an as_strided Gather (ncnn has no Gather) and an ExecuTorch program refuses standard inputs.
        return tuple(torch.from_numpy(np.ascontiguousarray(example[s.name])).clone(memory_format=torch.contiguous_format)
                     for s in specs)
    generator = torch.Generator().manual_seed(0)
    args = []
    for spec in specs:
        dtype = getattr(torch, spec.dtype)
        if dtype.is_floating_point:
            args.append(torch.randn(spec.shape, generator=generator).to(dtype))
        else:
            args.append(torch.zeros(spec.shape, dtype=dtype))
    return tuple(args)


class ExportOnnx(Step):
    """The source model as one self-contained ONNX FP32 file."""

    name = "export-onnx"
    Options = OnnxExportOptions
    from_source = True

    def label(self) -> str:
        return "export ONNX FP32"

    def run(self, ctx: StepContext, model: Optional[Path], output: Path) -> StepResult:
        source, specs, example = ctx.source, ctx.specs, ctx.example
        if source.kind == "onnx":
            self._copy_onnx(source.onnx_path, output)
            return StepResult(output, {"dynamic_batch": any(bool(s.shape) and s.shape[0] == -1
                                                            for s in source.input_specs[:1])})
        torch = require("torch", "convert")
        require("onnxscript", "convert", "ONNX export")
        args = example_args(specs, example)
        names = [s.name for s in specs]
        batch = self.options.dynamic_batch and shared_batch(specs) is not None
        axes = self._dynamic_axes(names, batch)
        if axes:
            try:
                self._export(torch, source, args, names, output, axes)
                return StepResult(output, {"dynamic_batch": batch})
            except Exception as exc:  # the model pins its batch size (e.g. x.view(1, -1))
                log.info("export with dynamic dimensions %s failed (%s); exporting with fixed shapes", axes, exc)
        try:
            self._export(torch, source, args, names, output, {})
        except Exception as exc:
            raise UserError(
                f"ONNX export of {source.description} with inputs "
                f"{', '.join(s.describe() for s in specs)} failed: {_first_line(exc)}"
            ) from exc
        return StepResult(output, {"dynamic_batch": False})

    @staticmethod
    def _copy_onnx(path: Path, output: Path) -> None:
        """One self-contained file, with weights the source kept in external data files inlined."""
        onnx = require("onnx", "convert")
        model = onnx.load(str(path))  # resolves external data relative to the model's folder
        try:
            onnx.save(model, str(output))
        except ValueError as exc:  # protobuf's 2 GB limit
            raise UserError(f"{path} is too large to store in one ONNX file ({exc}); models over 2 GB are not supported yet") from None

    def _dynamic_axes(self, names: Sequence[str], batch: bool) -> Dict[str, Dict[int, str]]:
        """{input: {axis: size name}} for the axes to keep dynamic."""
        axes: Dict[str, Dict[int, str]] = {n: {0: "batch"} for n in names} if batch else {}
        for name, axis, group in self.options.dynamic_axes:
            if name in names:
                axes.setdefault(name, {})[axis] = group
        return axes

    def _export(self, torch, source, args, names, output, axes: Dict[str, Dict[int, str]]):
        if isinstance(source.module, IsolatedProgram):
            source.module.export_onnx(args, names, output, axes, self.options.opset)
            return
        write_onnx(torch, source.module, args, names, output, axes, self.options.opset,
                   use_dynamo=source.kind != "torchscript")


def write_onnx(torch, module, args, names: Sequence[str], output: Path, axes: Dict[str, Dict[int, str]],
               opset: int, use_dynamo: bool = True) -> None:
    """`module` traced with `args` into the ONNX file `output`; `axes` ({input: {axis: group}}) stay
    dynamic; outputs are named from what the forward returns (output_names.py). TorchScript modules can
    only go through the TorchScript-based exporter (use_dynamo=False)."""
    kwargs = dict(input_names=list(names), output_names=model_output_names(torch, module, args, names),
                  opset_version=opset)
    if use_dynamo:
        if axes:
            dims: Dict[str, object] = {}
            for group in sorted({g for per_input in axes.values() for g in per_input.values()}):
                dims[group] = torch.export.Dim(group, min=1, max=4096) if group == "batch" else \
                    torch.export.Dim.DYNAMIC
            kwargs["dynamic_shapes"] = tuple({axis: dims[g] for axis, g in axes.get(n, {}).items()} for n in names)
        kwargs.update(dynamo=True, verbose=False, optimize=True, external_data=False)
    else:
        if axes:
            kwargs["dynamic_axes"] = {n: dict(axes[n]) for n in names if n in axes}
        kwargs.update(dynamo=False)
    if not use_dynamo and not isinstance(module, torch.jit.ScriptModule):
        # TorchScript called from a Python wrapper (its constant arguments bound): the
        # TorchScript exporter only takes it once traced into one script module.
        with captured_output("torch.jit.trace"):
            module = torch.jit.trace(module, args)
    with captured_output("torch.onnx.export"):
        result = torch.onnx.export(module, args, str(output), **kwargs)
    if use_dynamo and result is not None and not output.exists():
        result.save(str(output))


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_CALL_SITE = re.compile(r'The following call raised this error:\s*\n\s*File "([^"]+)", line (\d+), in (\S+)\n\s*(.+)')
_WRAPPER_LINES = ("Failed to export the model", "This is step", "Next steps")
_HINTS = {
    "GuardOnDataDependentSymNode": "the model branches on a tensor's values; rewrite that branch with torch.where "
                                   "or torch.cond, or export the model to ONNX yourself and convert the .onnx",
    "UserError": "",
}


def _first_line(exc: BaseException) -> str:
    """The real cause of an export failure in one line: the innermost exception's first
    meaningful line, where in the user's code it happened, and what to do about it."""
    chain = [exc]
    while chain[-1].__cause__ is not None and len(chain) < 10:
        chain.append(chain[-1].__cause__)
    texts = [_ANSI.sub("", str(e)) for e in chain]
    site = next((m for m in (_CALL_SITE.search(t) for t in texts) if m), None)
    summary = None
    for text in texts:
        marker = text.find("## Exception summary")
        if marker >= 0:
            summary = next((line.strip() for line in text[marker:].splitlines()[1:] if line.strip()), None)
            break
    inner = chain[-1]
    if summary is None:
        lines = [line.strip() for line in _ANSI.sub("", str(inner)).splitlines() if line.strip()]
        lines = [line for line in lines if not line.startswith(_WRAPPER_LINES)] or lines
        summary = f"{type(inner).__name__}: {lines[0] if lines else ''}"
    summary = re.sub(r"^<class '(?:[\w.]+\.)?(\w+)'>", r"\1", summary)
    text = summary
    if site:
        text += f" at {Path(site.group(1)).name}:{site.group(2)} `{site.group(4).strip()}`"
    hint = next((h for name, h in _HINTS.items() if name in summary and h), "")
    return f"{text}; {hint}" if hint else text
