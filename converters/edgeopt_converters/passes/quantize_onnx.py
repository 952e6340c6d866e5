"""ONNX FP32 -> ONNX INT8: static QDQ quantization with onnxruntime's own tools.

Activation ranges come from passes/calibration.py (computed once per model and method, reused by
every mixed-precision attempt); `nodes_to_exclude` keeps nodes in float.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Tuple

from edgeopt_agent.errors import UserError, require
from edgeopt_agent.runners.onnxruntime.importing import import_onnxruntime

from ._quiet import captured_output
from .base import Step, StepContext, StepResult, option
from .calibration import Calibration, calibrate, load_calibration
from .errors import QuantizerCrashed, first_line
from .float_nodes import guard_float_nodes
from .onnx_steps import describe_scheme

CALIBRATION_METHODS = ("minmax", "entropy", "percentile")
ALL_OPS = ("*",)  # calibrated_op_types: every op's tensors
TENSORRT_INT8_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul", "Add")


@dataclass(frozen=True)
class OnnxInt8Options:
    activation_type: str = option("uint8", "activation type: uint8 or int8")
    weight_type: str = option("int8", "weight type: uint8 or int8")
    reduce_range: bool = option(False, "7-bit weights: avoids VPMADDUBSW saturation on x86 without VNNI")
    per_channel: bool = option(True, "one scale per output channel of each weight")
    symmetric_activations: bool = option(False, "symmetric INT8 activations (TensorRT needs them)")
    calibrate_method: str = option("minmax", "how activation ranges are chosen: minmax, entropy or percentile")
    op_types: Optional[Tuple[str, ...]] = option(None, "quantize only these op types (None: every op onnxruntime can)")
    quantize_outputs: bool = option(True, "Q/DQ on the outputs of quantized ops too")
    quantize_bias: bool = option(True, "INT32 biases; TensorRT's Q/DQ layers take INT8 only")
    keep_activations: bool = option(False, "keep Relu/Clip after Q/DQ for the runtime to fuse")
    adjust_weights_for_bias: bool = option(True, "widen a weight's scale where its INT32 bias would overflow "
                                                 "(onnxruntime's optional pass)")
    nodes_to_exclude: Tuple[str, ...] = option((), "nodes kept in float (mixed precision)")
    calibrated_op_types: Optional[Tuple[str, ...]] = option(
        None, "calibrate the tensors of these op types (None: op_types'; ALL_OPS: every op's), so that the "
              "attempts of a mixed-precision search share one calibration whatever each quantizes")

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
        return describe_scheme(
            f"QDQ {short[self.activation_type]}{short[self.weight_type]}",
            [(self.per_channel, "per-channel"), (self.reduce_range, "reduce-range"),
             (self.symmetric_activations, "symmetric-activations"),
             (not self.quantize_outputs, "input-only (TensorRT layout)"),
             (bool(self.op_types) and self.quantize_outputs, "(" + "/".join(self.op_types or ()) + " only)"),
             (self.calibrate_method != "minmax", self.calibrate_method),
             (not self.adjust_weights_for_bias, "no bias weight-scale adjustment")],
            len(self.nodes_to_exclude),
        )


class QuantizeOnnxStatic(Step):
    """Static QDQ INT8 (weights and activations), calibrated on the user's data."""

    name = "quantize-onnx-static"
    Options = OnnxInt8Options

    def __init__(self, options: Optional[OnnxInt8Options] = None, **overrides):
        super().__init__(options, **overrides)
        if self.options.calibrate_method not in CALIBRATION_METHODS:
            raise UserError(f"unknown calibration method '{self.options.calibrate_method}'; "
                            f"choose one of {', '.join(CALIBRATION_METHODS)}")

    def label(self) -> str:
        return f"calibrate ONNX INT8 ({self.options.scheme})"

    @property
    def calibrates(self) -> bool:
        return True

    def calibrate(self, ctx: StepContext, model: Path, cache: Path) -> Calibration:
        if ctx.calibration is None:
            raise UserError("static INT8 needs calibration data")
        o = self.options
        total = {"seen": 0}

        def batches(runs_of: int):
            for feed, real in ctx.calibration.batches(ctx.batch * runs_of, pad=runs_of == 1):
                if total["seen"] < ctx.calibration.size:  # progress counts the first pass only
                    ctx.advance(real)
                    total["seen"] += real
                yield feed

        op_types = o.op_types if o.calibrated_op_types is None else \
            None if o.calibrated_op_types == ALL_OPS else o.calibrated_op_types
        return calibrate(model, batches, o.calibrate_method, list(op_types) if op_types else None,
                         o.symmetric_activations, cache, threads=ctx.threads,
                         run_batch=ctx.run_batch if ctx.batch == 1 else 1)

    def run(self, ctx: StepContext, model: Optional[Path], output: Path) -> StepResult:
        import_onnxruntime("convert", "ONNX INT8 quantization")
        from onnxruntime import quantization as q

        o = self.options
        if ctx.calibration_cache is not None and ctx.calibration_cache.is_file():
            calibration = load_calibration(ctx.calibration_cache)
        else:
            calibration = self.calibrate(ctx, model, ctx.calibration_cache or calibration_cache(output))
        excluded = tuple(o.nodes_to_exclude) + tuple(sorted(unquantizable_nodes(model, calibration.unquantizable)
                                                            - set(o.nodes_to_exclude)))
        types = {"uint8": q.QuantType.QUInt8, "int8": q.QuantType.QInt8}
        methods = {"minmax": q.CalibrationMethod.MinMax, "entropy": q.CalibrationMethod.Entropy,
                   "percentile": q.CalibrationMethod.Percentile}
        try:
            with captured_output("quantize_static"):
                q.quantize_static(
                    str(model), str(output), None,
                    quant_format=q.QuantFormat.QDQ,
                    per_channel=o.per_channel,
                    reduce_range=o.reduce_range,
                    activation_type=types[o.activation_type],
                    weight_type=types[o.weight_type],
                    calibrate_method=methods[o.calibrate_method],
                    op_types_to_quantize=list(o.op_types) if o.op_types else None,
                    nodes_to_exclude=list(excluded),
                    calibration_cache_path=str(calibration.cache),
                    extra_options={
                        "ActivationSymmetric": o.symmetric_activations,
                        "WeightSymmetric": True,
                        "CalibTensorRangeSymmetric": o.symmetric_activations,
                        "OpTypesToExcludeOutputQuantization": [] if o.quantize_outputs else list(o.op_types or ()),
                        "QDQKeepRemovableActivations": o.keep_activations,
                        "QuantizeBias": o.quantize_bias,
                        "QDQDisableWeightAdjustForInt32Bias": not o.adjust_weights_for_bias,
                    },
                )
        except Exception as exc:
            raise QuantizerCrashed(f"onnxruntime quantize_static failed: {first_line(exc)}") from exc
        info: Dict[str, object] = {"scheme": o.scheme, "float_nodes": list(excluded)}
        if o.quantize_outputs:  # onnxruntime's layout (TensorRT builds its own engine and keeps float weights float)
            guarded = guard_float_nodes(output)
            if guarded:
                info["float_nodes_guarded"] = guarded
        if calibration.unquantizable:
            info["unquantizable_tensors"] = sorted(calibration.unquantizable)
        if calibration.flat:
            info["minmax_ranges_for"] = sorted(calibration.flat)
        return StepResult(output, info)


def calibration_cache(output: Path) -> Path:
    return output.with_name(output.name + ".calibration.json")


def unquantizable_nodes(model: Path, tensors) -> set:
    """Nodes that read or write a tensor no INT8 scale can hold."""
    if not tensors:
        return set()
    onnx = require("onnx", "convert")
    graph = onnx.load(str(model), load_external_data=False).graph
    return {n.name for n in graph.node if n.name and (set(n.input) | set(n.output)) & set(tensors)}
