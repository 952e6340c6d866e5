"""ONNX FP32 -> ONNX FP16 (weights and compute); inputs/outputs stay FP32 and ops that lose
precision or overflow in FP16 stay FP32. A failed FP16 is judged failed like any artifact, and the
pipeline names the ops whose outputs drift most (sensitivity.py)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Tuple

from ._quiet import captured_output
from .base import Step, StepContext, StepResult, option
from .onnx_steps import onnx_and_onnxruntime

# Sums, powers and exponentials overflow FP16's 65504 or lose its 11-bit mantissa on real data.
FP16_UNSAFE_OPS = ("Pow", "Exp", "Log", "ReduceSum", "ReduceMean", "ReduceProd", "ReduceSumSquare", "ReduceL2",
                   "Softplus", "LayerNormalization", "CumSum", "Range", "Erf")


@dataclass(frozen=True)
class OnnxFp16Options:
    keep_io_types: bool = option(True, "inputs and outputs stay FP32 (what the runners feed and read)")
    op_block_list: Tuple[str, ...] = option(FP16_UNSAFE_OPS, "op types kept in FP32 (on top of onnxruntime's own list)")
    node_block_list: Tuple[str, ...] = option((), "nodes kept in FP32")


class ConvertOnnxFp16(Step):
    name = "convert-onnx-fp16"
    Options = OnnxFp16Options

    def label(self) -> str:
        return "convert ONNX FP16"

    def run(self, ctx: StepContext, model: Optional[Path], output: Path) -> StepResult:
        onnx = onnx_and_onnxruntime("ONNX FP16 conversion")
        from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST, convert_float_to_float16

        o = self.options
        loaded = onnx.load(str(model))
        blocked = sorted(set(DEFAULT_OP_BLOCK_LIST) | set(o.op_block_list))
        with captured_output("convert_float_to_float16"):
            converted = convert_float_to_float16(loaded, keep_io_types=o.keep_io_types, op_block_list=blocked,
                                                 node_block_list=list(o.node_block_list) or None)
        onnx.save(converted, str(output))
        kept = sorted({n.op_type for n in loaded.graph.node if n.op_type in set(o.op_block_list)})
        return StepResult(output, {"scheme": "FP16" + (f", FP32 kept for {', '.join(kept)}" if kept else "")})
