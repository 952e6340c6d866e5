"""A traced example keeps the standard layout whatever strides its numpy sample has on size-1 axes:
torch.export reads a dim order from strides, and a [1, 1, 8, 8] sample strided (64, 1, 8, 1) was
traced channels-last (an ONNX as_strided Gather that ncnn cannot load; an ExecuTorch program that
refused every standard input at run time)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="tracing needs the convert extra (torch)")

from edgeopt_converters.passes.export_onnx import example_args  # noqa: E402
from edgeopt_converters.source.tensors import InputSpec  # noqa: E402


def odd_strided_sample() -> np.ndarray:
    base = np.arange(64, dtype=np.float32)
    sample = np.lib.stride_tricks.as_strided(base, shape=(1, 1, 8, 8), strides=(256, 4, 32, 4))
    assert sample.flags["C_CONTIGUOUS"]  # numpy ignores the strides of size-1 axes
    return sample


def test_a_sample_with_odd_size_one_strides_is_traced_in_the_standard_layout():
    [arg] = example_args([InputSpec("input", (1, 1, 8, 8))], {"input": odd_strided_sample()})
    assert arg.stride() == (64, 64, 8, 1)
    assert torch.equal(arg, torch.arange(64, dtype=torch.float32).reshape(1, 1, 8, 8))


@pytest.mark.slow
def test_an_executorch_program_traced_from_it_runs_standard_inputs():
    pytest.importorskip("executorch", reason="ExecuTorch export needs the executorch extra")
    from executorch.runtime import Runtime, Verification

    from edgeopt_converters.passes.export_executorch import ExecuTorchOptions, lower

    module = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.AdaptiveAvgPool2d(1),
                                 torch.nn.Flatten(), torch.nn.Linear(4, 2)).eval()
    args = example_args([InputSpec("input", (1, 1, 8, 8))], {"input": odd_strided_sample()})
    program, _ = lower(torch, module, args, ExecuTorchOptions())
    method = Runtime.get().load_program(program.buffer, verification=Verification.Minimal).load_method("forward")
    x = torch.rand(1, 1, 8, 8)
    [out] = method.execute([x])
    torch.testing.assert_close(out, module(x), rtol=1e-4, atol=1e-5)
