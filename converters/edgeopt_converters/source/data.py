"""Which data a conversion calibrates and validates on, and the input shapes that data fixes."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np

from ..options import ConvertOptions
from .input_specs import shapes_from_data
from .source_model import SourceModel
from .tensors import Dataset, DatasetParts, InputSpec, load_datasets, random_dataset, read_data_arrays

MAX_OUTPUT_BYTES = 512 * 2**20  # float32 outputs kept for the reference, and again per artifact


def choose_datasets(source: SourceModel, specs: List[InputSpec], opts: ConvertOptions, notes: List[str],
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


def data_shapes(source: SourceModel, opts: ConvertOptions) -> Tuple[Dict[str, tuple], str]:
    """({input: shape}, the file) for inputs whose shape neither the model nor the options give and
    the first data file fixes (a file.py:factory's forward() declares names, not shapes)."""
    unknown = [s.name for s in source.input_specs if s.shape is None and s.tensor]
    files = list(opts.calibration) or ([opts.eval_data] if opts.eval_data else [])
    if not unknown or not files:
        return {}, ""
    found = shapes_from_data(read_data_arrays(Path(files[0]), "calibration"), [s.name for s in source.input_specs])
    return {name: shape for name, shape in found.items() if name in unknown}, str(files[0])


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


def labelled_shapes(specs: List[InputSpec], data_shapes: Dict[str, tuple], data_file: str) -> List[str]:
    """Notes for the inputs whose shape the data file gave."""
    return [f"input '{s.name}' takes its shape {','.join(map(str, s.shape))} from {data_file} "
            f"(N samples of {list(s.shape[1:])})" for s in specs
            if s.name in data_shapes and s.shape == data_shapes[s.name]]

