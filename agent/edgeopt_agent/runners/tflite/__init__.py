"""The TFLite / LiteRT backend (runner.py): ai-edge-litert, else tflite-runtime on older Pythons, never
TensorFlow on the board. Importing this package imports neither numpy nor an interpreter."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:  # pragma: no cover
    from ...runtimes import Runtime

__all__ = ["runner_class", "unavailable_reason"]


def runner_class() -> type:
    from .runner import TFLiteRunner

    return TFLiteRunner


def unavailable_reason(runtime: "Runtime") -> Optional[str]:
    """None when a TFLite interpreter imports here; otherwise MissingExtraError names the extra."""
    from .runner import find_interpreter

    find_interpreter()
    return None
