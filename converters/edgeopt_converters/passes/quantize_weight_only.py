"""ONNX FP32 -> ONNX with INT8 weights only: onnxruntime's MatMulNBits (8-bit, blockwise, symmetric).

The last INT8 mode edgeopt tries when neither static nor dynamic INT8 can be built: the weights of
MatMuls with a constant weight are stored in 8 bits and multiplied with INT8 activations on the CPU
(accuracy level 4, onnxruntime's fast path); everything else stays FP32. Only onnxruntime runs it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from edgeopt_agent.errors import require
from edgeopt_agent.runners.onnxruntime.importing import import_onnxruntime

from ._quiet import captured_output
from .base import Step, StepContext, StepResult, option
from .errors import StepFailed, first_line


@dataclass(frozen=True)
class WeightOnlyOptions:
    bits: int = option(8, "bits per weight: 8 (or 4)")
    block_size: int = option(32, "weights sharing one scale along the reduced axis")


class QuantizeOnnxWeightOnly(Step):
    name = "quantize-onnx-weight-only"
    Options = WeightOnlyOptions

    def label(self) -> str:
        return f"ONNX INT{self.options.bits} weight-only (MatMulNBits)"

    def run(self, ctx: StepContext, model: Optional[Path], output: Path) -> StepResult:
        import_onnxruntime("convert", "ONNX weight-only quantization")
        onnx = require("onnx", "convert")
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

        o = self.options
        try:
            with captured_output("MatMulNBitsQuantizer"):
                quantizer = MatMulNBitsQuantizer(onnx.load(str(model)), bits=o.bits, block_size=o.block_size,
                                                 is_symmetric=True, accuracy_level=4, op_types_to_quantize=("MatMul",))
                quantizer.process()
        except Exception as exc:
            raise StepFailed(f"onnxruntime's weight-only quantizer failed: {first_line(exc)}") from exc
        packed = sum(1 for n in quantizer.model.model.graph.node if n.op_type == "MatMulNBits")
        if not packed:
            raise StepFailed("weight-only INT8 does not apply: the graph has no MatMul with a constant weight")
        quantizer.model.save_model_to_file(str(output), use_external_data_format=False)
        return StepResult(output, {"scheme": f"weight-only INT{o.bits} (MatMulNBits, block {o.block_size}, "
                                             f"{packed} MatMul)"})
