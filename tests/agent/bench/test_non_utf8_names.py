"""Model files whose names are not UTF-8 are bad artifacts, not runtime errors.

Neither protobuf (ONNX is proto2: strings are not checked when parsed) nor flatbuffers (TFLite)
check that names are UTF-8, so the runtimes load such files and the failure comes when Python
decodes a name. The files are built here: a valid model with an ASCII placeholder of the same
length, then the placeholder's bytes replaced with invalid UTF-8.
"""
from __future__ import annotations

import pytest

from edgeopt_agent.bench import BAD_ARTIFACT, BenchmarkSpec, run_benchmark

onnx = pytest.importorskip("onnx", reason="building test models needs the onnx package")
from onnx import TensorProto, helper  # noqa: E402

INVALID = {  # each as long as the placeholder it replaces
    b"PLCHA": b"\xff\xfeABC",  # bytes that never occur in UTF-8
    b"PLCHB": b"\xc3\x28BCD",  # a lead byte followed by a non-continuation
    b"PLCHC": b"AB\xed\xa0\x80",  # an encoded surrogate (CESU-8), which UTF-8 forbids
}


def quick(path) -> BenchmarkSpec:
    return BenchmarkSpec(artifact=str(path), runs=3, duration_s=0, warmup_runs=1, warmup_s=0, idle_s=0,
                         threads=1, timeout_s=60)


def relu_model(input_name="x", output_name="y", op="Relu", node_name="", domain="", graph_name="g"):
    graph = helper.make_graph(
        [helper.make_node(op, [input_name], [output_name], name=node_name, domain=domain)],
        graph_name,
        [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info(output_name, TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def write_with_invalid_bytes(path, model, placeholder: bytes):
    raw = model.SerializeToString()
    assert placeholder in raw
    path.write_bytes(raw.replace(placeholder, INVALID[placeholder]))
    return path


@pytest.mark.parametrize(
    "where, model, placeholder",
    [
        pytest.param("input name", relu_model(input_name="PLCHA"), b"PLCHA", id="input-name"),
        pytest.param("output name", relu_model(output_name="PLCHB"), b"PLCHB", id="output-name"),
        pytest.param("operator type", relu_model(op="PLCHC"), b"PLCHC", id="operator-type"),
        pytest.param("operator domain", relu_model(domain="PLCHA"), b"PLCHA", id="operator-domain"),
    ],
)
def test_onnx_names_that_are_not_utf8_are_a_bad_artifact(tmp_path, where, model, placeholder):
    path = write_with_invalid_bytes(tmp_path / "bad.onnx", model, placeholder)
    result = run_benchmark(quick(path))
    assert result["ok"] is False
    assert result["error"]["kind"] == BAD_ARTIFACT, (where, result["error"])
    assert "not a valid ONNX model" in result["error"]["message"]


def test_names_nobody_reads_do_not_stop_a_valid_model(tmp_path):
    """Graph and node names never reach Python: onnxruntime runs the model, and so does edgeopt."""
    path = write_with_invalid_bytes(tmp_path / "odd.onnx", relu_model(node_name="PLCHA", graph_name="PLCHB"),
                                    b"PLCHA")
    result = run_benchmark(quick(path))
    assert result["ok"] is True, result.get("error")


def test_tflite_tensor_name_that_is_not_utf8_is_a_bad_artifact(int8_tflite, tmp_path):
    from edgeopt_agent.runners import open_runner

    source = int8_tflite[0]
    with open_runner(source, threads=1) as runner:
        name = runner.inputs()[0].name.encode()
    raw = source.read_bytes()
    assert raw.count(name) == 1
    path = tmp_path / "bad.tflite"
    path.write_bytes(raw.replace(name, b"\xff" + name[1:]))
    result = run_benchmark(quick(path))
    assert result["ok"] is False
    assert result["error"]["kind"] == BAD_ARTIFACT, result["error"]
    assert "not UTF-8" in result["error"]["message"]
