"""ONNX outputs of a PyTorch model are named from its forward (a dict's keys, a namedtuple's fields) or
`output_0..`, never after the exporter's last op (`unsqueeze_9`, `relu_9`)."""
from __future__ import annotations

from collections import namedtuple

import pytest

torch = pytest.importorskip("torch", reason="exporting needs the convert extra (torch)")
onnx = pytest.importorskip("onnx", reason="reading the export needs the convert extra (onnx)")

from edgeopt_converters.passes.export_onnx import write_onnx  # noqa: E402
from edgeopt_converters.passes.output_names import model_output_names  # noqa: E402

Faces = namedtuple("Faces", "heatmap scale")


class Returns(torch.nn.Module):
    def __init__(self, build):
        super().__init__()
        self.build = build

    def forward(self, x):
        return self.build(torch.relu(x).unsqueeze(1))


@pytest.mark.parametrize("build,names", [
    (lambda y: y, ["output_0"]),
    (lambda y: (y, y + 1), ["output_0", "output_1"]),
    (lambda y: {"scores": y, "box": y * 2}, ["scores", "box"]),
    (lambda y: Faces(y, y - 1), ["heatmap", "scale"]),
    (lambda y: {"boxes": (y, y + 1), "mos score": y}, ["boxes_0", "boxes_1", "mos_score"]),
    (lambda y: {"x": y, "extra": None}, ["x_2"]),  # never an input's name; None is no output
])
def test_names_follow_what_the_forward_returns(build, names):
    assert model_output_names(torch, Returns(build), (torch.ones(1, 3),), ["x"]) == names


@pytest.mark.parametrize("dynamo", [True, False])
def test_the_export_carries_the_names(tmp_path, dynamo):
    module = Returns(lambda y: (y, y * 2) if not dynamo else {"heatmap": y, "scale": y * 2}).eval()
    path = tmp_path / "m.onnx"
    write_onnx(torch, module, (torch.ones(1, 3),), ["x"], path, {}, 18, use_dynamo=dynamo)
    outputs = [o.name for o in onnx.load(str(path)).graph.output]
    assert outputs == (["heatmap", "scale"] if dynamo else ["output_0", "output_1"])
