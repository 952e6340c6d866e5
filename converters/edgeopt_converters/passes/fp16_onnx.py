"""ONNX FP32 -> ONNX FP16 (weights and compute; inputs/outputs stay FP32)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edgeopt_agent.errors import require
from edgeopt_agent.runners.onnxruntime_import import import_onnxruntime

from ._quiet import captured_output


@dataclass(frozen=True)
class OnnxFp16Options:
    keep_io_types: bool = True


class ConvertOnnxFp16:
    def __init__(self, options: OnnxFp16Options = OnnxFp16Options()):
        self.options = options

    def run(self, fp32_model: Path, output: Path) -> Path:
        onnx = require("onnx", "convert", "ONNX FP16 conversion")
        import_onnxruntime("convert", "ONNX FP16 conversion")
        from onnxruntime.transformers.float16 import convert_float_to_float16

        model = onnx.load(str(fp32_model))
        with captured_output("convert_float_to_float16"):
            converted = convert_float_to_float16(model, keep_io_types=self.options.keep_io_types)
        onnx.save(converted, str(output))
        return output
