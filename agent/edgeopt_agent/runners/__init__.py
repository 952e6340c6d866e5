"""Model runners: one small interface (load, infer, close) over ONNX Runtime, TensorRT, TFLite, ncnn and
ExecuTorch.

    from edgeopt_agent.runners import open_runner
    with open_runner("model.tflite", threads=4) as runner:
        outputs = runner.infer({"input": image})

`open_runner` picks the runtime from the file (or `runtime=`), imports it, and returns the runner
unloaded; `load()` (or entering the `with` block) parses the model.

Each runtime's code is a backend folder here (`onnxruntime/`, `tensorrt/`, `tflite/`, `ncnn/`,
`executorch/`): its runner, availability check, options and profiler. A backend's package is light
(it imports its runtime and numpy inside the functions that need them), so the runtime table
(edgeopt_agent.runtimes) points at them directly. The modules beside them are what every backend
shares (`base`, `errors`, `precision`, `quantization`, `engine_cache`) and what reads the table
(`formats`, `availability`, `opening`). This package imports none of them until a name is asked for:
importing it imports no numpy, no runtime and not the table.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .errors import ArtifactError, InputError, UnsupportedModelError, looks_like_out_of_memory

if TYPE_CHECKING:  # pragma: no cover
    from .availability import runtime_report, unavailable_reason
    from .base import Runner, TensorInfo
    from .formats import detect_format, resolve_runtime
    from .opening import open_runner
    from .quantization import Quantization, dequantize, quantize

# Names that live in modules needing numpy, a runtime or the runtime table, imported on first use.
_LAZY = {
    "Runner": ".base",
    "TensorInfo": ".base",
    "open_runner": ".opening",
    "detect_format": ".formats",
    "resolve_runtime": ".formats",
    "runtime_report": ".availability",
    "unavailable_reason": ".availability",
    "Quantization": ".quantization",
    "quantize": ".quantization",
    "dequantize": ".quantization",
}

__all__ = [
    "ArtifactError",
    "InputError",
    "Quantization",
    "Runner",
    "TensorInfo",
    "UnsupportedModelError",
    "dequantize",
    "detect_format",
    "looks_like_out_of_memory",
    "open_runner",
    "quantize",
    "resolve_runtime",
    "runtime_report",
    "unavailable_reason",
]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
