"""The few CUDA runtime calls a TensorRT runner needs, through NVIDIA's cuda-python bindings.

`cuda.bindings.runtime` (cuda-python 12.6 and newer) or `cuda.cudart` (older releases), imported
on first use. Every call returns (error, values...); `_check` turns an error into CudaError.

    cuda = CudaRuntime.load()           # UnsupportedModelError naming what is missing
    stream = cuda.stream()
    host, device = cuda.pinned(nbytes), cuda.device_buffer(nbytes)
"""
from __future__ import annotations

import ctypes
import importlib
from dataclasses import dataclass
from typing import Any, Optional, Tuple

import numpy as np

from ..errors import UnsupportedModelError

CUDA_PYTHON_HINT = (
    "install NVIDIA's cuda-python matching this machine's CUDA major version "
    "(pip install 'cuda-python==12.*' on JetPack 6, 'cuda-python==11.8.2' on JetPack 5 (the last with Python 3.8 "
    "builds), 'cuda-python==13.*' on JetPack 7; JetPack 4.6's CUDA 10.2 has none)"
)


class CudaError(RuntimeError):
    """A CUDA runtime call failed."""


def import_cudart() -> Any:
    """The cuda-python runtime module, or UnsupportedModelError saying why it cannot be had."""
    failures = []
    for name in ("cuda.bindings.runtime", "cuda.cudart"):
        try:
            return importlib.import_module(name)
        except ImportError as exc:
            failures.append(f"{name}: {exc}")
    raise UnsupportedModelError(f"cuda-python is not installed ({'; '.join(failures)}); {CUDA_PYTHON_HINT}")


@dataclass(frozen=True)
class GpuInfo:
    name: str
    compute_capability: Tuple[int, int]
    total_memory_mb: float
    integrated: bool  # shares memory with the CPU (Jetson)


class CudaRuntime:
    def __init__(self, cudart: Any):
        self.cudart = cudart

    @classmethod
    def load(cls) -> "CudaRuntime":
        runtime = cls(import_cudart())
        try:
            count = runtime.device_count()
        except UnsupportedModelError:
            raise
        except Exception as exc:  # cuda-python loads libcudart on the first call: no CUDA shows here
            raise UnsupportedModelError(f"CUDA is not usable here: {type(exc).__name__}: {exc}") from None
        if count < 1:
            raise UnsupportedModelError("CUDA finds no GPU on this machine")
        return runtime

    def _check(self, result: Any, what: str) -> Any:
        """Unpack (error, values...) from a cuda-python call; raise CudaError on failure."""
        if isinstance(result, tuple):
            error, values = result[0], result[1:]
        else:
            error, values = result, ()
        if int(getattr(error, "value", error)) != 0:
            name = self.cudart.cudaGetErrorName(error)[1]
            text = self.cudart.cudaGetErrorString(error)[1]
            raise CudaError(f"{what} failed: {_text(name)}: {_text(text)}")
        if not values:
            return None
        return values[0] if len(values) == 1 else values

    # -- device -------------------------------------------------------------------------------
    def device_count(self) -> int:
        try:
            return int(self._check(self.cudart.cudaGetDeviceCount(), "cudaGetDeviceCount"))
        except CudaError as exc:
            raise UnsupportedModelError(f"CUDA cannot see a GPU: {exc}") from None

    def gpu_info(self, device: int = 0) -> GpuInfo:
        props = self._check(self.cudart.cudaGetDeviceProperties(device), "cudaGetDeviceProperties")
        return GpuInfo(
            name=_text(props.name),
            compute_capability=(int(props.major), int(props.minor)),
            total_memory_mb=round(int(props.totalGlobalMem) / (1 << 20), 1),
            integrated=bool(props.integrated),
        )

    def memory_used_mb(self) -> float:
        """Device memory in use now, by every process (on a Jetson: the memory shared with the CPU)."""
        free, total = self._check(self.cudart.cudaMemGetInfo(), "cudaMemGetInfo")
        return (int(total) - int(free)) / (1 << 20)

    def runtime_version(self) -> str:
        """The CUDA version cuda-python was built for (its runtime is linked in)."""
        return _version(self._check(self.cudart.cudaRuntimeGetVersion(), "cudaRuntimeGetVersion"))

    def driver_version(self) -> str:
        """The newest CUDA version this machine's driver supports."""
        return _version(self._check(self.cudart.cudaDriverGetVersion(), "cudaDriverGetVersion"))

    # -- memory -------------------------------------------------------------------------------
    def device_buffer(self, nbytes: int) -> "DeviceBuffer":
        return DeviceBuffer(self, nbytes)

    def pinned(self, nbytes: int) -> "PinnedBuffer":
        return PinnedBuffer(self, nbytes)

    def copy_to_device_async(self, device: "DeviceBuffer", host: "PinnedBuffer", nbytes: int, stream: "Stream") -> None:
        kind = self.cudart.cudaMemcpyKind.cudaMemcpyHostToDevice
        self._check(self.cudart.cudaMemcpyAsync(device.ptr, host.ptr, nbytes, kind, stream.handle), "cudaMemcpyAsync H2D")

    def copy_to_host_async(self, host: "PinnedBuffer", device: "DeviceBuffer", nbytes: int, stream: "Stream") -> None:
        kind = self.cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost
        self._check(self.cudart.cudaMemcpyAsync(host.ptr, device.ptr, nbytes, kind, stream.handle), "cudaMemcpyAsync D2H")

    # -- streams and events -------------------------------------------------------------------
    def stream(self) -> "Stream":
        return Stream(self)

    def event(self) -> "Event":
        return Event(self)

    def elapsed_ms(self, start: "Event", end: "Event") -> float:
        return float(self._check(self.cudart.cudaEventElapsedTime(start.handle, end.handle), "cudaEventElapsedTime"))


