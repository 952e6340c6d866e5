"""A board installs only the runtime its artifacts need: `agent-onnx` or `agent-tflite`, `agent` both."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from edgeopt_agent.errors import MissingExtraError
from edgeopt_agent.profiles import load_profile

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

EXTRAS = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]["optional-dependencies"]
RUNTIME_PACKAGES = {"agent-onnx": ("onnxruntime",), "agent-tflite": ("ai-edge-litert", "tflite-runtime")}


def _names(extra):
    return {requirement.split(";")[0].split(">")[0].split("<")[0].split("=")[0].strip() for requirement in EXTRAS[extra]}


def test_each_runtime_extra_holds_its_runtime_only_and_agent_holds_both():
    common = {"paho-mqtt", "cryptography", "psutil"}
    assert _names("agent-onnx") == common | {"onnxruntime"}
    assert _names("agent-tflite") == common | {"ai-edge-litert", "tflite-runtime"}
    assert sorted(EXTRAS["agent"]) == sorted(set(EXTRAS["agent-onnx"]) | set(EXTRAS["agent-tflite"]))


@pytest.mark.parametrize("name", ["rpi4", "rpi5", "jetson-orin-nano", "jetson-nano", "jetson-agx-orin"])
def test_every_format_a_board_profile_runs_has_a_runtime_extra(name):
    formats = set(load_profile(name).formats)
    extras = {"onnx": "agent-onnx", "tflite": "agent-tflite"}
    assert formats <= set(extras)
    for fmt in formats:
        assert set(RUNTIME_PACKAGES[extras[fmt]]) <= _names(extras[fmt])


def test_a_missing_runtime_names_its_own_extra(monkeypatch, dynamic_onnx):
    from edgeopt_agent.runners import open_runner, tflite_runner

    for module in ("onnxruntime", "ai_edge_litert.interpreter", "tflite_runtime.interpreter", "tensorflow"):
        monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(MissingExtraError, match=r"pip install 'edgeopt\[agent-tflite\]'"):
        tflite_runner.find_interpreter()
    with pytest.raises(MissingExtraError, match=r"pip install 'edgeopt\[agent-onnx\]'"):
        open_runner(str(dynamic_onnx), threads=1).load()
