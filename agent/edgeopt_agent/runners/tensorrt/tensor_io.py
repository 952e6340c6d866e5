"""An engine's inputs and outputs, over the two TensorRT APIs for them.

TensorRT 8.5 and newer (JetPack 5.1+, 6) address tensors by name and enqueue with
`execute_async_v3`; 8.0-8.4 (JetPack 4.6, 5.0) use binding indices and `execute_async_v2`, and
TensorRT 10 removed that API. `tensor_io()` picks the one the installed TensorRT has.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Mapping, Tuple

import numpy as np


@dataclass(frozen=True)
class EngineTensor:
    name: str
    is_input: bool
    dtype: np.dtype
    shape: Tuple[int, ...]  # -1 on a dynamic axis


class NamedTensorIO:
    """TensorRT 8.5+: tensors by name."""

    def __init__(self, trt: Any, engine: Any, context: Any):
        self._context = context
        self.tensors: List[EngineTensor] = []
        for index in range(engine.num_io_tensors):
            name = engine.get_tensor_name(index)
            self.tensors.append(
                EngineTensor(
                    name=name,
                    is_input=engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT,
                    dtype=np.dtype(trt.nptype(engine.get_tensor_dtype(name))),
                    shape=tuple(int(d) for d in engine.get_tensor_shape(name)),
                )
            )

    def set_input_shape(self, name: str, shape: Tuple[int, ...]) -> bool:
        return bool(self._context.set_input_shape(name, tuple(shape)))

    def shape(self, name: str) -> Tuple[int, ...]:
        return tuple(int(d) for d in self._context.get_tensor_shape(name))

    def set_addresses(self, addresses: Mapping[str, int]) -> None:
        for name, address in addresses.items():
            self._context.set_tensor_address(name, address)

    def enqueue(self, stream_address: int) -> bool:
        return bool(self._context.execute_async_v3(stream_address))


class BindingIO:
    """TensorRT 8.0-8.4: binding indices (one optimization profile, so index i is binding i)."""

    def __init__(self, trt: Any, engine: Any, context: Any):
        self._context = context
        self.tensors = [
            EngineTensor(
                name=engine.get_binding_name(index),
                is_input=bool(engine.binding_is_input(index)),
                dtype=np.dtype(trt.nptype(engine.get_binding_dtype(index))),
                shape=tuple(int(d) for d in engine.get_binding_shape(index)),
            )
            for index in range(engine.num_bindings)
        ]
        self._index = {t.name: i for i, t in enumerate(self.tensors)}
        self._addresses = [0] * len(self.tensors)

    def set_input_shape(self, name: str, shape: Tuple[int, ...]) -> bool:
        return bool(self._context.set_binding_shape(self._index[name], tuple(shape)))

    def shape(self, name: str) -> Tuple[int, ...]:
        return tuple(int(d) for d in self._context.get_binding_shape(self._index[name]))

    def set_addresses(self, addresses: Mapping[str, int]) -> None:
        for name, address in addresses.items():
            self._addresses[self._index[name]] = address

    def enqueue(self, stream_address: int) -> bool:
        return bool(self._context.execute_async_v2(bindings=self._addresses, stream_handle=stream_address))


def tensor_io(trt: Any, engine: Any, context: Any):
    if hasattr(engine, "num_io_tensors") and hasattr(context, "execute_async_v3"):
        return NamedTensorIO(trt, engine, context)
    return BindingIO(trt, engine, context)

