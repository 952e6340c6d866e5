"""ExecuTorch: a `.pte` program (XNNPACK-delegated, or on portable kernels), run on whichever
ExecuTorch runtime this machine has, tried in this order:

  executorch-numpy-runtime   numpy in and out, no torch: a board's install (Python 3.12+ only)
  executorch.runtime         the executorch package's own runtime, with torch: the host, or a board
                             with torch (pybind_runtime.py)

A `.pte` keeps no tensor names: inputs and outputs are called input_0, input_1, ... and output_0, ...
in the method's order, and are matched to the model's names by position (as TFLite's are). The
runtime sizes its own XNNPACK thread pool; `threads` cannot be set and is reported as not applied.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np

from . import numpy_runtime, pybind_runtime
from ..base import Runner, TensorInfo
from ..errors import ArtifactError, UnsupportedModelError

METHOD = "forward"
_BACKENDS = ((numpy_runtime, numpy_runtime.NumpyMethod), (pybind_runtime, pybind_runtime.PybindMethod))


def choose_backend() -> Callable[[Path, str], Any]:
    """The first ExecuTorch runtime that imports here, or UnsupportedModelError naming why none does."""
    reasons = []
    for module, method in _BACKENDS:
        reason = module.unavailable_reason()
        if not reason:
            return method
        reasons.append(reason)
    raise UnsupportedModelError("no ExecuTorch runtime here: " + "; ".join(reasons) +
                                " (a board installs edgeopt[agent-executorch] on Python 3.12+)")


class ExecuTorchRunner(Runner):
    runtime = "executorch"

    def __init__(self, path: Union[str, Path], threads: Optional[int] = None, method: str = METHOD):
        super().__init__(path, threads)
        self.method_name = method
        self._backend = choose_backend()
        self._method = None
        self.notes: List[str] = []

    def _load(self) -> None:
        if not self.path.is_file():
            raise ArtifactError(f"artifact not found: {self.path}")
        try:
            method = self._backend(self.path, self.method_name)
            inputs, outputs = _tensor_infos("input", method.inputs), _tensor_infos("output", method.outputs)
        except KeyError:  # the runtime's table of methods has no such name
            raise ArtifactError(f"{self.path.name} has no method '{self.method_name}': a damaged file, or a program "
                                "exported with another method name") from None
        except (UnicodeDecodeError, IndexError) as exc:  # names that are not UTF-8, tensor tables that do not hold
            raise ArtifactError(f"{self.path.name} is not a .pte program ExecuTorch can load: its method table is "
                                f"damaged ({type(exc).__name__}: {exc})") from None
        self._inputs, self._outputs = inputs, outputs
        self._method = method
        if self.threads:
            self.notes.append(f"threads={self.threads} not applied: the ExecuTorch runtime sizes XNNPACK's "
                              "thread pool itself")

    def _close(self) -> None:
        self._method = None

    def describe(self) -> Dict[str, Any]:
        described = {"runtime": self.runtime, "threads": None, "threads_requested": self.threads}
        if self._method is not None:
            described.update(self._method.describe())
        return described

    def bind(self, prepared: Mapping[str, np.ndarray]) -> Callable[[], List[np.ndarray]]:
        self._require_loaded()
        method = self._method
        arrays = [prepared[info.name] for info in self._inputs]
        return lambda: method(arrays)


def _tensor_infos(prefix: str, metas: Tuple[Tuple[Tuple[int, ...], str], ...]) -> Tuple[TensorInfo, ...]:
    return tuple(TensorInfo(f"{prefix}_{index}", shape, dtype) for index, (shape, dtype) in enumerate(metas))
