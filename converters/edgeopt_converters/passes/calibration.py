"""Activation ranges for static INT8, computed once and reused by every quantization attempt.

MinMax runs first on every tensor. Tensors that no INT8 scale can represent (non-finite values,
magnitudes past UNQUANTIZABLE, such as additive attention masks filled with float32's minimum)
are reported so their nodes stay in float. Histogram methods (percentile, entropy) skip
near-constant large tensors, on which numpy cannot build finite bins (onnxruntime's "Too many
bins for data range"), and take MinMax's exact range for them instead.

onnxruntime's calibrators hold every intermediate tensor of every sample they are given before
reducing them to ranges or histograms (about 100 MB per sample for a 48x320 text recognizer), so
samples are handed over in chunks that keep the held tensors under COLLECTED_BYTES. MinMax ranges
merge exactly across chunks. A histogram is given its final range (MinMax's) before the first chunk,
so it is the histogram onnxruntime would build from all samples at once, not one re-binned each
time a chunk widens it.
"""
from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, FrozenSet, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from ._quiet import captured_output
from .errors import StepFailed, first_line

UNQUANTIZABLE = 1e6  # an activation this large would get an INT8 step of ~1e4: nothing survives
HISTOGRAM_BINS = 2048  # percentile's. Entropy keeps onnxruntime's 128, with which its KL search has one
# candidate, the whole symmetric range [-max|x|, max|x|]. Measured on PP-OCRv4's recognizer (2026-11-24):
# 512 or 2048 bins clip most activations to a quarter of their range or less, no line reads as FP32
# reads it (99-100 points of symbols), and the search takes 52 s or 273 s.
COLLECTED_BYTES = 512 * 2**20  # intermediate tensors held at once while calibrating


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


def calibrate(model: Path, batches: Callable[[int], Iterable[Dict[str, np.ndarray]]], method: str,
              op_types: Optional[Sequence[str]], symmetric: bool, cache: Path, threads: Optional[int] = None,
              run_batch: int = 1) -> Calibration:
    """Ranges of `model`'s tensors over `batches(samples per run)`: `run_batch` samples per run where the
    model takes any batch size (ranges and histograms do not depend on how samples are grouped), else 1;
    `threads` for the runs (None: onnxruntime's default)."""
    from onnxruntime.quantization import calibrate as cal
    from onnxruntime.quantization.calibrate import CalibrationMethod, TensorData, TensorsData, save_tensors_data

    methods = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
               "percentile": CalibrationMethod.Percentile}
    runs = _Runs(batches, threads, run_batch)
    minmax = _collect(cal, model, runs, CalibrationMethod.MinMax, op_types, {"symmetric": symmetric})
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
        histogram = _collect(cal, model, runs, methods[method], op_types,
                             {"symmetric": symmetric, "num_bins": HISTOGRAM_BINS} if method == "percentile" else
                             {"symmetric": symmetric}, skip=skip, ranges=ranges)
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


@dataclass(frozen=True)
class _Runs:
    """How the calibrator's session runs: the feeds for a number of samples per run, threads, and how
    many samples per run where the model takes any batch."""

    batches: Callable[[int], Iterable[Dict[str, np.ndarray]]]
    threads: Optional[int]
    run_batch: int

    def session(self, calibrator):
        """The calibrator's session, remade with `threads` and no spinning (which only takes cores from
        other work on a busy host) where threads are given."""
        if not self.threads:
            return calibrator.infer_session
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL  # as onnxruntime's own
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        calibrator.infer_session = onnxruntime.InferenceSession(
            calibrator.augmented_model_path, sess_options=options, providers=calibrator.execution_providers)
        return calibrator.infer_session

    def feeds(self, session) -> Iterable[Dict[str, np.ndarray]]:
        takes_any_batch = all(not isinstance(i.shape[0], int) for i in session.get_inputs() if i.shape)
        return self.batches(self.run_batch if takes_any_batch else 1)


def _collect(cal, model: Path, runs: _Runs, method, op_types, options: dict, skip: FrozenSet[str] = frozenset(),
             ranges: Optional[Dict[str, Tuple[float, float]]] = None):
    with tempfile.TemporaryDirectory(prefix="edgeopt-calib-") as tmp:
        try:
            with captured_output("calibration"):
                calibrator = cal.create_calibrator(model, op_types, augmented_model_path=str(Path(tmp) / "augmented.onnx"),
                                                   calibrate_method=method, extra_options=options)
                session = runs.session(calibrator)
                if skip:
                    calibrator.tensors_to_calibrate = [t for t in calibrator.tensors_to_calibrate if t not in skip]
                if ranges is not None:
                    _seed_histograms(cal, calibrator, ranges)
                for chunk in _chunks(iter(runs.feeds(session)), session):
                    calibrator.collect_data(FeedReader(chunk))
                return calibrator.compute_data()
        except StepFailed:
            raise
        except Exception as exc:
            raise StepFailed(f"{str(method).split('.')[-1]} calibration failed: {first_line(exc)}; "
                             f"try --calibrate-method minmax") from exc


def _seed_histograms(cal, calibrator, ranges: Dict[str, Tuple[float, float]]) -> None:
    """Empty histograms over each tensor's final range, shaped as onnxruntime's HistogramCollector
    builds them from signed values (entropy; percentile without symmetric ranges). Its absolute-value
    histograms (symmetric percentile) start at the smallest |x| seen, which MinMax does not give:
    those are left to merge chunk by chunk."""
    if calibrator.method == "percentile" and calibrator.symmetric:
        return
    collector = cal.HistogramCollector(method=calibrator.method, symmetric=calibrator.symmetric,
                                       num_bins=calibrator.num_bins, num_quantized_bins=calibrator.num_quantized_bins,
                                       percentile=calibrator.percentile, scenario=calibrator.scenario)
    for name in calibrator.tensors_to_calibrate:
        low, high = (np.float32(v) for v in ranges[name])
        threshold = np.float32(max(abs(low), abs(high)))
        counts, edges = np.histogram(np.zeros(0, np.float32), calibrator.num_bins, range=(-threshold, threshold))
        collector.histogram_dict[name] = (counts, edges, low, high, threshold)
    calibrator.collector = collector


def _chunks(feeds: Iterator[Dict[str, np.ndarray]], session) -> Iterator[List[Dict[str, np.ndarray]]]:
    """The feeds in lists whose intermediate tensors fit COLLECTED_BYTES, sized by running the first
    feed once through the calibrator's augmented model."""
    first = next(feeds, None)
    if first is None:
        yield []  # onnxruntime's own error: "No data is collected."
        return
    per_sample = sum(np.asarray(value).nbytes for value in session.run(None, first))
    size = max(1, COLLECTED_BYTES // max(per_sample, 1))
    chunk = [first]
    for feed in feeds:
        if len(chunk) == size:
            yield chunk
            chunk = []
        chunk.append(feed)
    yield chunk


class FeedReader:
    """onnxruntime's CalibrationDataReader over feeds ({input name: array} each)."""

    def __init__(self, feeds: Iterable[Dict[str, np.ndarray]]):
        self._feeds = iter(feeds)

    def get_next(self):
        return next(self._feeds, None)