class DeviceBuffer:
    def __init__(self, cuda: CudaRuntime, nbytes: int):
        self._cuda = cuda
        self.nbytes = nbytes
        # cudaMalloc(0) returns a null pointer, which TensorRT refuses for an empty tensor.
        self.ptr: Optional[int] = int(cuda._check(cuda.cudart.cudaMalloc(max(nbytes, 1)), "cudaMalloc"))

    def free(self) -> None:
        if self.ptr is not None:
            self._cuda._check(self._cuda.cudart.cudaFree(self.ptr), "cudaFree")
            self.ptr = None


class PinnedBuffer:
    """Page-locked host memory: copies from it run asynchronously and at full speed."""

    def __init__(self, cuda: CudaRuntime, nbytes: int):
        self._cuda = cuda
        self.nbytes = nbytes
        self.ptr: Optional[int] = int(cuda._check(cuda.cudart.cudaMallocHost(max(nbytes, 1)), "cudaMallocHost"))

    def view(self, dtype: np.dtype, shape: Tuple[int, ...]) -> np.ndarray:
        """A numpy array over the buffer (valid until free())."""
        assert self.ptr is not None
        raw = (ctypes.c_byte * max(self.nbytes, 1)).from_address(self.ptr)
        return np.frombuffer(raw, dtype=dtype, count=int(np.prod(shape, dtype=np.int64))).reshape(shape)

    def free(self) -> None:
        if self.ptr is not None:
            self._cuda._check(self._cuda.cudart.cudaFreeHost(self.ptr), "cudaFreeHost")
            self.ptr = None


class Stream:
    def __init__(self, cuda: CudaRuntime):
        self._cuda = cuda
        self.handle = cuda._check(cuda.cudart.cudaStreamCreate(), "cudaStreamCreate")

    @property
    def address(self) -> int:
        """The raw cudaStream_t, as TensorRT's enqueue calls take it."""
        return int(self.handle)

    def synchronize(self) -> None:
        self._cuda._check(self._cuda.cudart.cudaStreamSynchronize(self.handle), "cudaStreamSynchronize")

    def destroy(self) -> None:
        if self.handle is not None:
            self._cuda._check(self._cuda.cudart.cudaStreamDestroy(self.handle), "cudaStreamDestroy")
            self.handle = None


class Event:
    def __init__(self, cuda: CudaRuntime):
        self._cuda = cuda
        self.handle = cuda._check(cuda.cudart.cudaEventCreate(), "cudaEventCreate")

    def record(self, stream: Stream) -> None:
        self._cuda._check(self._cuda.cudart.cudaEventRecord(self.handle, stream.handle), "cudaEventRecord")

    def destroy(self) -> None:
        if self.handle is not None:
            self._cuda._check(self._cuda.cudart.cudaEventDestroy(self.handle), "cudaEventDestroy")
            self.handle = None


def _version(number: Any) -> str:
    number = int(number)
    return f"{number // 1000}.{(number % 1000) // 10}"


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.split(b"\0", 1)[0].decode("utf-8", errors="replace")
    return str(value)
