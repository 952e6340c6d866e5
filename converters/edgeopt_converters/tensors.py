"""Input specifications and the user's calibration / evaluation data."""
from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from edgeopt_agent.errors import UserError

DTYPES = ("float32", "float16", "int64", "int32", "uint8", "int8", "bool")
DEFAULT_SAMPLES = 32


@dataclass(frozen=True)
class InputSpec:
    name: str
    shape: Tuple[int, ...]
    dtype: str = "float32"

    def describe(self) -> str:
        return f"{self.name}: {self.dtype}[{','.join(map(str, self.shape))}]"


def parse_shape(text: str) -> Tuple[int, ...]:
    """'1,3,224,224' or '1x3x224x224' -> (1, 3, 224, 224)."""
    parts = [p for p in text.replace("x", ",").replace(" ", "").split(",") if p]
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        raise UserError(f"--input-shape '{text}' is not a list of integers; write it like 1,3,224,224") from None
    if not shape or any(d <= 0 for d in shape):
        raise UserError(f"--input-shape '{text}' must have positive dimensions, like 1,3,224,224")
    return shape


def make_specs(shapes: Sequence[str], dtypes: Sequence[str], names: Sequence[str] = ()) -> List[InputSpec]:
    if dtypes and len(dtypes) not in (1, len(shapes)):
        raise UserError(f"got {len(dtypes)} --input-dtype values for {len(shapes)} --input-shape; give one, or one per input")
    for d in dtypes:
        if d not in DTYPES:
            raise UserError(f"unknown --input-dtype '{d}'; choose one of {', '.join(DTYPES)}")
    specs = []
    for i, text in enumerate(shapes):
        dtype = dtypes[i] if len(dtypes) > 1 else (dtypes[0] if dtypes else "float32")
        name = names[i] if i < len(names) else ("input" if len(shapes) == 1 else f"input_{i}")
        specs.append(InputSpec(name, parse_shape(text), dtype))
    return specs


@dataclass
class Dataset:
    """Arrays keyed by input name, all with the same number of samples along axis 0."""

    arrays: Dict[str, np.ndarray]
    labels: Optional[np.ndarray]
    source: str  # a path, or "random"

    @property
    def size(self) -> int:
        return len(next(iter(self.arrays.values())))

    @property
    def is_random(self) -> bool:
        return self.source == "random"

    def batches(self, batch_size: int):
        """Feeds of exactly `batch_size` samples (models exported at a fixed batch take no other);
        a short last batch is padded by repeating its final sample. Yields (feed, real samples)."""
        for start in range(0, self.size, batch_size):
            feed = {k: v[start:start + batch_size] for k, v in self.arrays.items()}
            real = len(next(iter(feed.values())))
            if real < batch_size:
                feed = {k: np.concatenate([v, np.repeat(v[-1:], batch_size - real, axis=0)]) for k, v in feed.items()}
            yield feed, real

    def split(self, fraction: float) -> Tuple["Dataset", "Dataset"]:
        cut = max(1, min(self.size - 1, int(round(self.size * fraction))))
        first = Dataset({k: v[:cut] for k, v in self.arrays.items()},
                        None if self.labels is None else self.labels[:cut], self.source)
        second = Dataset({k: v[cut:] for k, v in self.arrays.items()},
                         None if self.labels is None else self.labels[cut:], self.source)
        return first, second


def _read_arrays(path: Path, what: str) -> Dict[str, np.ndarray]:
    if not path.exists():
        raise UserError(f"{what} file not found: {path}")
    if path.is_dir():
        raise UserError(f"{what} file {path} is a directory; give a .npy or .npz file")
    try:
        # allow_pickle=False: a data file must never run code. An .npz reads its members lazily,
        # so they are read here, where a broken member is still a clear error.
        loaded = np.load(path, allow_pickle=False)
        if isinstance(loaded, np.ndarray):
            arrays = {"": loaded}
        else:
            with loaded:
                arrays = {k: loaded[k] for k in loaded.files}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise UserError(f"{what} file {path} is not a readable .npy/.npz array file ({exc})") from None
    broken = [k or "the array" for k, v in arrays.items() if not isinstance(v, np.ndarray) or v.dtype == object]
    if broken:
        raise UserError(f"{what} file {path}: {', '.join(broken)} is not a numeric array")
    return arrays


