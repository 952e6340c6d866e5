"""The CUDA runtime calls the TensorRT runner makes, against NVIDIA's real cuda-python bindings.

cuda-python (cuda-bindings) installs and imports without a GPU: here it checks that every call and
struct field the runner uses exists, and that a machine without a driver is refused with CUDA's own
error. On a machine with an NVIDIA GPU the round trip through pinned and device memory runs for real.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest

from edgeopt_agent.runners import UnsupportedModelError
from edgeopt_agent.runners.tensorrt import cuda_runtime
from edgeopt_agent.runners.tensorrt.cuda_runtime import CudaRuntime, import_cudart

cudart = pytest.importorskip("cuda.bindings.runtime", reason="cuda-python 12.6+ (cuda-bindings) is not installed; the dev extra installs it")


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _used_names(after: str):
    """Every `<...>.<after>.X[.Y]` path in cuda_runtime.py, as the part following `after`."""
    tree = ast.parse(Path(cuda_runtime.__file__).read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            path = _dotted(node).split(".")
            if after in path[:-1]:
                names.add(".".join(path[path.index(after) + 1:]))
    return names


def _cuda_or_reason():
    try:
        return CudaRuntime.load(), None
    except UnsupportedModelError as exc:
        return None, str(exc)


def test_the_runtime_module_imported_is_cuda_bindings():
    assert import_cudart() is cudart


def test_every_cuda_call_and_property_the_runner_uses_exists_in_cuda_python():
    calls = _used_names("cudart")
    assert {"cudaMalloc", "cudaMemcpyAsync", "cudaMemcpyKind.cudaMemcpyHostToDevice", "cudaDriverGetVersion"} <= calls
    missing = []
    for name in sorted(calls):
        target = cudart
        for part in name.split("."):
            target = getattr(target, part, None)
        if target is None:
            missing.append(name)
    assert missing == []
    fields = _used_names("props")
    assert fields == {"name", "major", "minor", "totalGlobalMem", "integrated"}
    props = cudart.cudaDeviceProp()
    assert [f for f in sorted(fields) if not hasattr(props, f)] == []


def test_a_machine_without_a_usable_gpu_is_refused_with_cudas_own_error():
    cuda, reason = _cuda_or_reason()
    if cuda is not None:
        pytest.skip("an NVIDIA GPU is usable here: test_round_trip_on_a_real_gpu covers it")
    assert re.fullmatch(
        r"CUDA cannot see a GPU: cudaGetDeviceCount failed: (cudaErrorInsufficientDriver|cudaErrorNoDevice): .+", reason
    ), reason


def test_round_trip_on_a_real_gpu():
    cuda, reason = _cuda_or_reason()
    if cuda is None:
        pytest.skip(f"no usable NVIDIA GPU: {reason}")
    info = cuda.gpu_info()
    assert info.name and info.total_memory_mb > 0 and info.compute_capability >= (3, 0)
    assert re.fullmatch(r"\d+\.\d+", cuda.runtime_version()) and re.fullmatch(r"\d+\.\d+", cuda.driver_version())
    data = np.arange(256 * 1024, dtype=np.float32)
    host_in, host_out = cuda.pinned(data.nbytes), cuda.pinned(data.nbytes)
    device = cuda.device_buffer(data.nbytes)
    stream, start, end = cuda.stream(), cuda.event(), cuda.event()
    try:
        assert cuda.memory_used_mb() > 0
        host_in.view(np.float32, data.shape)[:] = data
        start.record(stream)
        cuda.copy_to_device_async(device, host_in, data.nbytes, stream)
        cuda.copy_to_host_async(host_out, device, data.nbytes, stream)
        end.record(stream)
        stream.synchronize()
        np.testing.assert_array_equal(host_out.view(np.float32, data.shape), data)
        assert cuda.elapsed_ms(start, end) > 0
        assert stream.address != 0
    finally:
        for resource in (start, end, stream):
            resource.destroy()
        for buffer in (device, host_in, host_out):
            buffer.free()
    assert device.ptr is None and stream.handle is None
