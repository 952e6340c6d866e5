"""The graph onnxruntime really executes: the model after its graph optimizations, as it saves them.

onnxruntime rewrites a model before it runs it: QDQ groups become QLinearConv / QLinearAdd / QGemm
kernels, dynamic quantization's DynamicQuantizeLinear + MatMulInteger + rescale become one
DynamicQuantizeMatMul or MatMulIntegerToFloat, activations, batch norms and residual additions fold
into convolutions, transformer blocks become FusedMatMul / SkipLayerNormalization / Gelu, and on
x86 the float convolutions move to its blocked NCHWc layout and the INT8 ones to NHWC (with the
layout conversions as nodes of their own). Costing that graph instead of guessing which fusions
apply is what `graph_cost.analyze_onnx(..., runtime="onnxruntime")` does.

The optimized graph depends on the machine that optimizes it (its vector width decides the NCHWc
block, its INT8 support the NHWC rewrite): it describes what onnxruntime runs on *this* host.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from edgeopt_agent.errors import UserError, require

LEVEL = "ORT_ENABLE_ALL"  # onnxruntime's default, and what the agent's runner uses


def optimized(model: Any, level: str = LEVEL) -> Any:
    """`model` (an onnx.ModelProto with fixed input shapes) as onnxruntime's CPU provider optimizes it at `level`."""
    onnx = require("onnx", "convert")
    ort = require("onnxruntime", "convert")
    options = ort.SessionOptions()
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    with tempfile.TemporaryDirectory(prefix="edgeopt-ort-") as folder:
        target = Path(folder) / "optimized.onnx"
        options.optimized_model_filepath = str(target)
        try:
            ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        except Exception as exc:
            raise UserError(f"onnxruntime cannot load the model to optimize it: {str(exc).splitlines()[0][:200]}") from exc
        return onnx.load(str(target))
