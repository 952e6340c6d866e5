"""Benchmark inputs: seeded random data shaped for a batch size, or arrays from a .npy/.npz file.

Axis 0 is the batch axis. A dynamic batch axis takes the requested batch (1 when none is
asked for); a fixed one must equal it. Any other dynamic axis takes its size from the input
description (the `inputs` option: what the manifest recorded), or needs real data from a file.
A described constant (`value`) is fed as is.
"""
from __future__ import annotations

import math
import zipfile
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..arrays import read_arrays
from ..runners.base import TensorInfo
from ..runners.errors import FreeSizeError, InputError, UnsupportedModelError


Description = Mapping[str, Any]


def described(descriptions: Optional[Sequence[Description]], infos: Sequence[TensorInfo] = ()) -> Dict[str, Description]:
    """Input descriptions keyed by the artifact's input name; naming an input the artifact does
    not have is an error (checked when `infos` are given)."""
    by_name = {d["name"]: d for d in descriptions or ()}
    names = [i.name for i in infos]
    unknown = [n for n in by_name if infos and n not in names]
    if unknown:
        raise InputError(f"the artifact has no input '{unknown[0]}'; its inputs: {', '.join(names)}")
    return by_name


def batch_shape(info: TensorInfo, batch: Optional[int], description: Optional[Description] = None) -> Tuple[int, ...]:
    """The concrete shape to feed `info` for `batch` (None: the model's own batch, the described
    one, or 1)."""
    if not info.shape:
        if batch is not None:
            raise UnsupportedModelError(f"input '{info.name}' is a scalar: it has no batch axis to set to {batch}")
        return ()
    check_batch(info, batch)
    known = list(description["shape"]) if description is not None else None
    if known is not None and len(known) != len(info.shape):
        raise InputError(f"input '{info.name}' has shape {list(info.shape)}, but its description says {known}")
    first = info.shape[0]
    if TensorInfo.is_fixed(first):
        dims = [first]
    else:
        dims = [batch or (known[0] if known else 1)]
    for axis, dim in enumerate(info.shape[1:], start=1):
        if not TensorInfo.is_fixed(dim):
            if known is None:
                raise FreeSizeError(
                    f"input '{info.name}' has a dynamic size {dim!r} on axis {axis}; give its shape "
                    f"(edgeopt bench --input-shape {info.name}=...) or an input file (.npy/.npz) with real data",
                    info.name, axis)
            dim = known[axis]
        dims.append(dim)
    return tuple(dims)


def check_batch(info: TensorInfo, batch: Optional[int]) -> None:
    first = info.shape[0] if info.shape else None
    if batch is not None and TensorInfo.is_fixed(first) and first != batch:
        raise UnsupportedModelError(
            f"input '{info.name}' has a fixed batch size of {first}, so batch {batch} cannot run; "
            "export the model with a dynamic batch axis to sweep batch sizes"
        )


def random_feeds(infos: Sequence[TensorInfo], batch: Optional[int], seed: int,
                 descriptions: Optional[Sequence[Description]] = None) -> Dict[str, np.ndarray]:
    """Reproducible data for every input: the same seed and shapes give the same arrays.

    Floats are uniform in [0, 1); quantized and 8-bit inputs cover their whole integer range;
    wider integers (ids, masks, token types) are 0 or 1, valid as any index; booleans are fair
    coin flips. A described constant is that value.
    """
    rng = np.random.default_rng(seed)
    by_name = described(descriptions, infos)
    feeds = {}
    for info in infos:
        description = by_name.get(info.name)
        shape = batch_shape(info, batch, description)
        if description is not None and "value" in description:
            feeds[info.name] = np.full(shape, description["value"], dtype=np.dtype(info.dtype))
        else:
            feeds[info.name] = _random_array(rng, info, shape)
    return feeds


def _random_array(rng: np.random.Generator, info: TensorInfo, shape: Tuple[int, ...]) -> np.ndarray:
    dtype = np.dtype(info.dtype)
    if dtype.kind == "f":
        return rng.random(shape, dtype=np.float32).astype(dtype)
    if dtype.kind in "iu":
        if info.quantization is not None or dtype.itemsize == 1:
            limits = np.iinfo(dtype)
            return rng.integers(limits.min, limits.max, size=shape, dtype=dtype, endpoint=True)
        return rng.integers(0, 2, size=shape).astype(dtype)  # valid as a mask, a token type or any index
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    raise UnsupportedModelError(f"cannot make random data for input '{info.name}' of type {info.dtype}; give an input file")


