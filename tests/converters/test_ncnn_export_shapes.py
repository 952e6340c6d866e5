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
