"""NVIDIA GPU energy through NVML (the `pynvml` module from nvidia-ml-py, imported lazily).

nvmlDeviceGetTotalEnergyConsumption returns the millijoules a GPU has used since the driver
was loaded (Volta and newer); the sensor sums it over all GPUs. It covers the GPU board (GPU
and its memory), not the host.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional

from ..errors import MissingExtraError, require
from .base import PowerSensor, RunCommand, SensorError


class NvmlSensor(PowerSensor):
    name = "nvml"
    family = "nvml"
    is_counter = True

    def __init__(self, nvml: Any, handles: Dict[str, Any]):
        self._nvml = nvml
        self._handles = handles
        self._start_mj = {name: self._energy_mj(name) for name in handles}
        self.source = "measured_rail"
        self.rail = "+".join(handles) + " (GPU board)"

    @classmethod
    def probe(cls, sysfs_root: Path, run_command: RunCommand) -> Optional["NvmlSensor"]:
        try:
            nvml = require("pynvml", "nvml", "GPU energy through NVML")
        except MissingExtraError as exc:
            if not has_nvidia_discrete_gpu(sysfs_root):
                return None  # no GPU NVML could read: the extra would not help, so do not suggest it
            raise SensorError(str(exc)) from None
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise SensorError(f"NVML unavailable: {exc}") from None
        try:
            handles = {}
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                name = nvml.nvmlDeviceGetName(handle)
                name = name.decode() if isinstance(name, bytes) else name
                handles[f"gpu{index} {name}"] = handle
            if handles:
                return cls(nvml, handles)
        except nvml.NVMLError as exc:
            nvml.nvmlShutdown()
            raise SensorError(f"NVML: {exc}") from None
        except SensorError as exc:
            nvml.nvmlShutdown()
            raise SensorError(f"{exc} (NVML energy counters need a Volta or newer GPU)") from None
        nvml.nvmlShutdown()
        return None

    def _energy_mj(self, name: str) -> int:
        try:
            return self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handles[name])
        except self._nvml.NVMLError as exc:
            raise SensorError(f"NVML total energy of {name}: {exc}") from None

    def joules(self) -> float:
        return sum(self._energy_mj(name) - start for name, start in self._start_mj.items()) / 1000.0

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError:
            pass  # already shut down: nothing left to release


NVIDIA_PCI_VENDOR = "0x10de"
PCI_DISPLAY_CLASS = "0x03"  # VGA and 3D controllers; a Jetson's integrated GPU is not on PCI


def has_nvidia_discrete_gpu(sysfs_root: Path) -> bool:
    """True when the PCI bus under `sysfs_root` holds an NVIDIA display controller."""
    devices = Path(sysfs_root) / "sys" / "bus" / "pci" / "devices"
    try:
        entries = list(devices.iterdir())
    except OSError:
        return False
    for device in entries:
        try:
            vendor = (device / "vendor").read_text().strip().lower()
            klass = (device / "class").read_text().strip().lower()
        except OSError:
            continue
        if vendor == NVIDIA_PCI_VENDOR and klass.startswith(PCI_DISPLAY_CLASS):
            return True
    return False