def file_feeds(path: str, infos: Sequence[TensorInfo], batch: Optional[int],
               descriptions: Optional[Sequence[Description]] = None) -> Dict[str, np.ndarray]:
    """Arrays from `path`: a .npy for a one-input model, or a .npz keyed by input name (the
    artifact's, or the model's own name given as a description's alias). Described constants
    need no array.

    A file holds samples on axis 0, as `edgeopt convert` reads it: [N, *sample]. A run feeds one
    batch: with a batch size, each array's leading axis is cut to it, or repeated up to it; without
    one, the model's own batch (its fixed one, the described one, or 1) of the first samples, or
    the first sample of an input that has no batch axis (an array one axis deeper than the input).
    """
    by_name = described(descriptions, infos)
    constants = {name: d for name, d in by_name.items() if "value" in d}
    needed = [i for i in infos if i.name not in constants]
    aliases = {d["alias"]: name for name, d in by_name.items() if d.get("alias") and d["alias"] != name}
    arrays = _load_arrays(Path(path), needed, aliases, skip=set(constants))
    feeds = {}
    for info in infos:
        if info.name in constants:
            shape = batch_shape(info, batch, constants[info.name])
            feeds[info.name] = np.full(shape, constants[info.name]["value"], dtype=np.dtype(info.dtype))
            continue
        array = arrays[info.name]
        if batch is not None:
            if not info.shape:
                raise UnsupportedModelError(f"input '{info.name}' is a scalar: it has no batch axis to set to {batch}")
            check_batch(info, batch)
            array = _fit_batch(array, batch, info.name)
        else:
            array = _one_feed(array, info, by_name.get(info.name))
        feeds[info.name] = array
    return feeds


def _load_arrays(path: Path, infos: Sequence[TensorInfo], aliases: Optional[Mapping[str, str]] = None,
                 skip: Sequence[str] = ()) -> Dict[str, np.ndarray]:
    names = [i.name for i in infos]
    try:
        # No pickles, and the sizes checked against the cap before anything is inflated.
        is_npz, loaded = read_arrays(path, "input file", too_large=InputError)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise InputError(f"cannot read input file {path}: {exc} (expected .npy or .npz)") from exc
    if not is_npz:
        if len(names) != 1:
            raise InputError(
                f"{path.name} holds one array but the model takes {len(names)} inputs "
                f"({', '.join(names)}); use a .npz keyed by input name"
            )
        return {names[0]: loaded[""]}
    arrays = {(aliases or {}).get(key, key): value for key, value in loaded.items()}
    arrays = {key: value for key, value in arrays.items() if key not in skip}
    missing = [n for n in names if n not in arrays]
    unknown = [k for k in arrays if k not in names]
    if missing or unknown:
        raise InputError(
            f"{path.name} keys {sorted(arrays)} do not match the model's inputs {names}"
            + (f" (missing {missing})" if missing else "")
            + (f" (unknown {unknown})" if unknown else "")
        )
    return arrays


def _one_feed(array: np.ndarray, info: TensorInfo, description: Optional[Description]) -> np.ndarray:
    """One feed of samples [N, *sample]: the first sample where the array is one axis deeper than the
    input (a state, a scalar), else the model's own batch of rows."""
    if array.ndim == len(info.shape) + 1 and len(array):
        return array[0]
    if array.ndim != len(info.shape) or not info.shape:
        return array  # the runner says what does not fit
    first = info.shape[0]
    known = list(description["shape"]) if description is not None and description.get("shape") else None
    want = first if TensorInfo.is_fixed(first) else (known[0] if known and isinstance(known[0], int) and known[0] > 0
                                                       else 1)
    return _fit_batch(array, want, info.name)


def _fit_batch(array: np.ndarray, batch: int, name: str) -> np.ndarray:
    if array.ndim == 0 or array.shape[0] == 0:
        raise InputError(f"input file array for '{name}' has no samples on axis 0 to make a batch of {batch}")
    have = array.shape[0]
    if have < batch:
        array = np.concatenate([array] * math.ceil(batch / have), axis=0)
    return array[:batch]
