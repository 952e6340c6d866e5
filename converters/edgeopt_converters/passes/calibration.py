"""Activation ranges for static INT8, computed once and reused by every quantization attempt.

MinMax runs first on every tensor. Tensors that no INT8 scale can represent (non-finite values,
magnitudes past UNQUANTIZABLE, such as additive attention masks filled with float32's minimum)
are reported so their nodes stay in float. Histogram methods (percentile, entropy) skip
near-constant large tensors, on which numpy cannot build finite bins (onnxruntime's "Too many
bins for data range"), and take MinMax's exact range for them instead.
"""
from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, FrozenSet, Iterable, Optional, Sequence, Tuple

import numpy as np

from ._quiet import captured_output
from .errors import StepFailed, first_line

UNQUANTIZABLE = 1e6  # an activation this large would get an INT8 step of ~1e4: nothing survives
HISTOGRAM_BINS = 2048


@dataclass(frozen=True)
class Calibration:
    method: str
    cache: Path  # onnxruntime's calibration cache (JSON), for quantize_static's calibration_cache_path
    unquantizable: FrozenSet[str]  # tensors whose range INT8 cannot hold
    flat: FrozenSet[str]  # near-constant tensors calibrated by MinMax instead of a histogram


def _flat(low: float, high: float, bins: int = HISTOGRAM_BINS) -> bool:
    """numpy cannot split [low, high] into `bins` finite float32 bins."""
    magnitude = max(abs(low), abs(high))
    width = (high - low) or 1.0
    return float(np.spacing(np.float32(magnitude))) * bins * 4 >= width


def calibrate(model: Path, batches: Callable[[], Iterable[Dict[str, np.ndarray]]], method: str,
              op_types: Optional[Sequence[str]], symmetric: bool, cache: Path) -> Calibration:
    from onnxruntime.quantization import calibrate as cal
    from onnxruntime.quantization.calibrate import CalibrationMethod, TensorData, TensorsData, save_tensors_data

    methods = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
               "percentile": CalibrationMethod.Percentile}
    minmax = _collect(cal, model, batches, CalibrationMethod.MinMax, op_types, {"symmetric": symmetric})
    ranges: Dict[str, Tuple[float, float]] = {
        name: (float(np.asarray(d.range_value[0]).min()), float(np.asarray(d.range_value[1]).max()))
        for name, d in minmax.items()}
    unquantizable = frozenset(n for n, (lo, hi) in ranges.items()
                              if not (np.isfinite(lo) and np.isfinite(hi)) or max(abs(lo), abs(hi)) > UNQUANTIZABLE)
    flat: FrozenSet[str] = frozenset()
    result = minmax
    if method != "minmax":
        flat = frozenset(n for n, (lo, hi) in ranges.items() if n not in unquantizable and _flat(lo, hi))
        skip = unquantizable | flat
        histogram = _collect(cal, model, batches, methods[method], op_types,
                             {"symmetric": symmetric, "num_bins": HISTOGRAM_BINS} if method == "percentile" else
                             {"symmetric": symmetric}, skip=skip)
        data = dict(histogram.data)
        for name in skip:
            lo, hi = ranges[name]
            data[name] = TensorData(lowest=np.array(lo, np.float32), highest=np.array(hi, np.float32))
        result = TensorsData(methods[method], data)
    save_tensors_data(result, cache)
    _sets(cache).write_text(json.dumps({"method": method, "unquantizable": sorted(unquantizable), "flat": sorted(flat)}))
    return Calibration(method, cache, unquantizable, flat)


def _sets(cache: Path) -> Path:
    return cache.with_name(cache.name + ".sets.json")


def load_calibration(cache: Path) -> Calibration:
    """A calibration written by `calibrate` (ranges in onnxruntime's cache, the tensor sets beside it)."""
    sets = json.loads(_sets(cache).read_text())
    return Calibration(sets["method"], cache, frozenset(sets["unquantizable"]), frozenset(sets["flat"]))


def _collect(cal, model: Path, batches, method, op_types, options: dict, skip: FrozenSet[str] = frozenset()):
    with tempfile.TemporaryDirectory(prefix="edgeopt-calib-") as tmp:
        try:
            with captured_output("calibration"):
                calibrator = cal.create_calibrator(model, op_types, augmented_model_path=str(Path(tmp) / "augmented.onnx"),
                                                   calibrate_method=method, extra_options=options)
                if skip:
                    calibrator.tensors_to_calibrate = [t for t in calibrator.tensors_to_calibrate if t not in skip]
                calibrator.collect_data(_Reader(batches()))
                return calibrator.compute_data()
        except StepFailed:
            raise
        except Exception as exc:
            raise StepFailed(f"{str(method).split('.')[-1]} calibration failed: {first_line(exc)}; "
                             f"try --calibrate-method minmax") from exc


class _Reader:
    def __init__(self, feeds: Iterable[Dict[str, np.ndarray]]):
        self._feeds = iter(feeds)

    def get_next(self):
        return next(self._feeds, None)
