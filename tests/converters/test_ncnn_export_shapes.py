"""ncnn records one shape per input: the export takes an ONNX source's open sizes (nudenet's
[batch, 3, height, width]) from the data the conversion traces with, and keeps the batch axis open."""
from __future__ import annotations

import numpy as np

from edgeopt_converters.passes.export_ncnn import OnnxTensor, blob_names, input_shape_argument, with_example_sizes


def test_open_sizes_come_from_the_example_feed():
    inputs = [OnnxTensor("images", (-1, 3, -1, -1), 1)]
    example = {"images": np.zeros((1, 3, 320, 320), np.float32)}
    [sized] = with_example_sizes(inputs, example)
    assert sized.shape == (-1, 3, 320, 320)
    assert input_shape_argument([sized]) == "[1,3,320,320]f32"


def test_fixed_sizes_and_inputs_without_an_example_stay_as_the_model_declares():
    inputs = [OnnxTensor("x", (1, 3, 48, 48), 1), OnnxTensor("mask", (-1, -1), 7)]
    assert with_example_sizes(inputs, {"x": np.zeros((1, 3, 99, 99), np.float32)}) == inputs
    assert with_example_sizes(inputs, None) == inputs


def test_blobs_keep_the_model_names_ncnn_can_read():
    assert blob_names("out", ["boxes", "has space", "x" * 256]) == ["boxes", "out1", "out2"]


def test_an_onnx_name_that_a_blob_inside_the_graph_already_has_keeps_pnnxs_name():
    """torch.onnx names outputs "3": renaming out0 to "3" beside pnnx's own blob 3 would make ncnn
    extract the wrong one."""
    from edgeopt_converters.passes.export_ncnn import pnnx_blobs, rewrite_param

    param = ("7767517\n3 3\nInput in0 0 1 in0\nConvolution conv 1 1 in0 3 0=4\n"
             "InnerProduct fc 1 1 3 out0 0=10\n")
    taken = pnnx_blobs(param)
    assert taken == {"3"}
    assert blob_names("out", ["3", "logits"], taken) == ["out0", "logits"]
    text = rewrite_param(param, [OnnxTensor("x", (1, 3, 8, 8), 1)], ["3"], taken)
    assert text.splitlines()[-1].split()[4:6] == ["3", "out0"], "the graph's own blob 3 and the output out0 stay apart"
