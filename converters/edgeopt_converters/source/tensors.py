"""Input specifications and the user's calibration / evaluation data.

An input is named after the model (ONNX input names, forward() parameters, a TorchScript
schema). Its shape may hold -1 for a dimension the model leaves dynamic; the user's
`--input-shape NAME=1,512` and the data files fill those in. An input with a `value` is a
constant: a non-tensor argument (a TorchScript `int`) baked into the export, or an ONNX input
that is always fed that value.
"""
from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from edgeopt_agent.arrays import read_arrays
from edgeopt_agent.errors import UserError

DTYPES = ("float32", "float16", "int64", "int32", "uint8", "int8", "bool")
DEFAULT_SAMPLES = 32
SCALAR_WORDS = ("", "scalar", "()", "[]")
Constant = Union[int, float, bool]


@dataclass(frozen=True)
class InputSpec:
    name: str
    shape: Optional[Tuple[int, ...]]  # -1: a dynamic dim; None: the model does not say (forward() names only)
    dtype: str = "float32"
    value: Optional[Constant] = None  # a constant argument, baked into the export or always fed
    tensor: bool = True  # False: a Python int/float/bool argument (needs a value)
    dim_names: Tuple[Optional[str], ...] = ()  # the model's names of its dynamic dims (ONNX dim_param)

    @property
    def is_constant(self) -> bool:
        return self.value is not None

    @property
    def is_concrete(self) -> bool:
        return self.shape is not None and all(d >= 0 for d in self.shape)

    def shape_text(self) -> str:
        return "[unknown]" if self.shape is None else shape_text(self.shape)

    def describe(self) -> str:
        if self.is_constant:
            return f"{self.name}={self.value!r}"
        return f"{self.name}: {self.dtype}{self.shape_text()}"

    def to_dict(self) -> Dict[str, object]:
        data: Dict[str, object] = {"name": self.name, "shape": list(self.shape or ()), "dtype": self.dtype}
        if self.is_constant:
            data["value"] = self.value
            data["tensor"] = self.tensor
        return data


def parse_shape(text: str, option: str = "--input-shape") -> Tuple[int, ...]:
    """'1,3,224,224' or '1x3x224x224' -> (1, 3, 224, 224); '' or 'scalar' -> (); '1,?' -> (1, -1):
    a dynamic dim whose size the data files give (it stays dynamic where they differ)."""
    cleaned = text.strip().lower()
    if cleaned in SCALAR_WORDS:
        return ()
    parts = [p for p in cleaned.replace("x", ",").replace(" ", "").strip("[]()").split(",") if p]
    try:
        shape = tuple(-1 if p == "?" else int(p) for p in parts)
    except ValueError:
        raise UserError(f"{option} '{text}' is not a list of integers; write it like 1,3,224,224 "
                        f"(NAME=1,512 for a named input, NAME= or NAME=scalar for a scalar, ? for a dim "
                        f"the data files decide)") from None
    if not shape or any(d == 0 or d < -1 for d in shape):
        raise UserError(f"{option} '{text}' must have positive dimensions, like 1,3,224,224")
    return shape


def split_named(items: Sequence[str], option: str) -> Tuple[List[str], Dict[str, str]]:
    """CLI values -> (positional values, {name: value}) for `NAME=VALUE` items."""
    positional: List[str] = []
    named: Dict[str, str] = {}
    for item in items:
        name, sep, rest = str(item).partition("=")
        if not sep:
            positional.append(str(item))
            continue
        name = name.strip()
        if not name:
            raise UserError(f"{option} '{item}' has no input name before '='; write NAME=VALUE")
        if name in named:
            raise UserError(f"{option} gives input '{name}' twice ({name}={named[name]} and {item})")
        named[name] = rest.strip()
    return positional, named


