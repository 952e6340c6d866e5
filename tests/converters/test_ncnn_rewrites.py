"""ncnn export of a Focus stem (strided-slice space to depth): rewritten so pnnx leaves ncnn no Tensor.slice."""
import numpy as np
import pytest
import torch
from torch import nn

from edgeopt_converters.passes.ncnn_rewrites import rewrite_for_pnnx, unsupported_layers

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


class FocusStem(nn.Module):
    """YOLOX's / YOLOv5's stem: four strided slices concatenated on channels, then a convolution."""

    def __init__(self, order=((0, 0), (1, 0), (0, 1), (1, 1)), second_reader: bool = False):
        super().__init__()
        self.order, self.second_reader = order, second_reader
        self.conv = nn.Conv2d(12, 8, 3, 1, 1)

    def forward(self, x):
        y = torch.cat([x[..., a::2, b::2] for a, b in self.order], 1)
        out = torch.relu(self.conv(y))
        return (out, y * 2.0) if self.second_reader else out


def _export(module, path, size=(1, 3, 32, 48)):
    from edgeopt_converters.passes.export_onnx import OnnxExportOptions, write_onnx

    torch.manual_seed(0)
    write_onnx(torch, module.eval(), (torch.zeros(size),), ["input"], path, {}, OnnxExportOptions().opset)
    return path


def _run(model, x):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})


@pytest.mark.parametrize("stem", [FocusStem(), FocusStem(order=((1, 1), (0, 1), (1, 0), (0, 0))),
                                  FocusStem(second_reader=True)], ids=["yolox-order", "other-order", "two-readers"])
def test_the_rewritten_graph_computes_the_same_values_without_strided_slices(tmp_path, stem):
    model = onnx.load(str(_export(stem, tmp_path / "focus.onnx")))
    x = np.random.default_rng(0).random((1, 3, 32, 48), dtype=np.float32)
    before = _run(model, x)
    done = rewrite_for_pnnx(model)
    onnx.checker.check_model(model)
    assert [r.what for r in done] == ["space to depth by four strided slices (Focus) as a pixel-unshuffle Reorg"]
    assert "Slice" not in {n.op_type for n in model.graph.node}
    for a, b in zip(before, _run(model, x)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_slices_that_are_not_a_space_to_depth_are_left_alone(tmp_path):
    class Crops(nn.Module):
        def forward(self, x):  # steps of 2 but overlapping offsets: not a space to depth
            return torch.cat((x[..., ::2, ::2], x[..., ::2, ::2], x[..., 1::2, 1::2], x[..., 1::2, 1::2]), 1)

    model = onnx.load(str(_export(Crops(), tmp_path / "crops.onnx")))
    assert rewrite_for_pnnx(model) == []


def test_what_pnnx_leaves_is_listed_per_layer_type():
    param = "7767517\n4 5\nInput in0 0 1 in0\nTensor.slice s1 1 1 in0 1\nTensor.slice s2 1 1 in0 2\nGather g 1 1 1 out0\n"
    assert unsupported_layers(param, lambda kind: kind == "Input") == {"Tensor.slice": 2, "Gather": 1}


@pytest.mark.slow
def test_a_focus_stem_exports_to_ncnn_and_runs_the_same_values(tmp_path):
    """The reported failure: pnnx left the stem's slices as Tensor.slice, which ncnn has no layer for."""
    pytest.importorskip("pnnx")
    ncnn = pytest.importorskip("ncnn")
    from edgeopt_agent.runners.ncnn.runner import NcnnRunner
    from edgeopt_converters.passes.base import StepContext
    from edgeopt_converters.passes.export_ncnn import ExportNcnn

    source = _export(FocusStem(), tmp_path / "focus.onnx")
    result = ExportNcnn().run(StepContext(None, ()), source, tmp_path / "model.fp32.ncnn")
    assert result.info["rewrites"] and "Focus" in result.info["rewrites"][0]
    x = np.random.default_rng(1).random((1, 3, 32, 48), dtype=np.float32)
    runner = NcnnRunner(result.path, threads=1)
    runner.load()
    try:
        got = runner.run({"input": x})
    finally:
        runner.close()
    expected = _run(onnx.load(str(source)), x)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-4, atol=1e-4)
    assert ncnn.layer_to_index("Reorg") >= 0
