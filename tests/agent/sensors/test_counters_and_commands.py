"""Energy counters (RAPL, NVML) and the default command runner."""

from __future__ import annotations

import ctypes.util
import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

from edgeopt_agent.profiles import load_profile
from edgeopt_agent.sensors import discover
from edgeopt_agent.sensors.base import CommandError, SensorError, run_command
from edgeopt_agent.sensors.nvml import NvmlSensor
from edgeopt_agent.sensors.rapl import RaplSensor

FIXTURES = Path(__file__).parent / "fixtures"
RAPL0 = "sys/class/powercap/intel-rapl:0"
MAX_RANGE_UJ = 262143328850
HAS_PYNVML = importlib.util.find_spec("pynvml") is not None
HAS_NVML_LIBRARY = ctypes.util.find_library("nvidia-ml") is not None


def test_rapl_counts_microjoules_since_discovery(board, rewrite, commands):
    root = board("x86-64-rapl")
    sensor = RaplSensor.probe(root, commands("none"))
    assert sensor.joules() == 0.0

    rewrite(root / RAPL0 / "energy_uj", str(26893441873 + 2_500_000))

    assert sensor.joules() == pytest.approx(2.5)


def test_rapl_wraps_around_at_max_energy_range(board, rewrite, commands):
    root = board("x86-64-rapl")
    rewrite(root / RAPL0 / "energy_uj", str(MAX_RANGE_UJ - 1_000_000))
    sensor = RaplSensor.probe(root, commands("none"))

    rewrite(root / RAPL0 / "energy_uj", "500000")  # wrapped: 1 J to the top, then 0.5 J
    assert sensor.joules() == pytest.approx(1.5)
    rewrite(root / RAPL0 / "energy_uj", "2500000")
    assert sensor.joules() == pytest.approx(3.5)


def test_rapl_sums_every_package(board, rewrite, commands):
    root = board("x86-64-rapl")
    second = root / "sys/class/powercap/intel-rapl:2"
    second.mkdir()
    for name, text in [
        ("name", "package-1"),
        ("energy_uj", "1000000"),
        ("max_energy_range_uj", str(MAX_RANGE_UJ)),
    ]:
        (second / name).write_text(text + "\n")
    sensor = RaplSensor.probe(root, commands("none"))

    rewrite(root / RAPL0 / "energy_uj", str(26893441873 + 1_000_000))
    rewrite(second / "energy_uj", "3000000")

    assert sensor.rail == "package-0+package-1 (CPU package)"
    assert sensor.joules() == pytest.approx(3.0)


def test_rapl_snapshot_watts_come_from_counter_deltas(board, rewrite, commands):
    root = board("x86-64-rapl")
    suite = discover(root, profile=load_profile("x86-64"), run_command=commands("none"))
    rewrite(root / RAPL0 / "energy_uj", str(26893441873 + 5_000_000))

    power = suite.snapshot()["power"]

    assert power["source"] == "measured_rail"
    assert power["watts"] > 0  # 5 J over the (short, unknown) time since discovery
    assert power["reason"] is None


def test_rapl_without_read_permission_is_disabled_with_advice(board, commands):
    if os.geteuid() == 0:
        pytest.skip("running as root: file permissions do not stop root from reading energy_uj")
    root = board("x86-64-rapl")
    (root / RAPL0 / "energy_uj").chmod(0o000)
    suite = discover(root, profile=load_profile("x86-64"), run_command=commands("none"))

    assert "run the agent as root" in suite.snapshot()["sensors"]["disabled"]["rapl"]
    assert suite.power_reason.startswith(
        "no rapl power sensor found on this x86-64: rapl disabled (permission denied"
    )


def test_rapl_counter_that_is_not_a_number_disables_the_sensor(board, rewrite, commands):
    root = board("x86-64-rapl")
    rewrite(root / RAPL0 / "energy_uj", "not-a-number")
    suite = discover(root, run_command=commands("none"))

    assert suite.disabled["rapl"].endswith("holds 'not-a-number', not an integer")
    assert suite.power is None


def _add_pci_device(root, slot: str, vendor: str, klass: str) -> None:
    device = root / "sys" / "bus" / "pci" / "devices" / slot
    device.mkdir(parents=True)
    (device / "vendor").write_text(vendor + "\n")
    (device / "class").write_text(klass + "\n")


def test_nvml_without_pynvml_on_an_nvidia_gpu_machine_names_the_extra_to_install(board, commands, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # None in sys.modules: importing it fails
    root = board("x86-64-rapl")
    _add_pci_device(root, "0000:00:02.0", "0x8086", "0x030000")  # the CPU's own Intel graphics
    _add_pci_device(root, "0000:01:00.0", "0x10de", "0x030200")  # an NVIDIA 3D controller
    suite = discover(root, run_command=commands("none"))
    reason = suite.disabled["nvml"]

    assert "'pynvml' is not installed" in reason
    assert "pip install 'edgeopt[nvml]'" in reason


@pytest.mark.parametrize("name", ["rpi4", "rpi5", "jetson-orin-nano-jp6", "x86-64-rapl"])
def test_nvml_without_pynvml_and_without_an_nvidia_pci_gpu_is_not_suggested(board, commands, monkeypatch, name):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    root = board(name)
    _add_pci_device(root, "0000:00:00.0", "0x10de", "0x060400")  # an NVIDIA PCIe bridge, not a GPU
    suite = discover(root, run_command=commands(name))
    snap = suite.snapshot()

    assert "nvml" not in suite.active and "nvml" not in suite.disabled
    assert "edgeopt[nvml]" not in json.dumps(snap)


@pytest.mark.skipif(not HAS_PYNVML, reason="pynvml (nvidia-ml-py) is not installed")
@pytest.mark.skipif(HAS_NVML_LIBRARY, reason="this machine has NVIDIA's driver: test_nvml_energy_counter_on_a_real_gpu covers it")
def test_nvml_without_a_driver_is_disabled_with_nvmls_own_reason(commands):
    suite = discover(FIXTURES / "x86-64-rapl", run_command=commands("none"))
    assert "nvml" not in suite.active
    assert suite.disabled["nvml"] == "NVML unavailable: NVML Shared Library Not Found"


@pytest.mark.skipif(not HAS_PYNVML, reason="pynvml (nvidia-ml-py) is not installed")
@pytest.mark.skipif(not HAS_NVML_LIBRARY, reason="no NVIDIA driver here (libnvidia-ml not found)")
def test_nvml_energy_counter_on_a_real_gpu(commands):
    try:
        sensor = NvmlSensor.probe(FIXTURES / "x86-64-rapl", commands("none"))
    except SensorError as exc:
        pytest.skip(f"NVML present but unusable here: {exc}")
    if sensor is None:
        pytest.skip("NVML found no GPU")
    try:
        first = sensor.joules()
        assert first >= 0.0
        assert sensor.joules() >= first
        assert sensor.rail.endswith("(GPU board)")
    finally:
        sensor.close()


def test_run_command_returns_stdout():
    assert run_command([sys.executable, "-c", "print('throttled=0x0')"]) == "throttled=0x0\n"


def test_run_command_failure_carries_the_output():
    with pytest.raises(CommandError) as raised:
        run_command([sys.executable, "-c", "import sys; print('VCHI initialization failed'); sys.exit(255)"])

    assert raised.value.returncode == 255
    assert str(raised.value).endswith("exited with 255: VCHI initialization failed")


def test_run_command_missing_program_means_absent():
    with pytest.raises(FileNotFoundError):
        run_command(["edgeopt-no-such-program-xyz"])
