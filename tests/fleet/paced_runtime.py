"""A runtime that exists only in the tests: ONNX Runtime, each call padded to a latency the model names.

A build made exactly 10 % slower cannot be had from a real model on a machine whose CPUs other work
shares; this runtime runs the model through onnxruntime as usual, then sleeps until the call has
taken the `paced_ms` the ONNX file's metadata says. So a candidate whose file says 22 against a
baseline's 20 is a build 10 % slower, through the real agent, engine, transport, store and comparison.

`register()` adds the row to the runtime table: a test monkeypatches it in, and the agents (and their
benchmark children) get it from a sitecustomize on PYTHONPATH that calls it (`site_folder`).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

from edgeopt_agent import runtimes

PACE_KEY = "paced_ms"


def runner() -> type:
    from edgeopt_agent.runners.onnxruntime.runner import OnnxRuntimeRunner

    class PacedRunner(OnnxRuntimeRunner):
        runtime = "paced"

        def _load(self) -> None:
            super()._load()
            self._pace_s = float(self._session.get_modelmeta().custom_metadata_map[PACE_KEY]) / 1000.0

        def bind(self, prepared):
            call, pace = super().bind(prepared), self._pace_s

            def paced():
                start = time.perf_counter()
                outputs = call()
                left = start + pace - time.perf_counter()
                if left > 0:
                    time.sleep(left)
                return outputs

            return paced

    return PacedRunner


def unavailable_reason(runtime: runtimes.Runtime) -> Optional[str]:
    return None


ROW = runtimes.Runtime("paced", ("onnx",), runner, unavailable_reason, distributions=("onnxruntime",),
                       in_profiles=False)


def register() -> None:
    if ROW not in runtimes.TABLE:
        runtimes.TABLE = runtimes.TABLE + (ROW,)


def site_folder(folder: Path) -> str:
    """A folder holding a sitecustomize that registers the row: put it on a subprocess's PYTHONPATH."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(f"import sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\n"
                                             "import paced_runtime\npaced_runtime.register()\n")
    return str(folder)


def paced_onnx(pace_ms: float) -> bytes:
    """y = relu(x) on float[1, 4], with the latency each call is padded to in its metadata."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "paced",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    helper.set_model_props(model, {PACE_KEY: f"{pace_ms:g}"})
    onnx.checker.check_model(model)
    return model.SerializeToString()
