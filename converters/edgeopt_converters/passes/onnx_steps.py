"""What the ONNX-rewriting steps share: their tools, and how a quantization scheme is described."""
from __future__ import annotations

from typing import Any, Sequence, Tuple

from edgeopt_agent.errors import require
from edgeopt_agent.runners.onnxruntime.importing import import_onnxruntime


def onnx_and_onnxruntime(purpose: str) -> Any:
    """The onnx module, once onnx and onnxruntime are both installed (a UserError naming `purpose` if not)."""
    onnx = require("onnx", "convert", purpose)
    import_onnxruntime("convert", purpose)
    return onnx


def describe_scheme(base: str, flags: Sequence[Tuple[bool, str]], float_nodes: int) -> str:
    """`base`, then each flag's word where it holds, then how many nodes stay float."""
    text = base + "".join(f" {word}" for on, word in flags if on)
    if float_nodes:
        text += f", {float_nodes} nodes float"
    return text
