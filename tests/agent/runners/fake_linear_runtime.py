"""A runtime that exists only in the tests: one row and one backend module, nothing else.

Its format, "linear", is an .npz holding a fixed linear map (weight, bias) and the names of its one
input and output; the runner computes x @ weight.T + bias. The row points at this module's functions
as the built-in rows point at their folders under edgeopt_agent/runners/ (`runner`: the runner class;
`unavailable_reason`: the availability check). `register()` adds the row to the runtime table: a test
monkeypatches it in, and a benchmark child process gets it from a sitecustomize that calls it (see
test_fake_runtime_end_to_end.py).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from edgeopt_agent import runtimes
from edgeopt_agent.runners.base import Runner, TensorInfo
from edgeopt_agent.runners.errors import ArtifactError


def runner_class() -> type:
    return LinearRunner


def unavailable_reason(runtime: runtimes.Runtime) -> Optional[str]:
    return None


LINEAR = runtimes.Format("linear", "Linear", ".linear", precisions=("fp32",), export_step="export-linear",
                         export_base="onnx-fp32")
ROW = runtimes.Runtime("linear", ("linear",), runner_class, unavailable_reason, defines=(LINEAR,))


def register() -> None:
    if ROW not in runtimes.TABLE:
        runtimes.TABLE = runtimes.TABLE + (ROW,)


class LinearRunner(Runner):
    runtime = "linear"

    def _load(self) -> None:
        try:
            with np.load(self.path, allow_pickle=False) as data:
                self._weight, self._bias = data["weight"], data["bias"]
                names = str(data["input_name"]), str(data["output_name"])
        except (OSError, ValueError, KeyError) as exc:
            raise ArtifactError(f"{self.path.name} is not a linear model: {exc}") from exc
        self._inputs = (TensorInfo(names[0], (None, self._weight.shape[1]), "float32"),)
        self._outputs = (TensorInfo(names[1], (None, self._weight.shape[0]), "float32"),)

    def _close(self) -> None:
        self._weight = self._bias = None

    def bind(self, prepared):
        x, weight, bias = prepared[self._inputs[0].name], self._weight, self._bias
        return lambda: [(x @ weight.T + bias).astype(np.float32)]
