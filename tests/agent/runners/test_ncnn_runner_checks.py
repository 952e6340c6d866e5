"""What the ncnn runner checks on a bundle: the layers this ncnn build lacks are named (pnnx can write
layers, such as Gather, that ncnn does not register), and outputs come in the model's order, which
the bundle records (ncnn lists them in layer order)."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("ncnn", reason="the ncnn runner needs the agent-ncnn extra")

from edgeopt_agent.bundle import write_bundle  # noqa: E402
from edgeopt_agent.runners.errors import UnsupportedModelError  # noqa: E402
from edgeopt_agent.runners.ncnn.runner import FACTS, PARAM, WEIGHTS, NcnnRunner, output_order  # noqa: E402

GATHER_PARAM = """7767517
3 3
Input in0 0 1 input 0=8
MemoryData indices 0 1 idx 0=8
Gather gather 2 1 input idx out
"""


def test_a_graph_with_a_layer_ncnn_lacks_names_that_layer(tmp_path):
    path = write_bundle({PARAM: GATHER_PARAM.encode(), WEIGHTS: b"",
                         FACTS: json.dumps({"precision": "fp32"}).encode()}, tmp_path / "model.fp32.ncnn")
    with pytest.raises(UnsupportedModelError, match=r"has no layer Gather, which model\.fp32\.ncnn uses"):
        NcnnRunner(path, threads=1).load()


def test_outputs_come_in_the_order_the_bundle_records():
    listed = ["softmax", "boxes", "landmarks"]  # layer order
    assert output_order({"outputs": ["boxes", "landmarks", "softmax"]}, listed) == ["boxes", "landmarks", "softmax"]


def test_without_a_recorded_order_or_with_other_names_the_layer_order_stays():
    listed = ["softmax", "boxes"]
    assert output_order({"precision": "fp32"}, listed) == listed
    assert output_order({"outputs": ["boxes", "other"]}, listed) == listed
