"""Whether this host's onnxruntime INT8 kernels compute what a target board's would.

On x86 without VNNI (AVX2, or AVX-512 without VNNI), onnxruntime's INT8 convolutions and matrix
products multiply with VPMADDUBSW, whose 16-bit pair sums saturate unless weights are 7-bit
(`reduce_range`). An artifact quantized with full 8-bit weights for another target (an ARM board,
an x86 board with VNNI) computes exactly there but not here: validated here with the fused
kernels, it would be blamed for this host's arithmetic. Such artifacts are validated with their
quantize/dequantize pairs left unfused (onnxruntime's `session.disable_quant_qdq`): the arithmetic
the quantized model defines, carried out in float, which is what exact integer kernels compute.
"""
from __future__ import annotations

import platform
from typing import FrozenSet, Optional

from edgeopt_agent.cpu_check import cpu_flags

# Any of these gives onnxruntime an INT8 dot product that accumulates in 32 bits.
EXACT_INT8_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")
X86_MACHINES = ("x86_64", "amd64", "i686", "i386")
UNFUSED_QDQ = {"session.disable_quant_qdq": "1"}


def int8_kernels_saturate(flags: Optional[FrozenSet[str]] = None, machine: Optional[str] = None) -> bool:
    """True on an x86 host whose onnxruntime INT8 products saturate with full 8-bit weights."""
    machine = (machine or platform.machine()).lower()
    if machine not in X86_MACHINES:
        return False
    flags = cpu_flags() if flags is None else flags
    return not any(flag in flags for flag in EXACT_INT8_FLAGS)


def validation_session_config(precision: str, fmt: str, reduce_range: bool,
                              saturates: Optional[bool] = None) -> dict:
    """onnxruntime session settings under which this host computes what the target will.

    Empty unless the artifact is static INT8 ONNX with full 8-bit weights and this host's kernels
    saturate them.
    """
    if fmt != "onnx" or precision != "int8" or reduce_range:
        return {}
    saturates = int8_kernels_saturate() if saturates is None else saturates
    return dict(UNFUSED_QDQ) if saturates else {}
