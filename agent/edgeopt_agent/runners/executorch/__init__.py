"""The ExecuTorch backend (runner.py): `.pte` programs on executorch-numpy-runtime (numpy_runtime.py, no
torch) or the executorch package's own runtime (pybind_runtime.py, with torch), whichever imports here.
Importing this package imports neither numpy, torch nor ExecuTorch."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:  # pragma: no cover
    from ...runtimes import Runtime

__all__ = ["runner_class", "unavailable_reason"]


def runner_class() -> type:
    from .runner import ExecuTorchRunner

    return ExecuTorchRunner


def unavailable_reason(runtime: "Runtime") -> Optional[str]:
    """None when one of the ExecuTorch runtimes imports here; otherwise UnsupportedModelError says why none does."""
    from .runner import choose_backend

    choose_backend()
    return None
