"""The daemon stays light: no runtime and no numpy in its own process, idle or after a job.

Benchmarks load the runtime in the engine's child process.
"""
import json
import subprocess
import sys

from harness import QUICK_BENCH, write_tiny_onnx

from edgeopt_agent import wire

HEAVY = ("numpy", "onnxruntime", "ai_edge_litert", "tflite_runtime", "tensorflow", "torch", "onnx")

PROBE = """
import json, sys
from pathlib import Path
from edgeopt_agent.daemon.agent import Agent
from edgeopt_agent.daemon.config import build_config
heavy = %r
agent = Agent(build_config({"device_id": "probe", "data_dir": sys.argv[1], "profile": "x86-64"}))
agent.send_telemetry()
idle = sorted(m for m in heavy if m in sys.modules)
body = agent.jobs.handle(Path(sys.argv[2]).read_bytes())
after_job = sorted(m for m in heavy if m in sys.modules)
print(json.dumps({"idle": idle, "after_job": after_job, "job_ok": body["ok"], "error": body["error"]}))
"""


def test_the_agent_process_never_imports_a_runtime(tmp_path):
    data_dir = tmp_path / "data"
    sha = write_tiny_onnx(data_dir / "models" / "tiny.onnx")
    job = tmp_path / "job.json"
    job.write_bytes(wire.benchmark_job("probe", 1, "j", sha, "onnx", path="models/tiny.onnx", **QUICK_BENCH).encode())
    out = subprocess.run([sys.executable, "-c", PROBE % (HEAVY,), str(data_dir), str(job)],
                         capture_output=True, text=True, check=True).stdout
    report = json.loads(out)
    assert report["job_ok"], report["error"]
    assert report["idle"] == [] and report["after_job"] == []
