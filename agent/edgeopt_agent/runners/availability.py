"""Which runtimes this machine can use now, and why not where it cannot.

    unavailable_reason("tensorrt")   # None, or "TensorRT is not installed (...); on a Jetson ..."
    runtime_report()                 # {"tensorrt": {"available": False, "reason": "..."}, ...}

Asking imports the runtime (and, for TensorRT, initialises CUDA), so a daemon asks once, or in
a child process.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

from ..errors import UserError
from .. import runtimes
from ..runtimes import Runtime


def unavailable_reason(runtime: str) -> Optional[str]:
    """None when `runtime` can run here, else why it cannot, in words the user can act on."""
    rows = runtimes.BY_NAME
    if runtime not in rows:
        return f"unknown runtime '{runtime}'; known: {', '.join(rows)}"
    try:
        return rows[runtime].unavailable_reason()
    except UserError as exc:
        return str(exc)


def tensorrt_reason(runtime: Runtime) -> Optional[str]:
    from .cuda_runtime import CudaRuntime
    from .tensorrt_build import import_tensorrt

    import_tensorrt()
    CudaRuntime.load()
    return None


def tflite_reason(runtime: Runtime) -> Optional[str]:
    from .tflite_runner import find_interpreter

    find_interpreter()
    return None


def onnxruntime_reason(runtime: Runtime) -> Optional[str]:
    from .onnxruntime_import import import_onnxruntime

    ort = import_onnxruntime("agent-onnx", "ONNX models")
    available = list(ort.get_available_providers())
    if runtime.provider is not None and runtime.provider not in available:
        return f"this onnxruntime build ({ort.__version__}) has no {runtime.provider}; it has: {', '.join(available)}"
    return None


def runtime_report(names: Optional[Sequence[str]] = None) -> Dict[str, Dict[str, Any]]:
    """Every runtime (or those named): available or not, why not, and what its row says it does not offer."""
    report = {}
    for runtime in runtimes.RUNTIMES if names is None else names:
        reason = unavailable_reason(runtime)
        report[runtime] = {"available": reason is None, "reason": reason}
        row = runtimes.BY_NAME.get(runtime)
        if row is not None and row.notes:
            report[runtime]["notes"] = row.notes
    return report

