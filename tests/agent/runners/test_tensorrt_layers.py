"""TensorRT's per-layer profile, against a stand-in for the bindings (no GPU here: the real one never ran).

The names used (IProfiler, report_layer_time, the context's `profiler` attribute) were checked in the
TensorRT 8.6, 10.13 and 11.4 Python bindings as DEVELOPERS.md describes.
"""
from __future__ import annotations

import types

import pytest

from edgeopt_agent.runners.tensorrt.layers import layer_kind, layer_profile


class _FakeContext:
    """Reports two layers' times to its profiler on every run, as enqueue does with a profiler attached."""

    def __init__(self):
        self.profiler = None
        self.runs = 0

    def run(self):
        self.runs += 1
        cold = 10.0 if self.runs == 1 else 0.0  # the first profiled run is slow and must be dropped
        self.profiler.report_layer_time("/backbone/conv1/Conv + /backbone/relu/Relu", 1.5 + cold)
        self.profiler.report_layer_time("Reformatting CopyNode for Input Tensor 0 to /head/MatMul", 0.25)


def test_layer_times_per_run_without_the_first_profiled_run():
    base = type("IProfiler", (), {"__init__": lambda self: None})
    trt = types.SimpleNamespace(IProfiler=base)
    context = _FakeContext()
    compute = [[9.9], [2.0, 2.0, 2.0, 2.0]]  # CUDA-event compute times, taken before and after the runs
    result = layer_profile(trt, context, context.run, 4, lambda: compute.pop(0))
    assert isinstance(context.profiler, base) and context.runs == 5
    assert result["profiler"] == "tensorrt" and result["runs"] == 4
    layers = {n["name"]: n for n in result["nodes"]}
    conv = layers["/backbone/conv1/Conv + /backbone/relu/Relu"]
    assert conv["ms"] == pytest.approx(1.5) and conv["calls"] == 4 and conv["op_type"] == "Conv+Relu"
    assert result["node_ms"] == pytest.approx(1.75) and result["run_ms"] == pytest.approx(2.0)
    assert result["node_coverage"] == pytest.approx(0.875)


@pytest.mark.parametrize("name, kind", [
    ("/model/conv1/Conv + /model/act/Relu", "Conv+Relu"),
    ("Conv_12 + Relu_13", "Conv+Relu"),
    ("Reformatting CopyNode for Input Tensor 0 to Conv_0", "Reformat"),
    ("node_MatMul_7", "node_MatMul"),
])
def test_layer_kinds_come_from_tensorrt_names(name, kind):
    assert layer_kind(name) == kind
