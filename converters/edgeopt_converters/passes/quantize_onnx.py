"""ONNX FP32 -> ONNX INT8: static QDQ quantization with onnxruntime's own tools."""
from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Tuple

from edgeopt_agent.errors import UserError
from edgeopt_agent.runners.onnxruntime_import import import_onnxruntime

from ..tensors import Dataset
from ._quiet import captured_output, log

CALIBRATION_METHODS = ("minmax", "entropy", "percentile")
TENSORRT_INT8_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul", "Add")


@dataclass(frozen=True)
class OnnxInt8Options:
    activation_type: str = "uint8"  # "uint8" | "int8"
    weight_type: str = "int8"
    reduce_range: bool = False  # 7-bit weights: avoids VPMADDUBSW saturation on x86 without VNNI
    per_channel: bool = True
    symmetric_activations: bool = False  # TensorRT needs symmetric INT8 activations
    calibrate_method: str = "minmax"
    # None quantizes every op onnxruntime can; a tuple limits Q/DQ to those ops' inputs.
    op_types: Optional[Tuple[str, ...]] = None
    quantize_outputs: bool = True
    quantize_bias: bool = True  # INT32 biases; TensorRT's Q/DQ layers take INT8 only
    keep_activations: bool = False  # keep Relu/Clip after Q/DQ for the runtime to fuse

    @classmethod
    def for_tensorrt(cls, calibrate_method: str = "minmax") -> "OnnxInt8Options":
        """TensorRT explicit quantization: symmetric S8 everywhere, Q/DQ on the inputs of the ops
        TensorRT runs in INT8 (weighted layers, and residual Adds so the add fuses into the
        convolution before it), never on their outputs: TensorRT fuses the DQ -> op -> Q chains
        itself and an extra Q/DQ on an output only splits a fusion. Biases stay float."""
        return cls("int8", "int8", reduce_range=False, symmetric_activations=True,
                   calibrate_method=calibrate_method, op_types=TENSORRT_INT8_OPS, quantize_outputs=False,
                   quantize_bias=False, keep_activations=True)

    @property
    def scheme(self) -> str:
        short = {"uint8": "U8", "int8": "S8"}
        text = f"QDQ {short[self.activation_type]}{short[self.weight_type]}"
        if self.per_channel:
            text += " per-channel"
        if self.reduce_range:
            text += " reduce-range"
        if self.symmetric_activations:
            text += " symmetric-activations"
        if not self.quantize_outputs:
            text += " input-only (TensorRT layout)"
        return text


@contextlib.contextmanager
def _working_directory(path: str):
    previous = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(previous)


def _pre_process(q, fp32_path: str, prepared: Path, tmp: str) -> Optional[Path]:
    """onnxruntime's pre-processing (shape inference, constant folding, fusions), which only
    improves placement; retried without symbolic shape inference, which gives up on dynamic dims
    it cannot follow. None when it fails both ways."""
    errors = []
    for skip_symbolic in (False, True):
        try:
            # The symbolic inference dumps its partial model into the current folder when it
            # gives up: run it inside tmp.
            with captured_output("quant_pre_process"), _working_directory(tmp):
                q.quant_pre_process(fp32_path, str(prepared), skip_symbolic_shape=skip_symbolic)
            return prepared
        except Exception as exc:
            errors.append(str(exc) or type(exc).__name__)
    log.warning("onnxruntime quant_pre_process failed (%s); quantizing the exported graph as is", "; ".join(errors))
    return None


class _Reader:
    """Feeds calibration samples to onnxruntime's calibrator, one sample at a time."""

    def __init__(self, dataset: Dataset, batch: int, on_batch: Optional[Callable[[int], None]]):
        self._batches = iter(dataset.batches(batch))
        self._on_batch = on_batch

    def get_next(self):
        item = next(self._batches, None)
        if item is None:
            return None
        if self._on_batch:
            self._on_batch(item[1])
        return item[0]


class QuantizeOnnxInt8:
    def __init__(self, options: OnnxInt8Options = OnnxInt8Options()):
        if options.calibrate_method not in CALIBRATION_METHODS:
            raise UserError(f"unknown calibration method '{options.calibrate_method}'; choose one of {', '.join(CALIBRATION_METHODS)}")
        self.options = options

    def run(self, fp32_model: Path, calibration: Dataset, output: Path, batch: int = 1,
            on_batch: Optional[Callable[[int], None]] = None) -> Path:
        import_onnxruntime("convert", "ONNX INT8 quantization")
        from onnxruntime import quantization as q

        o = self.options
        types = {"uint8": q.QuantType.QUInt8, "int8": q.QuantType.QInt8}
        methods = {"minmax": q.CalibrationMethod.MinMax, "entropy": q.CalibrationMethod.Entropy,
                   "percentile": q.CalibrationMethod.Percentile}
        with tempfile.TemporaryDirectory(prefix="edgeopt-quant-") as tmp:
            prepared = Path(tmp) / "prepared.onnx"
            fp32_path = str(Path(fp32_model).resolve())  # before the working directory changes
            prepared = _pre_process(q, fp32_path, prepared, tmp) or fp32_model
            with captured_output("quantize_static"):
                q.quantize_static(
                    str(prepared),
                    str(output),
                    _Reader(calibration, batch, on_batch),
                    quant_format=q.QuantFormat.QDQ,
                    per_channel=o.per_channel,
                    reduce_range=o.reduce_range,
                    activation_type=types[o.activation_type],
                    weight_type=types[o.weight_type],
                    calibrate_method=methods[o.calibrate_method],
                    op_types_to_quantize=list(o.op_types) if o.op_types else None,
                    extra_options={
                        "ActivationSymmetric": o.symmetric_activations,
                        "WeightSymmetric": True,
                        "CalibTensorRangeSymmetric": o.symmetric_activations,
                        "OpTypesToExcludeOutputQuantization": [] if o.quantize_outputs else list(o.op_types or ()),
                        "QDQKeepRemovableActivations": o.keep_activations,
                        "QuantizeBias": o.quantize_bias,
                    },
                )
        return output
