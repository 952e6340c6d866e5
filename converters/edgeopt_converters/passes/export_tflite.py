"""PyTorch -> TFLite through litert-torch: FP32, or full-integer INT8 with PT2E calibration.

The INT8 model has INT8 input and output tensors (their scale/zero-point go into the manifest),
as integer-only accelerators and XNNPACK's QS8 kernels expect.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from edgeopt_agent.errors import UserError, require

from ..source.isolated_program import IsolatedProgram
from ..source.source_model import SourceModel
from ..source.tensors import Dataset, InputSpec, feed_batch
from ._quiet import captured_output
from .base import Step, StepContext, StepResult, option
from .export_onnx import _first_line, example_args
from .pt2e_calibration import calibrate_prepared


@dataclass(frozen=True)
class TfliteOptions:
    precision: str = option("fp32", "fp32, or int8 (full-integer, PT2E calibration)")
    per_channel: bool = option(True, "per-channel INT8 weights")
    dynamic: bool = option(False, "dynamic-range INT8 (INT8 weights, activations quantized per call; float I/O)")


def _litert_torch():
    os.environ.setdefault("LITERT_TORCH_SHOW_PROGRESS", "n")
    return require("litert_torch", "tflite", "TFLite export")


class ExportTflite(Step):
    """The source PyTorch model as TFLite through litert-torch."""

    name = "export-tflite"
    Options = TfliteOptions
    from_source = True

    def __init__(self, options: Optional[TfliteOptions] = None, **overrides):
        super().__init__(options, **overrides)
        if self.options.precision not in ("fp32", "int8"):
            raise UserError(f"TFLite export supports fp32 and int8, not {self.options.precision}")

    def label(self) -> str:
        if self.options.precision != "int8":
            return "export TFLite FP32"
        return "TFLite dynamic-range INT8 (PT2E)" if self.options.dynamic else "calibrate TFLite INT8 (PT2E)"

    @property
    def calibrates(self) -> bool:
        return self.options.precision == "int8" and not self.options.dynamic

    def run(self, ctx: StepContext, model: Optional[Path], output: Path) -> StepResult:
        path = self.export(ctx.source, ctx.specs, output,
                           ctx.calibration if self.options.precision == "int8" else None, ctx.advance,
                           ctx.pt2e_statistics)
        info = {}
        if self.options.precision == "int8":
            mode = "dynamic-range" if self.options.dynamic else "full-integer"
            info["scheme"] = f"{mode} INT8 (PT2E{', per-channel weights' if self.options.per_channel else ''})"
        return StepResult(path, info)

    def export(self, source: SourceModel, specs: Sequence[InputSpec], output: Path,
               calibration: Optional[Dataset] = None, on_batch: Optional[Callable[[int], None]] = None,
               shared: Optional[dict] = None) -> Path:
        if not source.exportable:
            raise UserError(
                f"TFLite export needs a PyTorch model that torch.export can trace; {source.description} is a "
                f"{source.kind} model. Give a file.py:factory or a .pt2 ExportedProgram, or ask for --format onnx"
            )
        torch = require("torch", "convert")
        args = example_args(specs)
        feeds = None
        if self.options.precision == "int8":
            if calibration is None:
                raise UserError("TFLite INT8 needs calibration data")
            feeds = (([feed[s.name] for s in specs], real) for feed, real in calibration.batches(feed_batch(specs)))
        try:
            if isinstance(source.module, IsolatedProgram):
                source.module.export_tflite(args, output, self.options, feeds, on_batch)
            else:
                with captured_output("litert_torch.convert"), torch.no_grad():
                    write_tflite(torch, source.module, args, output, self.options, feeds, on_batch, shared,
                                 calibration.size if calibration is not None else 0)
        except UserError:
            raise
        except Exception as exc:
            raise UserError(f"TFLite {self.options.precision} export of {source.description} failed: {_first_line(exc)}") from exc
        return output


def write_tflite(torch, module, args, output: Path, options: TfliteOptions,
                 feeds: Optional[Iterable[Tuple[List[np.ndarray], int]]] = None,
                 on_batch: Optional[Callable[[int], None]] = None, shared: Optional[dict] = None,
                 samples: int = 0) -> None:
    """`module` as the TFLite file `output`: FP32, or INT8 calibrated on `feeds` ((arrays in input
    order, real samples) per batch)."""
    litert_torch = _litert_torch()
    if options.precision == "fp32":
        edge_model = litert_torch.convert(module, args)
    else:
        edge_model = _convert_int8(litert_torch, torch, module, args, options, feeds, on_batch, shared, samples)
    edge_model.export(str(output))


def _convert_int8(litert_torch, torch, module, args, options: TfliteOptions, feeds, on_batch, shared=None, samples=0):
    from litert_torch.quantize import pt2e_quantizer, quant_config
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = pt2e_quantizer.PT2EQuantizer().set_global(
        pt2e_quantizer.get_symmetric_quantization_config(is_per_channel=options.per_channel,
                                                         is_dynamic=options.dynamic)
    )
    graph = torch.export.export(module, args).module()
    prepared = prepare_pt2e(graph, quantizer)
    # The graph is traced at the model's batch size, so calibration runs at that size. Dynamic-range INT8
    # observes nothing (activations are quantized per call on the board): one pass traces it.
    if options.dynamic:
        arrays, real = next(iter(feeds))
        prepared(*(torch.from_numpy(a) for a in arrays))
    else:
        calibrate_prepared(torch, prepared, feeds, on_batch, shared, samples)
    quantized = convert_pt2e(prepared, fold_quantize=False)
    return litert_torch.convert(
        quantized, args, quant_config=quant_config.QuantConfig(pt2e_quantizer=quantizer)
    )
