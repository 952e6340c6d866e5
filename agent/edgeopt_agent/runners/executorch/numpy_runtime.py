"""ExecuTorch programs on executorch-numpy-runtime: numpy in and out, no torch (Python 3.12+).

It runs `.pte` files of the ExecuTorch release it was built from (its `__et_version__`); a
program from an incompatible release fails to load as if corrupt.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from ...errors import MissingExtraError, require
from ..errors import ArtifactError, UnsupportedModelError, looks_like_out_of_memory

PACKAGE = "executorch-numpy-runtime"
# ExecuTorch's ScalarType codes (c10's numbering) for the dtypes edgeopt feeds and reads.
SCALAR_TYPES = {0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16", 6: "float32",
                7: "float64", 11: "bool"}


def unavailable_reason() -> str:
    """Why this backend cannot run here, or "" when it can."""
    if sys.version_info < (3, 12):
        return f"{PACKAGE} needs Python 3.12 or later (this is {sys.version_info.major}.{sys.version_info.minor})"
    try:
        require("executorch_numpy_runtime", "agent-executorch", "ExecuTorch .pte models")
    except (MissingExtraError, ImportError) as exc:  # ImportError: installed, but it cannot load
        return str(exc)
    return ""


class NumpyMethod:
    """One loaded method: `inputs`/`outputs` as (shape, dtype) and a call on numpy arrays."""

    def __init__(self, path: Path, method: str):
        et = self._et = require("executorch_numpy_runtime", "agent-executorch", "ExecuTorch .pte models")
        try:
            self._method = et.Runtime().load_program(str(path)).load_method(method)
            meta = self._method.metadata
        except et.ExecuTorchError as exc:
            raise self._load_error(path, exc) from exc
        self.inputs = _metas(meta["inputs"])
        self.outputs = _metas(meta["outputs"])

    def __call__(self, arrays: Sequence[np.ndarray]) -> List[np.ndarray]:
        return list(self._method(list(arrays)))

    def describe(self) -> Dict[str, Any]:
        return {"runtime_package": PACKAGE, "runtime_version": getattr(self._et, "__version__", None),
                "executorch_version": getattr(self._et, "__et_version__", None)}

    def _load_error(self, path: Path, exc: Exception) -> Exception:
        et, text = self._et, str(exc).strip()
        message = text.splitlines()[0] if text else type(exc).__name__
        if looks_like_out_of_memory(text):
            return exc
        if isinstance(exc, (et.BackendNotAvailable, et.OperatorNotFound)):
            return UnsupportedModelError(f"{PACKAGE} cannot run {path.name}: {message}")
        return ArtifactError(f"{path.name} is not a .pte program this runtime can load (it runs ExecuTorch "
                             f"{getattr(et, '__et_version__', '?')} programs): {message}")


def _metas(metas: Sequence[Dict[str, Any]]) -> Tuple[Tuple[Tuple[int, ...], str], ...]:
    return tuple((tuple(int(d) for d in m["shape"]), scalar_dtype(int(m["scalar_type"]))) for m in metas)


def scalar_dtype(code: int) -> str:
    dtype = SCALAR_TYPES.get(code)
    if dtype is None:
        raise UnsupportedModelError(f"the program has a tensor of ExecuTorch scalar type {code}, "
                                    "which edgeopt cannot feed or read")
    return dtype
