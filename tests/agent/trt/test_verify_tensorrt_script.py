"""scripts/verify_tensorrt.py: its host half runs here for real; its TensorRT half refuses clearly (exit 2)
on a machine without TensorRT and a GPU, which is every development machine (see DEVELOPERS.md)."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "verify_tensorrt.py"


def run_script(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.skipif(importlib.util.find_spec("tensorrt") is not None, reason="TensorRT is installed here: the script would run")
@pytest.mark.parametrize("args", [(), ("--from", "some-folder")])
def test_without_tensorrt_it_says_why_and_exits_2(args):
    done = run_script(*args, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    message = done.stderr.strip()
    assert message.startswith("verify_tensorrt: TensorRT cannot run here: TensorRT is not installed")
    assert "--convert-only --out DIR" in message and len(message.splitlines()) == 1


def test_convert_only_prepares_the_models_a_board_needs(tmp_path):
    pytest.importorskip("torch", reason="converting the test nets needs torch")
    onnx = pytest.importorskip("onnx", reason="converting the test nets needs onnx")
    done = run_script("--convert-only", "--out", str(tmp_path), "--nets", "small-cnn", "--samples", "4", "--calibration", "8")
    assert done.returncode == 0, done.stderr
    assert f"--from {tmp_path}" in done.stdout

    folder = tmp_path / "small-cnn"
    manifest = json.loads((folder / "manifest.json").read_text())
    artifacts = {a["key"]: a for a in manifest["artifacts"]}
    assert set(artifacts) == {"onnx-fp32", "onnx-fp16", "onnx-int8"}
    assert artifacts["onnx-int8"]["accuracy"]["top1_agreement"] == 100.0
    # The INT8 model is the explicit-quantization layout TensorRT takes: Q/DQ pairs, INT8, zero points 0.
    model = onnx.load(str(folder / artifacts["onnx-int8"]["path"]))
    quantize = [n for n in model.graph.node if n.op_type == "QuantizeLinear"]
    assert quantize and any(n.op_type == "DequantizeLinear" for n in model.graph.node)
    zero_points = {init.name: onnx.numpy_helper.to_array(init) for init in model.graph.initializer}
    for node in quantize:
        point = zero_points[node.input[2]]
        assert point.dtype.name == "int8" and not point.any()
    assert (folder / "eval.npz").is_file() and (folder / "calibration.npy").is_file()


def _script_module():
    spec = importlib.util.spec_from_file_location("verify_tensorrt", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("profile, problem", [
    ({"profiler": "tensorrt", "node_count": 12, "node_coverage": 0.97, "run_ms": 1.2, "nodes": []}, None),
    ({"profiler": "tensorrt", "node_count": 0, "node_coverage": None, "run_ms": 1.2, "nodes": []}, "no layer time"),
    ({"profiler": "tensorrt", "node_count": 12, "node_coverage": 1.6, "run_ms": 1.2, "nodes": []}, "1.60x the GPU compute"),
    ({"profiler": "tensorrt", "error": {"kind": "runtime", "message": "boom"}}, "'message': 'boom'"),
    (None, "layer profile: None"),
])
def test_the_layer_profile_check_wants_layers_that_add_up_to_the_gpu_time(monkeypatch, profile, problem):
    """The GPU half cannot run here; its verdict on what the agent's profiled benchmark returns can."""
    from edgeopt_agent import bench
    from edgeopt_agent.bench import BenchmarkSpec

    script = _script_module()
    asked = []
    monkeypatch.setattr(bench, "run_benchmark", lambda spec: asked.append(spec) or {"ok": True, "op_profile": profile})
    row = script.Row("small-cnn", "int8")
    script.check_layer_profile(row, BenchmarkSpec(artifact="model.onnx", runtime="tensorrt"))
    assert asked[0].profile is True and asked[0].runtime == "tensorrt"
    if problem is None:
        assert row.ok and row.layers["node_count"] == 12
    else:
        assert any(problem in p for p in row.problems), row.problems