def parse_value(text: str, name: str) -> Constant:
    """'16000' -> 16000, '0.5' -> 0.5, 'true' -> True."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(lowered)
        except ValueError:
            continue
    raise UserError(f"--input-value {name}={text}: the value must be a number or true/false")


def check_dtype(dtype: str, name: Optional[str] = None) -> str:
    if dtype not in DTYPES:
        what = f" for input '{name}'" if name else ""
        raise UserError(f"unknown --input-dtype '{dtype}'{what}; choose one of {', '.join(DTYPES)}")
    return dtype


def make_specs(shapes: Sequence[str], dtypes: Sequence[str], names: Sequence[str] = ()) -> List[InputSpec]:
    """Specs from positional shapes alone (a model that declares no inputs)."""
    if dtypes and len(dtypes) not in (1, len(shapes)):
        raise UserError(f"got {len(dtypes)} --input-dtype values for {len(shapes)} --input-shape; give one, or one per input")
    for d in dtypes:
        check_dtype(d)
    specs = []
    for i, text in enumerate(shapes):
        dtype = dtypes[i] if len(dtypes) > 1 else (dtypes[0] if dtypes else "float32")
        name = names[i] if i < len(names) else ("input" if len(shapes) == 1 else f"input_{i}")
        specs.append(InputSpec(name, parse_shape(text), dtype))
    return specs


def fits(shape: Sequence[int], pattern: Sequence[int]) -> bool:
    """True when `shape` has the rank of `pattern` and agrees on its fixed (non-negative) dims."""
    return len(shape) == len(pattern) and all(p < 0 or s == p for s, p in zip(shape, pattern))


def shape_text(shape: Sequence[int]) -> str:
    return "[" + ", ".join("?" if d < 0 else str(d) for d in shape) + "]"


def shared_batch(specs: Sequence[InputSpec]) -> Optional[int]:
    """The batch size all tensor inputs share on axis 0, or None when they do not share one
    (a scalar, or a state whose axis 0 is not the batch): then a data file holds whole samples."""
    tensors = [s for s in specs if not s.is_constant]
    if not tensors or any(not s.shape for s in tensors):  # no inputs, or a scalar
        return None
    firsts = {s.shape[0] for s in tensors}
    if len(firsts) != 1:
        return None
    first = firsts.pop()
    return 1 if first < 0 else first


def feed_batch(specs: Sequence[InputSpec]) -> int:
    """Samples per feed: the shared batch size, or 1 when a feed is one whole sample."""
    return shared_batch(specs) or 1


@dataclass
class Dataset:
    """Arrays keyed by input name, all with the same number of samples N along axis 0.

    Two layouts: batch-first rows (`whole=False`: an array is [N, *shape[1:]] and a feed stacks
    `batch` consecutive rows), or whole samples (`whole=True`: an array is [N, *shape] and each
    feed is one sample, for models whose inputs share no batch axis: a scalar, a state).
    """

    arrays: Dict[str, np.ndarray]
    labels: Optional[np.ndarray]
    source: str  # a path, or "random"
    whole: bool = False

    @property
    def size(self) -> int:
        return len(next(iter(self.arrays.values())))

    @property
    def is_random(self) -> bool:
        return self.source == "random"

    def batches(self, batch_size: int, pad: bool = True):
        """Feeds of exactly `batch_size` rows (models exported at a fixed batch take no other);
        a short last batch is padded by repeating its final row, unless `pad` is False (a model that
        takes any batch). Yields (feed, real samples). With whole samples each feed is one sample,
        whatever `batch_size` says."""
        if self.whole:
            for i in range(self.size):
                yield {k: v[i, ...] for k, v in self.arrays.items()}, 1  # [i, ...]: a 0-d array, not a numpy scalar
            return
        for start in range(0, self.size, batch_size):
            feed = {k: v[start:start + batch_size] for k, v in self.arrays.items()}
            real = len(next(iter(feed.values())))
            if real < batch_size and pad:
                feed = {k: np.concatenate([v, np.repeat(v[-1:], batch_size - real, axis=0)]) for k, v in feed.items()}
            yield feed, real

    def first_feed(self, batch_size: int) -> Dict[str, np.ndarray]:
        return next(self.batches(batch_size))[0]

    def feed_shapes(self, batch_size: int) -> Dict[str, Tuple[int, ...]]:
        """The shape of each input as fed to the model."""
        if self.whole:
            return {k: tuple(v.shape[1:]) for k, v in self.arrays.items()}
        return {k: (batch_size,) + tuple(v.shape[1:]) for k, v in self.arrays.items()}

    def shapes(self, batch_size: int) -> List[Dict[str, Tuple[int, ...]]]:
        """Every distinct set of feed shapes the data holds (one for a single file)."""
        return [self.feed_shapes(batch_size)]

    def subset(self, index: slice) -> "Dataset":
        return Dataset({k: v[index] for k, v in self.arrays.items()},
                       None if self.labels is None else self.labels[index], self.source, self.whole)

    def split(self, fraction: float) -> Tuple["Dataset", "Dataset"]:
        cut = max(1, min(self.size - 1, int(round(self.size * fraction))))
        return self.subset(slice(None, cut)), self.subset(slice(cut, None))


@dataclass
class DatasetParts:
    """Calibration data from several files whose shapes differ (sequence lengths, image sizes):
    fed part after part, each at its own shapes. The first part stands for the whole where one
    shape is needed (the export's example)."""

    parts: List[Dataset]
    labels: None = None

    @property
    def size(self) -> int:
        return sum(p.size for p in self.parts)

    @property
    def source(self) -> str:
        return " + ".join(p.source for p in self.parts)

    @property
    def is_random(self) -> bool:
        return False

    @property
    def whole(self) -> bool:
        return self.parts[0].whole

    def batches(self, batch_size: int, pad: bool = True):
        for part in self.parts:
            yield from part.batches(batch_size, pad)

    def first_feed(self, batch_size: int) -> Dict[str, np.ndarray]:
        return self.parts[0].first_feed(batch_size)

    def feed_shapes(self, batch_size: int) -> Dict[str, Tuple[int, ...]]:
        return self.parts[0].feed_shapes(batch_size)

    def shapes(self, batch_size: int) -> List[Dict[str, Tuple[int, ...]]]:
        return [p.feed_shapes(batch_size) for p in self.parts]

    def subset(self, index: slice) -> "DatasetParts":
        """The first `index.stop` samples over the parts in order."""
        left, kept = index.stop, []
        for part in self.parts:
            if left is not None and left <= 0:
                break
            kept.append(part if left is None or part.size <= left else part.subset(slice(None, left)))
            left = None if left is None else left - part.size
        return DatasetParts(kept)


def load_datasets(paths: Sequence[Path], specs: Sequence[InputSpec], what: str,
                  allow_labels: bool) -> Union[Dataset, DatasetParts]:
    """One file, or several: files of the same shapes are joined, files of different shapes kept
    apart as parts (each fed at its own shapes)."""
    loaded = [load_dataset(Path(p), specs, what, allow_labels) for p in paths]
    if len(loaded) == 1:
        return loaded[0]
    layouts = {(d.whole, tuple(sorted(d.feed_shapes(feed_batch(specs)).items()))) for d in loaded}
    if len(layouts) == 1:
        labels = [d.labels for d in loaded]
        if any(x is None for x in labels) and not all(x is None for x in labels):
            raise UserError(f"{what} files: some have 'labels' and some do not; give labels in all or none")
        return Dataset({k: np.concatenate([d.arrays[k] for d in loaded]) for k in loaded[0].arrays},
                       None if labels[0] is None else _joined_labels(labels, what),
                       " + ".join(d.source for d in loaded), loaded[0].whole)
    if allow_labels:
        raise UserError(f"{what} files of different shapes ({', '.join(d.source for d in loaded)}): give evaluation "
                        f"data of one shape per input; several shapes are taken for --calibration")
    if len({d.whole for d in loaded}) != 1:
        raise UserError(f"{what} files mix whole samples and batch-first rows; give all in one layout")
    return DatasetParts(loaded)


def read_data_arrays(path: Path, what: str) -> Dict[str, np.ndarray]:
    """A calibration or evaluation file's arrays, checked (no pickles, size caps)."""
    return _read_arrays(path, what)


def _read_arrays(path: Path, what: str) -> Dict[str, np.ndarray]:
    if not path.exists():
        raise UserError(f"{what} file not found: {path}")
    if path.is_dir():
        raise UserError(f"{what} file {path} is a directory; give a .npy or .npz file")
    try:
        # A data file must never run code (no pickles), and its size is checked against the cap
        # before any member is inflated (edgeopt_agent.arrays).
        arrays = read_arrays(path, f"{what} file")[1]
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise UserError(f"{what} file {path} is not a readable .npy/.npz array file ({exc})") from None
    broken = [k or "the array" for k, v in arrays.items() if not isinstance(v, np.ndarray) or v.dtype == object]
    if broken:
        raise UserError(f"{what} file {path}: {', '.join(broken)} is not a numeric array")
    return arrays


def _checked_labels(labels: np.ndarray, count: int, path: Path, what: str) -> np.ndarray:
    """Class indices [N] (one per sample), or symbol sequences [N, L] for a CTC output: each row the
    true symbols as class indices, padded at the end with -1."""
    if not np.issubdtype(labels.dtype, np.integer):
        raise UserError(f"{what} file {path}: 'labels' must be integer class indices, got {labels.dtype}")
    if labels.ndim == 2 and len(labels) == count and labels.shape[1] != 1:
        return labels
    labels = labels.reshape(-1)
    if len(labels) != count:
        raise UserError(f"{what} file {path}: 'labels' has {len(labels)} entries, the inputs have {count} samples "
                        f"(class indices [N], or symbol sequences [N, L] padded with -1)")
    return labels


def _joined_labels(labels: Sequence[np.ndarray], what: str) -> np.ndarray:
    if len({x.ndim for x in labels}) != 1:
        raise UserError(f"{what} files: some have class labels [N] and some symbol sequences [N, L]; give one kind")
    if labels[0].ndim == 1:
        return np.concatenate(labels)
    width = max(x.shape[1] for x in labels)
    return np.concatenate([np.pad(x, ((0, 0), (0, width - x.shape[1])), constant_values=-1) for x in labels])


def load_dataset(path: Path, specs: Sequence[InputSpec], what: str, allow_labels: bool) -> Dataset:
    """Read a .npy (single input) or .npz (arrays keyed by input name, or a single array) file.

    An array [N, *input_shape] holds N samples of that input; the batch-first form
    [N, *input_shape[1:]] (N rows, fed `batch` at a time) is read where every input shares a
    batch axis. Inputs with a constant value need no array.
    """
    path = Path(path)
    arrays = _read_arrays(path, what)
    labels = arrays.pop("labels", None) if allow_labels else None
    arrays.pop("labels", None)
    fed = [s for s in specs if not s.is_constant]
    names = [s.name for s in fed]
    if len(arrays) == 1 and len(fed) == 1:
        data = {names[0]: next(iter(arrays.values()))}
    else:
        unknown = sorted(k for k in arrays if k not in {s.name for s in specs})
        if unknown:
            raise UserError(f"{what} file {path} has array(s) {', '.join(repr(k) for k in unknown)} that are not "
                            f"inputs of the model; its inputs: {', '.join(s.name for s in specs)}")
        missing = [n for n in names if n not in arrays]
        if missing:
            raise UserError(
                f"{what} file {path} has arrays {sorted(arrays)}; the model needs {names} "
                f"(missing: {', '.join(missing)})"
            )
        data = {n: arrays[n] for n in names}
    for spec in fed:
        data[spec.name] = _conform_dtype(data[spec.name], spec, path, what)
    data, whole = _layout(data, fed, path, what)
    sizes = {len(v) for v in data.values()}
    if len(sizes) != 1:
        counts = ", ".join(f"{k}: {len(v)}" for k, v in data.items())
        raise UserError(f"{what} file {path}: inputs have different sample counts ({counts})")
    count = sizes.pop()
    if count == 0:
        raise UserError(f"{what} file {path}: the arrays hold no samples")
    if labels is not None:
        labels = _checked_labels(np.asarray(labels), count, path, what)
    _add_constants(data, specs, count, whole)
    return Dataset(data, labels, str(path), whole)


def _readings(array: np.ndarray, spec: InputSpec) -> Tuple[bool, Optional[np.ndarray]]:
    """(fits as samples [N, *shape], the array as batch-first rows [N, *shape[1:]] or None)."""
    shape = spec.shape
    as_samples = array.ndim == len(shape) + 1 and fits(array.shape[1:], shape)
    rows = None
    if shape and array.ndim == len(shape) and fits(array.shape[1:], shape[1:]):
        rows = array
    elif shape and array.ndim == len(shape) - 1 and fits(array.shape, shape[1:]):
        rows = array[None]  # a single row without its batch axis
    return as_samples, rows


def _layout(data: Dict[str, np.ndarray], specs: Sequence[InputSpec], path: Path, what: str):
    """Decide between batch-first rows and whole samples; (arrays, whole)."""
    readings = {s.name: _readings(data[s.name], s) for s in specs}
    batch = shared_batch(specs)
    if batch is not None and all(rows is not None for _, rows in readings.values()):
        return {s.name: readings[s.name][1] for s in specs}, False
    samples: Dict[str, np.ndarray] = {}
    for spec in specs:
        as_samples, rows = readings[spec.name]
        if as_samples:
            samples[spec.name] = data[spec.name]
        elif rows is not None and spec.shape[0] in (1, -1):
            samples[spec.name] = rows[:, None]  # rows of batch 1 are samples with a batch axis of 1
        else:
            raise UserError(_misfit(data[spec.name], spec, rows is not None, batch, path, what))
    return samples, True


def _misfit(array: np.ndarray, spec: InputSpec, rows_fit: bool, batch: Optional[int], path: Path, what: str) -> str:
    shape = list(spec.shape)
    as_samples = "[N, " + ", ".join("?" if d < 0 else str(d) for d in shape) + "]"
    if not shape:
        return (f"{what} file {path}: input '{spec.name}' is a scalar, so its array must be [N] (N samples); "
                f"got {list(array.shape)}")
    as_rows = "[N, " + ", ".join("?" if d < 0 else str(d) for d in shape[1:]) + "]" if len(shape) > 1 else "[N]"
    text = (f"{what} file {path}: input '{spec.name}' {spec.shape_text()} has an array of shape {list(array.shape)}; "
            f"as N samples it would be {as_samples}, as batch-first rows {as_rows}")
    if rows_fit:
        why = ("the model's inputs share no batch axis" if batch is None
               else f"the batch is {spec.shape[0]} but other inputs hold whole samples")
        text += f" — it fits the rows reading, but {why}; give {as_samples} to make each entry one whole sample"
    return text


def _conform_dtype(array: np.ndarray, spec: InputSpec, path: Path, what: str) -> np.ndarray:
    want = np.dtype(spec.dtype)
    if array.dtype != want:
        if array.dtype.kind != want.kind and not (array.dtype.kind in "iu" and want.kind in "iu"):
            raise UserError(
                f"{what} file {path}: input '{spec.name}' has dtype {array.dtype}, the model expects {want}"
            )
        array = array.astype(want)
    return np.ascontiguousarray(array)


def _add_constants(arrays: Dict[str, np.ndarray], specs: Sequence[InputSpec], count: int, whole: bool) -> None:
    """Inputs fed a constant (an ONNX input given --input-value) get it in every sample."""
    for spec in specs:
        if spec.is_constant:
            shape = (count,) + (tuple(spec.shape) if whole else tuple(spec.shape[1:]))
            arrays[spec.name] = np.full(shape, spec.value, dtype=np.dtype(spec.dtype))


def _open_inputs(specs: Sequence[InputSpec]) -> List[InputSpec]:
    """Inputs with dims still dynamic, leaving out those whose open dims another listed input
    shares by name (giving one fills the other)."""
    listed: List[InputSpec] = []
    covered = set()
    for spec in specs:
        if spec.is_constant or spec.is_concrete:
            continue
        names = {spec.dim_names[i] if i < len(spec.dim_names) else None for i, d in enumerate(spec.shape) if d < 0}
        if None not in names and names <= covered:
            continue
        covered |= names - {None}
        listed.append(spec)
    return listed


def random_dataset(specs: Sequence[InputSpec], samples: int = DEFAULT_SAMPLES, seed: int = 0) -> Dataset:
    """Random samples for concrete specs: batch-first rows where the inputs share a batch axis."""
    unknown = _open_inputs(specs)
    if unknown:
        raise UserError("without data files (--calibration / --eval-data) every dynamic dimension needs a size: " +
                        "; ".join(f"input '{s.name}' is {s.shape_text()}: give --input-shape {s.name}="
                                  f"{','.join('N' if d < 0 else str(d) for d in s.shape)}" for s in unknown))
    rng = np.random.default_rng(seed)
    whole = shared_batch(specs) is None
    arrays = {}
    for spec in specs:
        if spec.is_constant:
            continue
        shape = (samples,) + (tuple(spec.shape) if whole else tuple(spec.shape[1:]))
        dtype = np.dtype(spec.dtype)
        if dtype.kind == "f":
            arrays[spec.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            arrays[spec.name] = rng.integers(0, 2, shape).astype(dtype)
        else:
            # 0 and 1: valid for masks, token types and any index (a wider range breaks a Gather)
            arrays[spec.name] = rng.integers(0, 2, shape).astype(dtype)
    _add_constants(arrays, specs, samples, whole)
    return Dataset(arrays, None, "random", whole)
