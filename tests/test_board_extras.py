"""A board installs only the runtime its artifacts need: `agent-onnx`, `agent-tflite`, `agent-ncnn` or
`agent-executorch`; `agent` is ONNX Runtime and TFLite together."""
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

PROJECT = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
EXTRAS = PROJECT["optional-dependencies"]
HOST_CLI = {"click", "rich", "pygments"}
BOARD_EXTRAS = ("agent-onnx", "agent-tflite", "agent-ncnn", "agent-executorch", "agent")
HOST_EXTRAS = ("convert", "tflite", "ncnn", "executorch", "fleet", "examples", "bench", "dev")
RUNTIME_PACKAGES = {"agent-onnx": ("onnxruntime",), "agent-tflite": ("ai-edge-litert", "tflite-runtime"),
                    "agent-ncnn": ("ncnn",), "agent-executorch": ("executorch-numpy-runtime",)}
FORMAT_EXTRAS = {"onnx": "agent-onnx", "tflite": "agent-tflite", "ncnn": "agent-ncnn", "pte": "agent-executorch"}


def _name(requirement):
    return requirement.split(";")[0].split(">")[0].split("<")[0].split("=")[0].strip()


def _names(extra):
    return {_name(requirement) for requirement in EXTRAS[extra]}


def _installed_names(requirements):
    """Package names a list of requirements installs, `edgeopt[x]` expanded (lower case)."""
    names = set()
    for requirement in requirements:
        name = _name(requirement).lower()
        if name.startswith("edgeopt["):
            for extra in name[len("edgeopt["):-1].split(","):
                names |= _installed_names(EXTRAS[extra.strip()])
        else:
            names.add(name.split("[")[0])
    return names


def test_each_runtime_extra_holds_its_runtime_only_and_agent_holds_both():
    common = {"paho-mqtt", "cryptography", "psutil"}
    assert _names("agent-onnx") == common | {"onnxruntime"}
    assert _names("agent-tflite") == common | {"ai-edge-litert", "tflite-runtime"}
    assert _names("agent-ncnn") == common | {"ncnn"}
    assert _names("agent-executorch") == common | {"executorch-numpy-runtime"}
    assert not _installed_names(EXTRAS["agent-executorch"]) & {"torch", "executorch"}, "a board never installs torch"
    assert sorted(EXTRAS["agent"]) == sorted(set(EXTRAS["agent-onnx"]) | set(EXTRAS["agent-tflite"]))


def test_the_core_install_leaves_the_host_cli_to_its_extra():
    assert _installed_names(PROJECT["dependencies"]) == {"numpy", "tomli"}
    assert _names("cli") == {"click", "rich"}


@pytest.mark.parametrize("extra", BOARD_EXTRAS)
def test_no_board_extra_installs_the_host_cli(extra):
    assert not _installed_names(EXTRAS[extra]) & HOST_CLI


@pytest.mark.parametrize("extra", HOST_EXTRAS)
def test_every_host_extra_brings_the_cli(extra):
    assert "edgeopt[cli]" in EXTRAS[extra]


def test_every_extra_is_classed_host_or_board():
    # nvml serves a board's telemetry (discrete NVIDIA GPUs) as well as the host's bench: no CLI.
    assert set(EXTRAS) == {"cli", "nvml", *BOARD_EXTRAS, *HOST_EXTRAS}
    assert not _installed_names(EXTRAS["nvml"]) & HOST_CLI


@pytest.mark.parametrize("name", ["rpi4", "rpi5", "jetson-orin-nano", "jetson-nano", "jetson-agx-orin"])
def test_every_format_a_board_profile_runs_has_a_runtime_extra(name):
    formats = set(load_profile(name).formats)
    assert formats <= set(FORMAT_EXTRAS)
    for fmt in formats:
        assert set(RUNTIME_PACKAGES[FORMAT_EXTRAS[fmt]]) <= _names(FORMAT_EXTRAS[fmt])


def test_a_missing_runtime_names_its_own_extra(monkeypatch, dynamic_onnx):
    from edgeopt_agent.runners import open_runner
    import edgeopt_agent.runners.tflite.runner as tflite_runner

    for module in ("onnxruntime", "ai_edge_litert.interpreter", "tflite_runtime.interpreter", "tensorflow"):
        monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(MissingExtraError, match=r"pip install 'edgeopt\[agent-tflite\]'"):
        tflite_runner.find_interpreter()
    with pytest.raises(MissingExtraError, match=r"pip install 'edgeopt\[agent-onnx\]'"):
        open_runner(str(dynamic_onnx), threads=1).load()


def test_ncnn_and_executorch_name_their_extras_in_one_line(monkeypatch, tmp_path):
    from edgeopt_agent.runners import unavailable_reason

    for module in ("ncnn", "executorch_numpy_runtime", "executorch", "executorch.runtime"):
        monkeypatch.setitem(sys.modules, module, None)
    assert "pip install 'edgeopt[agent-ncnn]'" in unavailable_reason("ncnn")
    reason = unavailable_reason("executorch")
    assert reason.startswith("no ExecuTorch runtime here: ") and "\n" not in reason
    assert "edgeopt[agent-executorch]" in reason
