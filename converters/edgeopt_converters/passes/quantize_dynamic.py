"""ONNX FP32 -> ONNX INT8 with dynamic activation quantization (weights INT8, activations per call).

The mode for transformers (MatMul/Gemm after attention fusion) and recurrent models (LSTM/GRU),
whose activation ranges change from input to input. No calibration data is needed.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Tuple

from edgeopt_agent.runners.onnxruntime.importing import import_onnxruntime

from ._quiet import captured_output
from .base import Step, StepContext, StepResult, option
from .errors import StepFailed, first_line
from .onnx_steps import describe_scheme

TRANSFORMER_OPS = ("MatMul", "Gemm", "Attention", "Gather", "EmbedLayerNormalization")  # Gather: the embedding table
RECURRENT_OPS = ("MatMul", "Gemm", "LSTM", "GRU")


@dataclass(frozen=True)
class OnnxDynamicOptions:
    op_types: Tuple[str, ...] = option(TRANSFORMER_OPS, "op types whose weights become INT8")
    per_channel: bool = option(True, "one scale per output channel (per-tensor loses too much on transformers)")
    reduce_range: bool = option(False, "7-bit weights: avoids VPMADDUBSW saturation on x86 without VNNI")
    weight_type: str = option("int8", "weight type: int8 or uint8")
    nodes_to_exclude: Tuple[str, ...] = option((), "nodes kept in float")

    @property
    def scheme(self) -> str:
        return describe_scheme(
            f"dynamic {'S8' if self.weight_type == 'int8' else 'U8'} weights ({', '.join(self.op_types)})",
            [(self.per_channel, "per-channel"), (self.reduce_range, "reduce-range")],
            len(self.nodes_to_exclude),
        )


class QuantizeOnnxDynamic(Step):
    name = "quantize-onnx-dynamic"
    Options = OnnxDynamicOptions
    scales_per_run = True

    def label(self) -> str:
        return "ONNX INT8 (dynamic)"

    def run(self, ctx: StepContext, model: Optional[Path], output: Path) -> StepResult:
        import_onnxruntime("convert", "ONNX INT8 quantization")
        from onnxruntime import quantization as q

        o = self.options
        try:
            with captured_output("quantize_dynamic"):
                q.quantize_dynamic(
                    str(model), str(output), op_types_to_quantize=list(o.op_types), per_channel=o.per_channel,
                    reduce_range=o.reduce_range,
                    weight_type=q.QuantType.QInt8 if o.weight_type == "int8" else q.QuantType.QUInt8,
                    nodes_to_exclude=list(o.nodes_to_exclude), extra_options={"MatMulConstBOnly": True})
        except Exception as exc:
            raise StepFailed(f"onnxruntime quantize_dynamic failed: {first_line(exc)}") from exc
        return StepResult(output, {"scheme": o.scheme, "float_nodes": list(o.nodes_to_exclude)})
