""""Adding a runtime is one row and one backend": a runtime made up here (fake_linear_runtime.py: its row
points at the module's own runner and availability check, as the built-in rows point at their folders)
and one conversion step are planned from a device profile, converted, judged, timed, and benchmarked
by `edgeopt bench` in the agent's benchmark child, without a line of edgeopt changed."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import fake_linear_runtime
from edgeopt_agent import runtimes

pytest.importorskip("torch", reason="the source model is a PyTorch module (the convert extra)")

PROFILE = """
name = "linear-box"
description = "x86-64 with the made-up linear runtime"
runtimes = ["linear", "onnxruntime"]
default_threads = 1
power_sensor = "none"
[cpu]
arch = "x86_64"
model = "test"
cores = 1
cores_vary = true
max_freq_mhz = 1000
isa_features = ["avx2"]
[memory]
size_gb = 1
bandwidth_gbps = 10
[thermal]
throttle_c = 95
critical_c = 100
[[recipe]]
format = "linear"
precision = "fp32"
"""
FACTORY = """
import torch

def make():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3))
"""
QUICK = ["--runs", "3", "--duration", "0", "--warmup", "1", "--idle", "0", "--no-sensors", "--json"]


@pytest.fixture
def linear_runtime(monkeypatch, tmp_path):
    """The row in this process's table, the step in the converter's registry, and both in every
    child process (a sitecustomize on PYTHONPATH registers the row there)."""
    from edgeopt_converters.passes.base import Step, StepResult, option, step_class

    monkeypatch.setattr(runtimes, "TABLE", runtimes.TABLE + (fake_linear_runtime.ROW,))
    step_class("export-onnx")  # the built-in steps first, so the registry holds them when it is restored

    @dataclass(frozen=True)
    class LinearOptions:
        precision: str = option("fp32", "fp32 only")

    class ExportLinear(Step):
        """The FP32 ONNX artifact's map, measured through the agent's own runner: f(0) and f(e_i) - f(0)."""

        name = "export-linear"
        Options = LinearOptions

        def run(self, ctx, model, output):
            from edgeopt_agent.runners import open_runner

            with open_runner(model) as runner:
                info, out = runner.inputs()[0], runner.outputs()[0]
                size = info.shape[-1]
                basis = np.concatenate([np.zeros((1, size)), np.eye(size)]).astype(np.float32)
                values = runner.infer({info.name: basis})[out.name]
            with open(output, "wb") as handle:
                np.savez(handle, weight=(values[1:] - values[0]).T, bias=values[0], input_name=np.array(info.name),
                         output_name=np.array(out.name))
            return StepResult(output, {"measured_from": model.name})

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import fake_linear_runtime\nfake_linear_runtime.register()\n")
    paths = [str(site), str(Path(fake_linear_runtime.__file__).parent), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    try:
        yield
    finally:
        Step.registry.pop(ExportLinear.name)


def test_a_runtime_added_by_one_row_and_one_module_goes_through_every_flow(linear_runtime, tmp_path, capsys):
    import edgeopt
    from edgeopt.cli.main import main
    from edgeopt_agent.bench.child import benchmark
    from edgeopt_agent.bench.spec import BenchmarkSpec
    from edgeopt_agent.runners import detect_format, open_runner
    from edgeopt_converters.recipe import make_plan
    from edgeopt_agent.profiles import load_profile

    (tmp_path / "box.toml").write_text(PROFILE)
    (tmp_path / "net.py").write_text(FACTORY)
    profile = load_profile(str(tmp_path / "box.toml"))
    assert profile.runtimes == ("linear", "onnxruntime")
    assert [(a.key, a.base) for a in make_plan(profile).artifacts] == [("onnx-fp32", None), ("linear-fp32", "onnx-fp32")]

    outdir = tmp_path / "out"
    manifest = edgeopt.convert(f"{tmp_path / 'net.py'}:make", device=str(tmp_path / "box.toml"), output_dir=outdir,
                               input_shape="1,4", trust_model_code=True)
    entry = next(a for a in manifest["artifacts"] if a["key"] == "linear-fp32")
    assert entry["format"] == "linear" and entry["board"]["runtime"] == "linear"
    assert entry["accuracy"]["verdict"] == "ok", entry["accuracy"]
    assert entry["host_timing"]["p50_ms"] > 0  # timed in the same interleaved rounds as the ONNX artifact
    assert detect_format(outdir / entry["path"]) == "linear"
    with open_runner(outdir / entry["path"]) as runner:
        assert runner.runtime == "linear"

    # The agent's benchmark child, in this process ...
    sent = []
    benchmark(BenchmarkSpec(artifact=str(outdir / entry["path"]), runs=2, duration_s=0, warmup_runs=0, warmup_s=0,
                            runtime="linear", profile=True), lambda kind, **body: sent.append((kind, body)))
    kinds = [kind for kind, _ in sent]
    assert kinds[-1] == "done" and "batch" in kinds, sent
    assert dict(sent)["op_profile"]["profile"]["unavailable"] == "no per-op profiler for linear"

    # ... and in its own process, through `edgeopt bench` on the convert folder.
    assert main(["bench", str(outdir), *QUICK]) == 0
    results = {a["manifest_entry"]["key"]: a for a in json.loads(capsys.readouterr().out)["artifacts"]}
    linear = results["linear-fp32"]
    assert linear["ok"] and linear["valid"], linear
    assert linear["runtime"] == "linear" and linear["output_check"]["ok"], linear
