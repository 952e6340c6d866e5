"""PyTorch -> ExecuTorch `.pte` lowered to XNNPACK: FP32, or INT8 through PT2E calibration.

torch.export traces the source at the example's shapes (the program's memory is planned for
them), `to_edge_transform_and_lower` hands what XNNPACK supports to its delegate, and whatever
it does not stays on ExecuTorch's portable kernels (listed in the step's info). INT8 uses the
XNNPACK quantizer (symmetric INT8, per-channel weights by default), calibrated on the
calibration data at the traced batch size.
"""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import numpy as np

from edgeopt_agent.errors import UserError, require

from ..source.isolated_program import IsolatedProgram
from ..source.tensors import feed_batch
from ._quiet import captured_output
from .base import Step, StepContext, StepResult, option
from .errors import StepFailed, first_line
from .export_onnx import example_args
from .pt2e_calibration import calibrate_prepared

DELEGATE_CALL = "executorch_call_delegate"


@dataclass(frozen=True)
class ExecuTorchOptions:
    precision: str = option("fp32", "fp32, or int8 (PT2E, XNNPACK quantizer, calibrated)")
    per_channel: bool = option(True, "per-channel INT8 weights")


class ExportExecuTorch(Step):
    """The source PyTorch model as an ExecuTorch program for the XNNPACK delegate."""

    name = "export-executorch"
    Options = ExecuTorchOptions
    from_source = True
    requires = (("torch", "convert"), ("executorch", "executorch"))

    def __init__(self, options: Optional[ExecuTorchOptions] = None, **overrides):
        super().__init__(options, **overrides)
        if self.options.precision not in ("fp32", "int8"):
            raise UserError(f"ExecuTorch export supports fp32 and int8, not {self.options.precision}")

    def label(self) -> str:
        return "calibrate ExecuTorch INT8 (PT2E, XNNPACK)" if self.calibrates else "export ExecuTorch FP32 (XNNPACK)"

    @property
    def calibrates(self) -> bool:
        return self.options.precision == "int8"

    def run(self, ctx: StepContext, model: Optional[Path], output: Path) -> StepResult:
        source = ctx.source
        if not source.exportable:
            raise StepFailed(f"ExecuTorch export needs a PyTorch model that torch.export can trace; "
                             f"{source.description} is a {source.kind} model")
        if isinstance(source.module, IsolatedProgram):
            raise StepFailed("ExecuTorch export of a sandboxed .pt2 program is not supported yet; "
                             "give a file.py:factory")
        torch = require("torch", "convert")
        args = example_args(ctx.specs, ctx.example)
        feeds = None
        if self.calibrates:
            if ctx.calibration is None:
                raise UserError("ExecuTorch INT8 needs calibration data")
            specs = ctx.specs
            feeds = (([feed[s.name] for s in specs], real) for feed, real in ctx.calibration.batches(feed_batch(specs)))
        try:
            with captured_output("executorch"), torch.no_grad():
                program, info = lower(torch, source.module, args, self.options, feeds, ctx.advance,
                                      ctx.pt2e_statistics, ctx.calibration.size if feeds is not None else 0)
        except UserError:
            raise
        except Exception as exc:
            raise StepFailed(f"ExecuTorch {self.options.precision} export of {source.description} failed: "
                             f"{first_line(exc)}{_root_cause(exc)}") from exc
        partial = output.with_name(output.name + ".partial")
        partial.write_bytes(program.buffer)
        os.replace(partial, output)
        return StepResult(output, info)


def lower(torch, module, args: Tuple[Any, ...], options: ExecuTorchOptions,
          feeds: Optional[Iterable[Tuple[List[np.ndarray], int]]] = None,
          on_batch: Optional[Callable[[int], None]] = None, shared: Optional[dict] = None, samples: int = 0):
    """`module` as an ExecuTorch program (its `.buffer` is the .pte) and the facts for the manifest."""
    exir = require("executorch.exir", "executorch", "ExecuTorch export")
    partitioner = require("executorch.backends.xnnpack.partition.xnnpack_partitioner", "executorch",
                          "ExecuTorch export")
    info: Dict[str, Any] = {"delegate": "XNNPACK", "executorch_version": _version("executorch")}
    if options.precision == "int8":
        module, how = _quantized(torch, module, args, options, feeds, on_batch, shared, samples)
        info["calibration"] = how
        info["scheme"] = f"INT8 (PT2E, XNNPACK symmetric{', per-channel weights' if options.per_channel else ''})"
    exported = torch.export.export(module, args)
    edge = exir.to_edge_transform_and_lower(exported, partitioner=[partitioner.XnnpackPartitioner()])
    info.update(_delegation(edge.exported_program().graph))
    return edge.to_executorch(), info


def _quantized(torch, module, args, options: ExecuTorchOptions, feeds, on_batch, shared=None, samples=0):
    quantizer_module = require("executorch.backends.xnnpack.quantizer.xnnpack_quantizer", "executorch",
                               "ExecuTorch INT8")
    pt2e = require("torchao.quantization.pt2e.quantize_pt2e", "executorch", "ExecuTorch INT8")
    quantizer = quantizer_module.XNNPACKQuantizer().set_global(
        quantizer_module.get_symmetric_quantization_config(is_per_channel=options.per_channel))
    prepared = pt2e.prepare_pt2e(torch.export.export(module, args).module(), quantizer)
    how = calibrate_prepared(torch, prepared, feeds, on_batch, shared, samples)
    return pt2e.convert_pt2e(prepared), how


def _root_cause(exc: BaseException) -> str:
    """The first error behind `exc`, in brackets (ExecuTorch wraps a failing pass's own error), or ""."""
    root = exc
    while (root.__cause__ or root.__context__) is not None:
        root = root.__cause__ or root.__context__
    return f" ({first_line(root)})" if root is not exc else ""


def _delegation(graph) -> Dict[str, Any]:
    """How much of the program XNNPACK runs: delegate calls, and the ops left on portable kernels."""
    calls = [n for n in graph.nodes if n.op == "call_function"]
    delegated = sum(1 for n in calls if DELEGATE_CALL in str(n.target))
    portable = Counter(str(n.target) for n in calls
                       if DELEGATE_CALL not in str(n.target) and "getitem" not in str(n.target))
    return {"delegate_calls": delegated, "portable_ops": dict(sorted(portable.items()))}


def _version(package: str) -> Optional[str]:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None
