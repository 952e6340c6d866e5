"""Which data a conversion calibrates and validates on, and the input shapes that data fixes."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Protocol, Tuple

import numpy as np

from edgeopt_agent.errors import require

from .input_specs import BATCH_FIRST, UNDECLARED_DTYPES, DataInput, inputs_from_data, readings
from .source_model import SourceModel
from .tensors import Dataset, DatasetParts, InputSpec, load_datasets, random_dataset, read_data_arrays

MAX_OUTPUT_BYTES = 512 * 2**20  # float32 outputs kept for the reference, and again per artifact


class DataOptions(Protocol):
    """What a conversion's data comes from: the options' files and sample limits (ConvertOptions has them)."""

    calibration: Tuple[Path, ...]
    eval_data: Optional[Path]
    max_calibration_samples: int
    max_eval_samples: int


def choose_datasets(source: SourceModel, specs: List[InputSpec], opts: DataOptions, notes: List[str],
                    warnings: List[str]) -> Tuple[Dataset, Dataset, Dataset]:
    """(calibration, evaluation, all the evaluation data): the user's files, else the data bundled with the
    model, else random data (each fallback said in a note or a warning), the first two cut to the options'
    sample limits; the rest of the evaluation data can decide a verdict the first part leaves open."""
    calibration = load_datasets(list(opts.calibration), specs, "calibration", False) if opts.calibration else None
    evaluation = load_datasets([opts.eval_data], specs, "eval-data", True) if opts.eval_data else None
    if calibration is None and evaluation is None and source.calibration is not None:
        calibration, evaluation = source.calibration, source.eval_data
        notes.append(f"calibration and evaluation use the data bundled with {source.description}")
    if calibration is None and evaluation is None:
        calibration, evaluation = random_dataset(specs, seed=0), random_dataset(specs, seed=1)
        warnings.append(
            "no --calibration data: INT8 is calibrated on random data and validated on random data, so the "
            "accuracy figures are meaningless; pass --calibration (and --eval-data) from your real inputs"
        )
    elif calibration is None:
        calibration = evaluation
        warnings.append("no --calibration given: calibrating on the --eval-data samples, so the accuracy figures are optimistic")
    elif evaluation is None:
        evaluation = calibration.parts[0] if isinstance(calibration, DatasetParts) else calibration
        which = f"the samples of {evaluation.source}" if evaluation is not calibration else "the calibration samples"
        warnings.append(f"no --eval-data given: validating on {which}, so the accuracy figures are optimistic")
    return head(calibration, opts.max_calibration_samples), head(evaluation, opts.max_eval_samples), evaluation


def shape_sets(calibration: Dataset, evaluation: Dataset, batch: int) -> List[Dict[str, Tuple[int, ...]]]:
    """The input shapes of each calibration part and of the evaluation data."""
    return calibration.shapes(batch) + evaluation.shapes(batch)


def head(data: Dataset, limit: int) -> Dataset:
    if limit <= 0 or data.size <= limit:
        return data
    return data.subset(slice(None, limit))


def data_shapes(source: SourceModel, opts: DataOptions) -> Tuple[Dict[str, DataInput], str]:
    """({input: DataInput}, the file) for inputs whose shape or dtype the model does not declare (a
    file.py:factory's forward() declares names only) and the first data file fixes. Where the file can be
    read two ways ([N, 1, ...]: N whole inputs, or N samples of [1, ...]; integer arrays: token ids, or
    images saved as uint8 for a float model), the model is run once on zeros of each until one runs:
    batch-first and the data's dtypes first. Where none runs, batch-first float32, and the data check
    says what does not fit."""
    undeclared = [s.name for s in source.input_specs
                  if s.tensor and (s.shape is None or source.kind in UNDECLARED_DTYPES)]
    files = list(opts.calibration) or ([opts.eval_data] if opts.eval_data else [])
    if not undeclared or not files:
        return {}, ""
    names = [s.name for s in source.input_specs]
    arrays = read_data_arrays(Path(files[0]), "calibration")
    candidates = []  # each reading, with the data's integer dtypes and then with float32 (images saved as uint8)
    for reading in readings(arrays):
        for integers in (True, False):
            found = inputs_from_data(arrays, names, reading, integers)
            if found not in candidates:
                candidates.append(found)
    plain = inputs_from_data(arrays, names, BATCH_FIRST, integers=False)
    found = candidates[0] if len(candidates) == 1 else next((c for c in candidates if _runs(source, c)), plain)
    return {name: data for name, data in found.items() if name in undeclared}, str(files[0])


def _runs(source: SourceModel, inputs: Dict[str, DataInput]) -> bool:
    """Whether the model runs on zeros of these shapes (every tensor input given, none declared otherwise)."""
    specs = [s for s in source.input_specs if s.tensor]
    if source.module is None or source.kind not in UNDECLARED_DTYPES or any(s.name not in inputs for s in specs):
        return False
    torch = require("torch", "convert")
    feeds = [torch.zeros(inputs[s.name].shape, dtype=getattr(torch, inputs[s.name].dtype, torch.float32))
             for s in specs]
    try:
        with torch.no_grad():
            source.module(*feeds)
    except Exception:  # this reading does not fit the model; the other may
        return False
    return True


def fit_outputs_in_memory(evaluation: Dataset, predict, batch: int, notes: List[str]) -> Dataset:
    """The evaluation set, cut so that two copies of its outputs fit in memory."""
    feed, _ = next(evaluation.batches(batch))
    per_sample = sum(np.asarray(o).size for o in predict(feed)) * 4 / batch
    limit = max(batch, int(MAX_OUTPUT_BYTES // max(per_sample, 1)) // batch * batch)
    if evaluation.size <= limit:
        return evaluation
    notes.append(f"validation uses the first {limit} of {evaluation.size} evaluation samples: the "
                 f"outputs take {per_sample / 2**20:.1f} MiB per sample")
    return head(evaluation, limit)


def labelled_shapes(specs: List[InputSpec], data_shapes: Dict[str, DataInput], data_file: str) -> List[str]:
    """Notes for the inputs whose shape or dtype the data file gave."""
    notes = []
    for s in specs:
        data = data_shapes.get(s.name)
        if data is None:
            continue
        took = []
        if s.shape == data.shape:
            took.append(f"its shape {','.join(map(str, s.shape))}")
        if s.dtype == data.dtype and s.dtype != "float32":
            took.append(f"its dtype {s.dtype}")
        if took:
            notes.append(f"input '{s.name}' takes {' and '.join(took)} from {data_file}")
    return notes

