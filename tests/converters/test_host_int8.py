"""Validation on a host whose INT8 kernels differ from the target's (x86 without VNNI)."""
from pathlib import Path

import numpy as np
import pytest

from edgeopt_converters.precision.host_int8 import (cpu_flags, int8_kernels_saturate, validation_session_config)

AVX2_ONLY = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse4_2 avx avx2 fma\n"
VNNI = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_vnni\n"
ARM = "processor\t: 0\nFeatures\t: fp asimd crc32 asimddp\n"


@pytest.mark.parametrize("text, machine, saturates", [
    (AVX2_ONLY, "x86_64", True), (VNNI, "x86_64", False), (ARM, "aarch64", False),
    ("flags : avx2 avx_vnni\n", "x86_64", False), ("flags : avx512f avx512bw\n", "x86_64", True),
])
def test_saturation_follows_the_cpu_flags(tmp_path, text, machine, saturates):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(text)
    assert int8_kernels_saturate(cpu_flags(cpuinfo), machine) is saturates


def test_no_cpuinfo_reads_as_no_flags(tmp_path):
    assert cpu_flags(tmp_path / "missing") == frozenset()


def test_only_static_int8_onnx_with_8_bit_weights_is_validated_unfused():
    unfused = {"session.disable_quant_qdq": "1"}
    assert validation_session_config("int8", "onnx", reduce_range=False, saturates=True) == unfused
    assert validation_session_config("int8", "onnx", reduce_range=True, saturates=True) == {}
    assert validation_session_config("int8", "onnx", reduce_range=False, saturates=False) == {}
    assert validation_session_config("int8", "tflite", reduce_range=False, saturates=True) == {}
    assert validation_session_config("fp32", "onnx", reduce_range=False, saturates=True) == {}


def _conv_qdq_model(path: Path) -> np.ndarray:
    """One QDQ convolution whose u8 x s8 pair sums overflow int16 (255 * 127 * 2 > 32767)."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    weights = np.full((1, 16, 1, 1), 127, dtype=np.int8)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"]),
        helper.make_node("Conv", ["xd", "wd"], ["yf"]),
        helper.make_node("QuantizeLinear", ["yf", "ys", "yz"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array(1.0, np.float32), "xs"), numpy_helper.from_array(np.array(0, np.uint8), "xz"),
             numpy_helper.from_array(weights, "w"), numpy_helper.from_array(np.array([1.0], np.float32), "ws"),
             numpy_helper.from_array(np.array([0], np.int8), "wz"),
             numpy_helper.from_array(np.array(2100.0, np.float32), "ys"), numpy_helper.from_array(np.array(0, np.uint8), "yz")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 1, 1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, path)
    return np.full((1, 16, 1, 1), 255, dtype=np.float32)


def test_unfused_validation_computes_the_exact_result(tmp_path):
    from edgeopt_converters.runtime import open_predictor

    x = _conv_qdq_model(tmp_path / "conv.onnx")
    exact = round(255 * 127 * 16 / 2100) * 2100.0  # the sum, on the output's quantization grid
    unfused = open_predictor(tmp_path / "conv.onnx", 1, {"session.disable_quant_qdq": "1"})
    try:
        assert float(unfused.predict({"x": x})[0].ravel()[0]) == exact
    finally:
        unfused.close()
    fused = open_predictor(tmp_path / "conv.onnx", 1)
    try:
        got = float(fused.predict({"x": x})[0].ravel()[0])
    finally:
        fused.close()
    if int8_kernels_saturate():
        assert got < exact, "this host's fused INT8 kernel was expected to saturate"
    else:
        assert got == exact
