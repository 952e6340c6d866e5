"""TensorRT: an engine built on this machine from the ONNX artifact, cached, and run on a CUDA stream.

    runner = TensorRTRunner("model.int8.onnx", precision="int8", cache_dir=data_dir / "engines")
    runner.load()       # engine from the cache, or built now (build time in describe()["engine"])
    outputs = runner.infer({"input": image})

Each call copies the inputs host->device, runs the engine and copies the outputs back, all on one
stream from page-locked host buffers, as trtexec does; CUDA events around the three parts give the
GPU compute time apart from the end-to-end time (`take_device_timings()`); `notes` says what
loading noticed (a cached engine that would not load, a GPU without fast FP16). TensorRT and CUDA
(cuda-python) are imported when the runner is created: where they are missing, creating it raises
UnsupportedModelError with the reason.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ...files import sha256_file
from ..base import Runner, TensorInfo
from .cuda_runtime import CudaRuntime, DeviceBuffer, PinnedBuffer
from ..engine_cache import CachedEngine, EngineCache, EngineKey
from ..errors import InputError, UnsupportedModelError
from ..precision import check_known
from .build import (
    ParsedNetwork,
    build_engine,
    create,
    import_tensorrt,
    make_logger,
    model_precision,
    parse_onnx,
)
from .tensor_io import tensor_io
from .layers import layer_profile
from .options import DEFAULT_WORKSPACE_MB

# The per-call timings, in milliseconds: the CUDA events', and the host's time to enqueue the engine
# (the GPU waits for that after the input copy, so on a small net it can show in gpu_compute).
TIMING_KEYS = ("gpu_compute", "h2d", "d2h", "gpu_latency", "enqueue")


class _Buffers:
    """A page-locked host buffer and a device buffer of the same size, for one tensor."""

    def __init__(self, cuda: CudaRuntime, nbytes: int):
        self.host: PinnedBuffer = cuda.pinned(nbytes)
        self.device: DeviceBuffer = cuda.device_buffer(nbytes)
        self.capacity = nbytes

    def free(self) -> None:
        self.host.free()
        self.device.free()


class TensorRTRunner(Runner):
    runtime = "tensorrt"

    def __init__(
        self,
        path: Union[str, Path],
        threads: Optional[int] = None,
        precision: Optional[str] = None,
        cache_dir: Union[str, Path, None] = None,
        max_batch: int = 1,
        workspace_mb: int = DEFAULT_WORKSPACE_MB,
        input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
        input_ranges: Optional[Mapping[str, Sequence[Sequence[int]]]] = None,
    ):
        super().__init__(path, threads)
        check_known(precision)
        if max_batch < 1:
            raise InputError(f"max_batch must be at least 1, got {max_batch}")
        self.requested_precision = precision
        self.max_batch = max_batch
        self.workspace_mb = workspace_mb
        # the sizes of dynamic non-batch axes the optimization profile is built for
        self.input_shapes = {k: [int(d) for d in v] for k, v in (input_shapes or {}).items()}
        # the smallest and largest sizes of those axes the data held ([min shape, max shape])
        self.input_ranges = {k: [[int(d) for d in bound] for bound in v] for k, v in (input_ranges or {}).items()}
        self.cache = EngineCache(cache_dir)
        self._trt = import_tensorrt()
        self._cuda = CudaRuntime.load()
        self._gpu = self._cuda.gpu_info()
        self.engine_info: Dict[str, Any] = {}
        self.notes: List[str] = []
        self._runtime = self._engine = self._context = self._io = self._stream = None
        self._events: Tuple[Any, ...] = ()
        self._buffers: Dict[str, _Buffers] = {}
        self._memory_before_mb: Optional[float] = None
        self._timings: Dict[str, List[float]] = {k: [] for k in TIMING_KEYS}

    # -- loading --------------------------------------------------------------------------------
    def _load(self) -> None:
        try:
            self._load_engine()
        except BaseException:
            self._close()  # what was made before the failure: stream, events, context
            raise

    def _load_engine(self) -> None:
        trt, cuda = self._trt, self._cuda
        self._memory_before_mb = cuda.memory_used_mb()
        logger = make_logger(trt)
        parsed: Optional[ParsedNetwork] = None
        precision = self.requested_precision
        if precision is None:  # the model's own precision decides, and the network says what it is
            parsed = parse_onnx(trt, logger, self.path)
            precision = model_precision(trt, parsed.network)
        key = EngineKey(
            model_sha256=sha256_file(self.path),
            tensorrt_version=trt.__version__,
            gpu_name=self._gpu.name,
            compute_capability=self._gpu.compute_capability,
            precision=precision,
            options=dict({"max_batch": self.max_batch, "workspace_mb": self.workspace_mb},
                         **({"input_shapes": self.input_shapes} if self.input_shapes else {}),
                         **({"input_ranges": self.input_ranges} if self.input_ranges else {})),
        )
        self._runtime = runtime = create(trt.Runtime, logger, "runtime")
        engine, record = self._cached_engine(runtime, logger, key)
        cached, build_s = engine is not None, 0.0
        if not cached:
            plan, record, build_s = self._build(trt, logger, key, parsed)
            parsed = None  # the builder, network and parser go before the engine is loaded (small boards)
            engine = runtime.deserialize_cuda_engine(plan)
            del plan
            if engine is None:
                raise UnsupportedModelError(f"TensorRT built an engine it then could not load: {'; '.join(logger.errors())}")
        self._engine = engine
        context = engine.create_execution_context()
        if context is None:
            raise MemoryError(
                f"TensorRT could not create an execution context (out of GPU memory?): {'; '.join(logger.errors())}"
            )
        self._context = context
        self._io = tensor_io(trt, engine, context)
        self._stream = cuda.stream()
        self._events = tuple(cuda.event() for _ in range(4))
        self.engine_info = {
            "precision": precision,
            "cached": cached,
            "build_s": round(build_s, 3),
            "cached_build_s": record.build_s,
            "path": str(record.path),
            "size_mb": round(record.path.stat().st_size / (1 << 20), 3),
            "key": key.digest,
            "tensorrt_version": trt.__version__,
            "gpu": self._gpu.name,
            "compute_capability": ".".join(map(str, self._gpu.compute_capability)),
            "max_batch": self.max_batch,
            "workspace_mb": self.workspace_mb,
            "activation_memory_mb": activation_memory_mb(engine),
        }
        self.engine_info["gpu_memory_mb"] = self.gpu_memory_mb()

    def _cached_engine(self, runtime, logger, key: EngineKey) -> Tuple[Any, Optional[CachedEngine]]:
        """The engine cached for `key`, deserialized; engine None when there is none that loads."""
        record = self.cache.lookup(key)
        if record is None:
            return None, None
        engine = runtime.deserialize_cuda_engine(record.path.read_bytes())
        if engine is None:
            self.cache.discard(key)
            said = "; ".join(logger.errors()) or "no reason given"
            self.notes.append(f"the cached engine {record.path.name} could not be loaded ({said}); rebuilt")
        return engine, record

    def _build(self, trt, logger, key: EngineKey, parsed: Optional[ParsedNetwork]) -> Tuple[bytes, CachedEngine, float]:
        """The serialized engine for `key`, built now and stored in the cache with its timing cache."""
        if parsed is None:
            parsed = parse_onnx(trt, logger, self.path)
        built = build_engine(
            trt,
            logger,
            parsed,
            key.precision,
            self.max_batch,
            self.workspace_mb,
            self.cache.load_timing_cache(key),
            self.path.name,
            self.input_shapes,
            self.input_ranges,
        )
        self.notes.extend(built.notes)
        stored = self.cache.store(key, built.plan, built.build_s)
        if built.timing_cache:
            self.cache.store_timing_cache(key, built.timing_cache)
        return built.plan, stored, built.build_s

    def _close(self) -> None:
        for buffers in self._buffers.values():
            buffers.free()
        self._buffers = {}
        for event in self._events:
            event.destroy()
        self._events = ()
        if self._stream is not None:
            self._stream.destroy()
        # The context before the engine before the runtime, as TensorRT requires.
        self._io = self._context = None
        self._engine = None
        self._runtime = self._stream = None

    # -- metadata ---------------------------------------------------------------------------------
    def inputs(self) -> Tuple[TensorInfo, ...]:
        self._require_loaded()
        return tuple(_info(t) for t in self._io.tensors if t.is_input)

    def outputs(self) -> Tuple[TensorInfo, ...]:
        self._require_loaded()
        return tuple(_info(t) for t in self._io.tensors if not t.is_input)

    def describe(self) -> Dict[str, Any]:
        return {
            "runtime": self.runtime,
            "runtime_version": self._trt.__version__,
            "threads": self.threads,
            "precision": self.engine_info.get("precision", self.requested_precision),
            "engine": dict(self.engine_info),
            "gpu": {
                "name": self._gpu.name,
                "compute_capability": ".".join(map(str, self._gpu.compute_capability)),
                "memory_mb": self._gpu.total_memory_mb,
                "integrated": self._gpu.integrated,
                "cuda_runtime": self._cuda.runtime_version(),
                "cuda_driver": self._cuda.driver_version(),
            },
        }

    def gpu_memory_mb(self) -> Optional[float]:
        """Device memory this runner added since load() began (on a Jetson, shared memory: other processes count too)."""
        if self._memory_before_mb is None:
            return None
        return round(self._cuda.memory_used_mb() - self._memory_before_mb, 3)

    def device_stats(self) -> Dict[str, Any]:
        return {"gpu_memory_mb": self.gpu_memory_mb()}

    def take_device_timings(self) -> Dict[str, List[float]]:
        """Per-call timings (ms) since the last call: GPU compute, H2D copy, D2H copy, all three, host enqueue."""
        taken = {kind: list(values) for kind, values in self._timings.items()}
        for values in self._timings.values():  # cleared in place: bound calls append to these lists
            values.clear()
        return taken

    # -- inference ----------------------------------------------------------------------------------
    def bind(self, prepared: Mapping[str, np.ndarray]) -> Callable[[], List[np.ndarray]]:
        self._require_loaded()
        io, cuda, stream = self._io, self._cuda, self._stream
        for name, array in prepared.items():
            if not io.set_input_shape(name, array.shape):
                raise InputError(f"the engine refuses shape {list(array.shape)} for input '{name}' (built for batch up to {self.max_batch})")
        inputs = [(t, prepared[t.name]) for t in io.tensors if t.is_input]
        outputs = [t for t in io.tensors if not t.is_input]
        output_shapes = {t.name: io.shape(t.name) for t in outputs}
        for name, shape in output_shapes.items():
            if any(d < 0 for d in shape):
                raise UnsupportedModelError(f"output '{name}' has a data-dependent shape {list(shape)}, which this runner cannot size")

        feeds = []
        for tensor, array in inputs:
            buffers = self._buffers_for(tensor.name, array.nbytes)
            np.copyto(buffers.host.view(tensor.dtype, array.shape), array, casting="no")
            feeds.append((buffers, array.nbytes))
        fetches = []
        for tensor in outputs:
            shape = output_shapes[tensor.name]
            nbytes = int(np.prod(shape, dtype=np.int64)) * tensor.dtype.itemsize
            buffers = self._buffers_for(tensor.name, nbytes)
            fetches.append((buffers, nbytes, buffers.host.view(tensor.dtype, shape)))
        io.set_addresses({t.name: self._buffers[t.name].device.ptr for t in io.tensors})

        start, compute_start, compute_end, end = self._events
        timings = self._timings
        elapsed = cuda.elapsed_ms

        def call() -> List[np.ndarray]:
            start.record(stream)
            for buffers, nbytes in feeds:
                cuda.copy_to_device_async(buffers.device, buffers.host, nbytes, stream)
            compute_start.record(stream)
            enqueue_start = time.perf_counter()
            if not io.enqueue(stream.address):
                raise RuntimeError("TensorRT failed to enqueue the engine")
            enqueue_ms = (time.perf_counter() - enqueue_start) * 1000.0
            compute_end.record(stream)
            for buffers, nbytes, _ in fetches:
                cuda.copy_to_host_async(buffers.host, buffers.device, nbytes, stream)
            end.record(stream)
            stream.synchronize()
            timings["gpu_compute"].append(elapsed(compute_start, compute_end))
            timings["h2d"].append(elapsed(start, compute_start))
            timings["d2h"].append(elapsed(compute_end, end))
            timings["gpu_latency"].append(elapsed(start, end))
            timings["enqueue"].append(enqueue_ms)
            return [view.copy() for _, _, view in fetches]

        return call

    def profile_layers(self, prepared: Mapping[str, np.ndarray], runs: int) -> Dict[str, Any]:
        """Per-layer GPU time from TensorRT's IProfiler (edgeopt_agent.runners.tensorrt.layers).

        The profiler stays attached: call this last, after every measurement of this runner.
        """
        self._require_loaded()
        call = self.bind(prepared)
        return layer_profile(self._trt, self._context, call, runs, lambda: self.take_device_timings()["gpu_compute"])

    def _buffers_for(self, name: str, nbytes: int) -> _Buffers:
        current = self._buffers.get(name)
        if current is not None and current.capacity >= nbytes:
            return current
        if current is not None:
            self._stream.synchronize()
            current.free()
        self._buffers[name] = _Buffers(self._cuda, nbytes)
        return self._buffers[name]


def _info(tensor) -> TensorInfo:
    shape = tuple(None if d < 0 else d for d in tensor.shape)
    return TensorInfo(name=tensor.name, shape=shape, dtype=tensor.dtype.name)


def activation_memory_mb(engine: Any) -> Optional[float]:
    """Device memory an execution context needs: `device_memory_size_v2` where it exists (TensorRT
    10; 11 has only that one), `device_memory_size` before; None where the engine tells neither."""
    for name in ("device_memory_size_v2", "device_memory_size"):
        if hasattr(engine, name):
            return _mb(getattr(engine, name))
    return None


def _mb(nbytes: int) -> float:
    return round(int(nbytes) / (1 << 20), 3)
