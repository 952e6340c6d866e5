"""ONNX Runtime: CPU everywhere, the CUDA and TensorRT execution providers where the build has them."""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ..base import Runner, TensorInfo
from ..errors import ArtifactError, UnsupportedModelError, looks_like_out_of_memory
from .importing import import_onnxruntime

TENSORRT_PROVIDER, CUDA_PROVIDER, CPU_PROVIDER = "TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"
GPU_PROVIDERS = (TENSORRT_PROVIDER, CUDA_PROVIDER)
# Preference order when the build offers them; anything else (e.g. Azure) is never picked.
PROVIDER_PREFERENCE = (TENSORRT_PROVIDER, CUDA_PROVIDER, CPU_PROVIDER)

_DTYPES = {
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(double)": "float64",
    "tensor(int8)": "int8",
    "tensor(uint8)": "uint8",
    "tensor(int16)": "int16",
    "tensor(uint16)": "uint16",
    "tensor(int32)": "int32",
    "tensor(uint32)": "uint32",
    "tensor(int64)": "int64",
    "tensor(uint64)": "uint64",
    "tensor(bool)": "bool",
}


def choose_providers(available: Sequence[str], required: Optional[str] = None) -> List[str]:
    """The providers to ask for, best first; `required` must be among them."""
    if required is not None and required not in available:
        raise UnsupportedModelError(
            f"this onnxruntime build has no {required}; available: {', '.join(available)}"
        )
    chosen = [p for p in PROVIDER_PREFERENCE if p in available]
    if required is not None:
        chosen = chosen[chosen.index(required):]
    return chosen


class OnnxRuntimeRunner(Runner):
    runtime = "onnxruntime"

    def __init__(
        self,
        path: Union[str, Path],
        threads: Optional[int] = None,
        required_provider: Optional[str] = None,
        session_config: Optional[Mapping[str, str]] = None,
    ):
        super().__init__(path, threads)
        self.session_config = dict(session_config or {})
        self._ort = import_onnxruntime("agent-onnx", "ONNX models")
        self.providers = choose_providers(self._ort.get_available_providers(), required_provider)
        self._session = None
        self._inputs: Tuple[TensorInfo, ...] = ()
        self._outputs: Tuple[TensorInfo, ...] = ()

    def _load(self) -> None:
        ort = self._ort
        options = ort.SessionOptions()
        options.log_severity_level = 3  # errors only: warnings go to the result, not the console
        if self.threads:
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
        for key, value in self.session_config.items():
            options.add_session_config_entry(key, value)
        try:
            session = ort.InferenceSession(str(self.path), sess_options=options, providers=self.providers)
        except Exception as exc:
            raise _load_error(self.path, exc) from exc
        try:
            inputs = tuple(_tensor_info(i) for i in session.get_inputs())
            outputs = tuple(_tensor_info(o) for o in session.get_outputs())
        except UnicodeDecodeError as exc:  # protobuf does not check proto2 strings; Python must
            raise _load_error(self.path, exc) from exc
        self._session = session
        self.providers = list(session.get_providers())
        self._inputs, self._outputs = inputs, outputs

    def _close(self) -> None:
        self._session = None

    def describe(self) -> Dict[str, Any]:
        return {
            "runtime": self.runtime,
            "runtime_version": self._ort.__version__,
            "threads": self.threads,
            "providers": list(self.providers),
        }

    def bind(self, prepared: Mapping[str, np.ndarray]) -> Callable[[], List[np.ndarray]]:
        self._require_loaded()
        return functools.partial(self._session.run, None, dict(prepared))


def _tensor_info(node) -> TensorInfo:
    dtype = _DTYPES.get(node.type)
    if dtype is None:
        raise UnsupportedModelError(f"tensor '{node.name}' has type {node.type}, which edgeopt cannot feed or read")
    shape = tuple(d if isinstance(d, (int, str)) or d is None else None for d in node.shape)
    return TensorInfo(name=node.name, shape=shape, dtype=dtype)


def _load_error(path: Path, exc: Exception) -> Exception:
    kind = type(exc).__name__
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else kind
    if looks_like_out_of_memory(str(exc)):
        return exc  # the engine reports it as out_of_memory
    if isinstance(exc, UnicodeDecodeError):  # a name, or the runtime's message quoting one
        return ArtifactError(f"{path.name} is not a valid ONNX model: it holds a name that is not UTF-8 text ({exc.reason})")
    if kind == "NoSuchFile":
        return ArtifactError(f"artifact not found: {path}")
    if kind == "NotImplemented" or "No Op registered" in message or "Could not find an implementation" in message:
        return UnsupportedModelError(f"onnxruntime cannot run {path.name}: {message}")
    if kind in ("InvalidProtobuf", "InvalidGraph", "Fail", "InvalidArgument"):
        return ArtifactError(f"{path.name} is not a valid ONNX model: {message}")
    return exc
