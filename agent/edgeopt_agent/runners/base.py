"""The one small interface every runtime speaks: load, infer, close.

A runner is created cheap (its runtime imported, nothing loaded), `load()` does the expensive
part so it can be timed on its own, and inference goes through two steps so a benchmark can
keep conversions out of the timed call:

    runner.load()
    prepared = runner.prepare({"x": array})   # check names/shapes, cast, quantize, resize
    call = runner.bind(prepared)              # zero-argument callable: the runtime's own call
    raw_outputs = call()                      # list, in `outputs()` order, model dtypes
    runner.infer({"x": array})                # all of the above; outputs by name, dequantized
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from .errors import InputError
from .quantization import Quantization, dequantize, quantize

Dim = Union[int, str, None]  # str or None: a dynamic dimension (str is its symbolic name)


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: Tuple[Dim, ...]
    dtype: str  # numpy dtype name of the tensor as the model stores it ("float32", "int8", ...)
    quantization: Optional[Quantization] = None

    @staticmethod
    def is_fixed(dim: Dim) -> bool:
        return isinstance(dim, int) and dim >= 0

    def to_dict(self) -> Dict[str, Any]:
        q = self.quantization
        return {
            "name": self.name,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "quantization": None if q is None else {"scale": q.scale, "zero_point": q.zero_point},
        }


class Runner:
    """Base class: subclasses implement `_load`, `inputs`, `outputs`, `bind` and `_close`."""

    runtime = ""  # "onnxruntime" | "tflite"
    # The runtime has no batch axis of its own: the runner feeds a batch sample by sample and stacks the
    # outputs on axis 0, whichever axis the model's own outputs hold their samples on.
    stacks_samples = False

    def __init__(self, path: Union[str, Path], threads: Optional[int] = None):
        self.path = Path(path)
        self.threads = threads
        self._loaded = False

    # -- lifecycle ------------------------------------------------------------------------
    def load(self) -> "Runner":
        if not self._loaded:
            self._load()
            self._loaded = True
        return self

    def close(self) -> None:
        if self._loaded:
            self._close()
            self._loaded = False

    @property
    def loaded(self) -> bool:
        return self._loaded

    def __enter__(self) -> "Runner":
        return self.load()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- metadata -------------------------------------------------------------------------
    # Runners that know their tensors once loaded fill these in `_load`; others override the two methods.
    _inputs: Tuple[TensorInfo, ...] = ()
    _outputs: Tuple[TensorInfo, ...] = ()

    def inputs(self) -> Tuple[TensorInfo, ...]:
        self._require_loaded()
        return self._inputs

    def outputs(self) -> Tuple[TensorInfo, ...]:
        self._require_loaded()
        return self._outputs

    def describe(self) -> Dict[str, Any]:
        """What ran the model, for the benchmark result (runtime, version, threads, backend)."""
        return {"runtime": self.runtime, "threads": self.threads}

    # -- inference ------------------------------------------------------------------------
    def prepare(self, feeds: Mapping[str, Any]) -> Dict[str, np.ndarray]:
        """Check `feeds` against the model's inputs and convert them to what the runtime takes.

        Real-valued arrays for quantized inputs are quantized with the input's scale/zero-point;
        arrays already in the model's dtype pass through unchanged.
        """
        self._require_loaded()
        infos = self.inputs()
        names = [i.name for i in infos]
        missing = [n for n in names if n not in feeds]
        unknown = [k for k in feeds if k not in names]
        if missing or unknown:
            parts = []
            if missing:
                parts.append(f"missing {', '.join(map(repr, missing))}")
            if unknown:
                parts.append(f"unknown {', '.join(map(repr, unknown))}")
            raise InputError(f"inputs do not match the model ({'; '.join(parts)}); it takes: {', '.join(names)}")
        prepared = {info.name: _to_model_array(np.asarray(feeds[info.name]), info) for info in infos}
        self._set_shapes(prepared)
        return prepared

    def bind(self, prepared: Mapping[str, np.ndarray]) -> Callable[[], List[np.ndarray]]:
        raise NotImplementedError

    def run(self, prepared: Mapping[str, np.ndarray]) -> List[np.ndarray]:
        return self.bind(prepared)()

    def infer(self, feeds: Mapping[str, Any], dequantize_outputs: bool = True) -> Dict[str, np.ndarray]:
        raw = self.run(self.prepare(feeds))
        results = {}
        for info, value in zip(self.outputs(), raw):
            if dequantize_outputs and info.quantization is not None:
                value = dequantize(value, info.quantization)
            results[info.name] = value
        return results

    # -- for subclasses -------------------------------------------------------------------
    def _load(self) -> None:
        raise NotImplementedError

    def _close(self) -> None:
        raise NotImplementedError

    def _set_shapes(self, prepared: Mapping[str, np.ndarray]) -> None:
        """Runtimes that size their tensors ahead of a call (TFLite) resize here."""

    def _require_loaded(self) -> None:
        if not self._loaded:
            raise RuntimeError(f"{type(self).__name__}.load() must be called before inference")


def _to_model_array(value: np.ndarray, info: TensorInfo) -> np.ndarray:
    target = np.dtype(info.dtype)
    if value.dtype != target:
        if info.quantization is not None and value.dtype.kind == "f":
            value = quantize(value, info.quantization, info.dtype)
        elif np.can_cast(value.dtype, target, casting="same_kind"):
            value = value.astype(target)
        else:
            raise InputError(f"input '{info.name}' takes {info.dtype}, got {value.dtype}")
    _check_shape(value.shape, info)
    return np.ascontiguousarray(value)


def _check_shape(shape: Sequence[int], info: TensorInfo) -> None:
    declared = "[" + ", ".join("?" if not TensorInfo.is_fixed(d) else str(d) for d in info.shape) + "]"
    if len(shape) != len(info.shape):
        raise InputError(
            f"input '{info.name}' has rank {len(info.shape)} {declared}, got shape {list(shape)}"
        )
    for axis, (got, want) in enumerate(zip(shape, info.shape)):
        if TensorInfo.is_fixed(want) and got != want:
            raise InputError(
                f"input '{info.name}' has a fixed size {want} on axis {axis} {declared}, got shape {list(shape)}"
            )
