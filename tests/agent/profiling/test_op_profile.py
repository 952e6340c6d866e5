"""onnxruntime's per-op profile: parsing a recorded trace, and a real profile on this host."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgeopt_agent.op_profile import ProfileParseError, unsupported
from edgeopt_agent.runners.onnxruntime.profiler import parse_ort_trace, profile_onnx

RECORDED = Path(__file__).parents[1] / "data" / "ort_profile_conv_relu_gap.json"


def test_recorded_trace_gives_per_node_and_per_type_time_without_the_warmup_run():
    # Recorded from onnxruntime 1.32 (Conv+Relu+GlobalAveragePool, 3 runs): the first run is warm-up.
    events = json.loads(RECORDED.read_text())
    result = parse_ort_trace(events, skip_runs=1)
    assert result["runs"] == 2
    nodes = {n["name"]: n for n in result["nodes"]}
    assert set(nodes) == {"r_nchwc", "ReorderOutput", "gap"}
    # Durations (us) of the last two runs in the trace: Conv 10 + 7, ReorderOutput 3 + 2, gap 3 + 3.
    assert nodes["r_nchwc"]["ms"] == pytest.approx(0.0085) and nodes["r_nchwc"]["op_type"] == "Conv"
    assert nodes["ReorderOutput"]["ms"] == pytest.approx(0.0025)
    assert nodes["gap"]["ms"] == pytest.approx(0.003) and nodes["gap"]["op_type"] == "GlobalAveragePool"
    assert all(n["calls"] == 2 for n in nodes.values())
    assert result["run_ms"] == pytest.approx((0.027 + 0.021) / 2)
    assert result["node_ms"] == pytest.approx(0.014)
    assert [t["op_type"] for t in result["op_types"]] == ["Conv", "GlobalAveragePool", "ReorderOutput"]
    assert sum(t["share"] for t in result["op_types"]) == pytest.approx(1.0, abs=1e-3)
    assert result["nodes"][0]["name"] == "r_nchwc"  # slowest first


def test_warmup_runs_are_excluded_by_their_time_window():
    events = json.loads(RECORDED.read_text())
    everything = parse_ort_trace(events, skip_runs=0)
    assert everything["runs"] == 3
    assert {n["name"]: n["calls"] for n in everything["nodes"]} == {"r_nchwc": 3, "ReorderOutput": 3, "gap": 3}
    assert everything["nodes"][0]["ms"] == pytest.approx((102 + 10 + 7) / 3 / 1000, abs=1e-6)


def test_malformed_traces_are_refused_with_a_reason():
    with pytest.raises(ProfileParseError, match="JSON list"):
        parse_ort_trace({"traceEvents": []})
    with pytest.raises(ProfileParseError, match="none left after 3 warm-up"):
        parse_ort_trace(json.loads(RECORDED.read_text()), skip_runs=3)


def test_runtimes_without_a_readable_profiler_say_why():
    tflite = unsupported("tflite")
    assert tflite["profiler"] is None and "Python interpreter" in tflite["unavailable"]
    assert "no per-op profiler for onnxruntime-cuda" in unsupported("onnxruntime-cuda")["unavailable"]


def _conv_net(path: Path) -> Path:
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((32, 16, 3, 3)).astype(np.float32) * 0.1, "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((32, 32, 3, 3)).astype(np.float32) * 0.1, "w2")
    fc = numpy_helper.from_array(rng.standard_normal((32, 10)).astype(np.float32), "fc")
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("MatMul", ["f", "fc"], ["y"], name="fc"),
    ]
    graph = helper.make_graph(nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 96, 96])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w1, w2, fc])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_a_host_profile_accounts_for_every_node_and_the_whole_run(tmp_path):
    model = _conv_net(tmp_path / "net.onnx")
    feeds = {"x": np.random.default_rng(1).random((1, 16, 96, 96), dtype=np.float32)}
    result = profile_onnx(str(model), feeds, threads=1, runs=15, warmup=3)

    # The graph onnxruntime executes (after its own fusions and layout changes), saved by the same options.
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.optimized_model_filepath = str(tmp_path / "executed.onnx")
    ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    executed = {n.name for n in onnx.load(str(tmp_path / "executed.onnx")).graph.node}

    profiled = {n["name"]: n for n in result["nodes"]}
    assert set(profiled) == executed  # every executed node, and nothing else
    assert all(n["calls"] == 15 for n in profiled.values())  # in every measured run, warm-up left out
    assert result["runs"] == 15 and result["providers"] == ["CPUExecutionProvider"]
    # The nodes' kernel times add up to the run: within 15% of onnxruntime's own run time and of
    # the caller's clock.
    assert abs(result["node_ms"] - result["run_ms"]) <= 0.15 * result["run_ms"]
    assert abs(result["node_ms"] - result["wall_ms"]) <= 0.15 * result["wall_ms"]
    # the two convolutions dominate (onnxruntime's aarch64 build fuses Conv+Relu into FusedConv)
    assert result["op_types"][0]["op_type"] in ("Conv", "FusedConv")