def load_dataset(path: Path, specs: Sequence[InputSpec], what: str, allow_labels: bool) -> Dataset:
    """Read a .npy (single input) or .npz (arrays keyed by input name, or a single array) file.

    The batch dimension of the files is free; every other dimension and the dtype kind must match
    the model's inputs.
    """
    path = Path(path)
    arrays = _read_arrays(path, what)
    labels = arrays.pop("labels", None) if allow_labels else None
    if labels is None and "labels" in arrays:
        arrays.pop("labels")
    names = [s.name for s in specs]
    if len(arrays) == 1 and len(specs) == 1:
        data = {names[0]: next(iter(arrays.values()))}
    else:
        missing = [n for n in names if n not in arrays]
        if missing:
            raise UserError(
                f"{what} file {path} has arrays {sorted(arrays)}; the model needs {names} "
                f"(missing: {', '.join(missing)})"
            )
        data = {n: arrays[n] for n in names}
    for spec in specs:
        data[spec.name] = _conform(data[spec.name], spec, path, what)
    sizes = {len(v) for v in data.values()}
    if len(sizes) != 1:
        raise UserError(f"{what} file {path}: inputs have different sample counts {sorted(sizes)}")
    if labels is not None:
        labels = np.asarray(labels).reshape(-1)
        if len(labels) != sizes.pop():
            raise UserError(f"{what} file {path}: 'labels' has {len(labels)} entries, the inputs have {len(next(iter(data.values())))}")
        if not np.issubdtype(labels.dtype, np.integer):
            raise UserError(f"{what} file {path}: 'labels' must be integer class indices, got {labels.dtype}")
    return Dataset(data, labels, str(path))


def _conform(array: np.ndarray, spec: InputSpec, path: Path, what: str) -> np.ndarray:
    sample_shape = spec.shape[1:]
    if array.shape[1:] != sample_shape:
        if array.shape == sample_shape:  # a single sample without its batch axis
            array = array[None]
        else:
            raise UserError(
                f"{what} file {path}: input '{spec.name}' has shape {list(array.shape)}, expected "
                f"[N, {', '.join(map(str, sample_shape))}] (N samples of the model's input shape {list(spec.shape)})"
            )
    want = np.dtype(spec.dtype)
    if array.dtype != want:
        if array.dtype.kind != want.kind and not (array.dtype.kind in "iu" and want.kind in "iu"):
            raise UserError(
                f"{what} file {path}: input '{spec.name}' has dtype {array.dtype}, the model expects {want}"
            )
        array = array.astype(want)
    if len(array) == 0:
        raise UserError(f"{what} file {path}: input '{spec.name}' holds no samples")
    return np.ascontiguousarray(array)


def random_dataset(specs: Sequence[InputSpec], samples: int = DEFAULT_SAMPLES, seed: int = 0) -> Dataset:
    rng = np.random.default_rng(seed)
    arrays = {}
    for spec in specs:
        shape = (samples,) + tuple(spec.shape[1:])
        dtype = np.dtype(spec.dtype)
        if dtype.kind == "f":
            arrays[spec.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            arrays[spec.name] = rng.integers(0, 2, shape).astype(dtype)
        else:
            arrays[spec.name] = rng.integers(0, 10, shape).astype(dtype)
    return Dataset(arrays, None, "random")


def sample_feed(dataset: Dataset, batch: int = 1) -> Mapping[str, np.ndarray]:
    return {k: v[:batch] for k, v in dataset.arrays.items()}
