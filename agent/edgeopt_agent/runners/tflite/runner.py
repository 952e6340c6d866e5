"""TFLite / LiteRT: ai-edge-litert, else tflite-runtime on older Pythons (never TensorFlow on the board).

Threads go to the interpreter; XNNPACK is the interpreter's default CPU delegate and stays on
unless `xnnpack=False`. Quantized inputs and outputs carry their scale/zero-point in
`inputs()`/`outputs()`, and `prepare()`/`infer()` convert real values through them.
"""
from __future__ import annotations

import importlib
import logging
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Tuple, Union

import numpy as np

from ...errors import MissingExtraError
from ...native_output import native_stderr_logged
from ..base import Runner, TensorInfo
from ..errors import ArtifactError, InputError, UnsupportedModelError, looks_like_out_of_memory
from ..quantization import Quantization

log = logging.getLogger(__name__)


class InterpreterSource(NamedTuple):
    package: str  # distribution name, for the result
    interpreter: type
    op_resolver_type: Any  # the OpResolverType enum, or None on builds without it


def find_interpreter() -> InterpreterSource:
    """The first TFLite interpreter installed, in order of preference."""
    for package, module in (("ai-edge-litert", "ai_edge_litert.interpreter"), ("tflite-runtime", "tflite_runtime.interpreter")):
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue
        return InterpreterSource(package, mod.Interpreter, getattr(mod, "OpResolverType", None))
    raise MissingExtraError("ai_edge_litert", "agent-tflite", "TFLite models")


class TFLiteRunner(Runner):
    runtime = "tflite"

    def __init__(self, path: Union[str, Path], threads: Optional[int] = None, xnnpack: bool = True):
        super().__init__(path, threads)
        self.xnnpack = xnnpack
        self._source = find_interpreter()
        self._interpreter = None
        self._inputs: Tuple[TensorInfo, ...] = ()
        self._outputs: Tuple[TensorInfo, ...] = ()
        self._input_index: Dict[str, int] = {}
        self._output_index: List[int] = []
        self._current_shapes: Dict[str, Tuple[int, ...]] = {}

    def _load(self) -> None:
        # LiteRT announces the XNNPACK delegate on stderr when the first allocation applies it.
        with native_stderr_logged(log, self._source.package):
            interpreter = self._allocated_interpreter()
        self._interpreter = interpreter
        try:
            self._refresh_details()
        except UnicodeDecodeError as exc:  # flatbuffers do not check that strings are UTF-8
            self._interpreter = None
            raise ArtifactError(f"{self.path.name} is not a valid TFLite model: "
                                f"it holds a tensor name that is not UTF-8 text ({exc.reason})") from exc

    def _allocated_interpreter(self) -> Any:
        kwargs: Dict[str, Any] = {"model_path": str(self.path), "num_threads": self.threads}
        if not self.xnnpack:
            if self._source.op_resolver_type is None:
                raise UnsupportedModelError(f"{self._source.package} cannot turn XNNPACK off (no OpResolverType)")
            kwargs["experimental_op_resolver_type"] = self._source.op_resolver_type.BUILTIN_WITHOUT_DEFAULT_DELEGATES
        try:
            interpreter = self._source.interpreter(**kwargs)
        except ValueError as exc:
            if looks_like_out_of_memory(str(exc)):
                raise
            raise ArtifactError(f"{self.path.name} is not a valid TFLite model: {exc}") from exc
        try:
            interpreter.allocate_tensors()
        except RuntimeError as exc:
            if looks_like_out_of_memory(str(exc)):
                raise
            if "Invalid tensor index" in str(exc):  # a node names a tensor the file does not have
                raise ArtifactError(f"{self.path.name} is not a valid TFLite model: {_first_line(exc)}") from exc
            raise UnsupportedModelError(f"{self._source.package} cannot run {self.path.name}: {_first_line(exc)}") from exc
        return interpreter

    def _refresh_details(self) -> None:
        inputs = self._interpreter.get_input_details()
        outputs = self._interpreter.get_output_details()
        self._inputs = tuple(_tensor_info(d) for d in inputs)
        self._outputs = tuple(_tensor_info(d) for d in outputs)
        self._input_index = {d["name"]: d["index"] for d in inputs}
        self._output_index = [d["index"] for d in outputs]
        self._current_shapes = {d["name"]: tuple(int(x) for x in d["shape"]) for d in inputs}

    def _close(self) -> None:
        self._interpreter = None

    def describe(self) -> Dict[str, Any]:
        return {
            "runtime": self.runtime,
            "runtime_package": self._source.package,
            "runtime_version": _version(self._source.package),
            "threads": self.threads,
            "xnnpack": self.xnnpack,
        }

    def _set_shapes(self, prepared: Mapping[str, np.ndarray]) -> None:
        changed = False
        for name, array in prepared.items():
            if tuple(array.shape) != self._current_shapes[name]:
                try:
                    self._interpreter.resize_tensor_input(self._input_index[name], list(array.shape), strict=True)
                except (ValueError, RuntimeError) as exc:
                    raise InputError(f"cannot resize input '{name}' to {list(array.shape)}: {_first_line(exc)}") from exc
                changed = True
        if changed:
            self._interpreter.allocate_tensors()
            self._refresh_details()

    def bind(self, prepared: Mapping[str, np.ndarray]) -> Callable[[], List[np.ndarray]]:
        self._require_loaded()
        interpreter = self._interpreter
        set_tensor, invoke, get_tensor = interpreter.set_tensor, interpreter.invoke, interpreter.get_tensor
        feeds = [(self._input_index[name], array) for name, array in prepared.items()]
        outputs = list(self._output_index)

        def call() -> List[np.ndarray]:
            for index, array in feeds:
                set_tensor(index, array)
            invoke()
            return [get_tensor(index) for index in outputs]

        return call


def _tensor_info(details: Mapping[str, Any]) -> TensorInfo:
    signature = details.get("shape_signature")
    if signature is None or len(signature) == 0 and len(details["shape"]) > 0:
        signature = details["shape"]
    shape = tuple(None if int(d) < 0 else int(d) for d in signature)
    return TensorInfo(
        name=details["name"],
        shape=shape,
        dtype=np.dtype(details["dtype"]).name,
        quantization=_quantization(details),
    )


def _quantization(details: Mapping[str, Any]) -> Optional[Quantization]:
    params = details.get("quantization_parameters") or {}
    scales = np.asarray(params.get("scales", []))
    zero_points = np.asarray(params.get("zero_points", []))
    if scales.size == 0:
        scale, zero_point = details.get("quantization", (0.0, 0))
        return Quantization(float(scale), int(zero_point)) if scale else None
    if scales.size > 1:
        raise UnsupportedModelError(
            f"tensor '{details['name']}' is quantized per channel ({scales.size} scales); "
            "model inputs and outputs must be per-tensor quantized"
        )
    return Quantization(float(scales[0]), int(zero_points[0]) if zero_points.size else 0)


def _version(package: str) -> Optional[str]:
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover - Python < 3.8
        return None
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
