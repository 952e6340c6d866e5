"""ExecuTorch programs on ExecuTorch's own Python runtime (`executorch.runtime`, from the executorch
package), which takes and returns torch tensors: what runs `.pte` files where torch is installed
anyway (the host that converts, a board that has the executorch package).

It imports torch (the one agent module allowed to, tests/agent/test_agent_import_rules.py) to turn
arrays into tensors, only when a program is loaded and only after executorch, which needs torch
itself; no agent extra installs torch.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Sequence

import numpy as np

from ...errors import MissingExtraError, require
from ..errors import ArtifactError, looks_like_out_of_memory
from .numpy_runtime import scalar_dtype

PACKAGE = "executorch"


def unavailable_reason() -> str:
    """Why this backend cannot run here, or "" when it can (importing it imports torch)."""
    try:
        require("executorch.runtime", "executorch", "ExecuTorch .pte models")
    except (MissingExtraError, ImportError) as exc:  # ImportError: installed, but it cannot load
        return str(exc)
    return ""


class PybindMethod:
    """One loaded method: `inputs`/`outputs` as (shape, dtype) and a call on numpy arrays."""

    def __init__(self, path: Path, method: str):
        runtime = require("executorch.runtime", "executorch", "ExecuTorch .pte models")
        self._torch = require("torch", "executorch", "ExecuTorch's Python runtime")  # its tensors are what it takes
        try:
            program = runtime.Runtime.get().load_program(str(path), verification=runtime.Verification.InternalConsistency)  # Minimal segfaults on corrupt files
            self._method = program.load_method(method)
        except RuntimeError as exc:
            text = str(exc).strip()
            if looks_like_out_of_memory(text):
                raise
            raise ArtifactError(f"{path.name} is not a .pte program executorch {_version()} can load: "
                                f"{text.splitlines()[0] if text else type(exc).__name__}") from exc
        meta = self._method.metadata
        self.inputs = tuple(_meta(meta.input_tensor_meta(i)) for i in range(meta.num_inputs()))
        self.outputs = tuple(_meta(meta.output_tensor_meta(i)) for i in range(meta.num_outputs()))

    def __call__(self, arrays: Sequence[np.ndarray]) -> List[np.ndarray]:
        tensors = [self._torch.from_numpy(a) for a in arrays]
        return [t.numpy() for t in self._method.execute(tensors)]

    def describe(self) -> Dict[str, Any]:
        return {"runtime_package": PACKAGE, "runtime_version": _version(), "executorch_version": _version()}


def _meta(info) -> tuple:
    return tuple(int(d) for d in info.sizes()), scalar_dtype(int(info.dtype()))


def _version():
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(PACKAGE)
    except PackageNotFoundError:
        return None
