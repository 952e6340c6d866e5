"""What one conversion knows, handed to every part of it: the options, the board, the model, its data,
the FP32 reference and what has been built so far. Steps get their own narrow view (`step_context`)."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from edgeopt_agent.profiles import DeviceProfile

from . import accuracy as acc
from .accuracy.user_metric import UserMetric
from .host_work import AccuracyRuns
from .options import ConvertOptions
from .passes.base import StepContext
from .phase_clock import SEARCH, PhaseClock
from .recipe import Plan
from .source.data import shape_sets
from .source.source_model import SourceModel
from .source.tensors import Dataset, InputSpec, feed_batch


@dataclass(frozen=True)
class Judging:
    """How every artifact's outputs are judged: the same names, kinds and state pairs for all."""

    names: List[str]
    kinds: List[acc.OutputKind]
    state_pairs: Dict[str, str]
    stream_steps: int


@dataclass
class ConversionContext:
    options: ConvertOptions
    profile: DeviceProfile
    source: SourceModel
    specs: List[InputSpec]  # the inputs fed, with the shapes of the data
    calibration: Dataset
    evaluation: Dataset
    threads: int
    work: Path  # the private build folder inside OUTDIR
    plan: Plan
    model_specs: List[InputSpec] = field(default_factory=list)  # every input, constants and dynamic dims included
    evaluation_all: Optional[Dataset] = None  # all the evaluation data given, beyond --max-eval-samples
    tolerances: acc.Tolerances = field(default_factory=acc.Tolerances)
    metric: Optional[UserMetric] = None
    notes: List[str] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)
    failed: List[Dict[str, Any]] = field(default_factory=list)  # artifacts that could not be built or run, with why
    reference_predict: Optional[Callable[[Dict[str, np.ndarray]], Sequence[np.ndarray]]] = None
    reference: List[np.ndarray] = field(default_factory=list)  # FP32 outputs on the evaluation data
    streamed_reference: Dict[str, List[np.ndarray]] = field(default_factory=dict)  # filled on first use
    judging: Optional[Judging] = None  # decided from the reference and the first artifact's names
    built: Dict[str, Path] = field(default_factory=dict)  # artifact key -> its file in `work`
    prebuilt: Dict[str, Tuple[Path, Dict[str, Any]]] = field(default_factory=dict)  # key -> (file, facts) a repair built
    refusals: Dict[str, int] = field(default_factory=dict)  # key -> times a runtime refused it and it was rebuilt
    pt2e_statistics: Dict[str, Any] = field(default_factory=dict)  # PT2E calibrations shared between formats
    dynamic_batch: bool = False  # the ONNX export kept the batch dim dynamic
    started: float = field(default_factory=time.monotonic)
    clock: PhaseClock = field(default_factory=PhaseClock)
    # threads and samples per run for the reference, calibration and validation (set with the reference)
    accuracy_runs: AccuracyRuns = field(default_factory=lambda: AccuracyRuns(1, 1))

    # --- what a conversion records: every write to the context goes through one of these ---------------

    def note(self, *lines: str) -> None:
        self.notes.extend(lines)

    def warn(self, *lines: str) -> None:
        self.warnings.extend(lines)

    def fail(self, *entries: Dict[str, Any]) -> None:
        """Artifacts that could not be built or run, with why (the manifest's `failed_artifacts`)."""
        self.failed.extend(entries)

    def record_built(self, key: str, path: Path, info: Dict[str, Any]) -> None:
        """An artifact built (or taken from a repair) into `path`, with its build's facts."""
        self.built[key] = path
        if "dynamic_batch" in info:
            self.dynamic_batch = bool(info["dynamic_batch"])

    def forget_built(self, key: str) -> None:
        self.built.pop(key, None)

    def keep_prebuilt(self, key: str, path: Path, facts: Dict[str, Any]) -> None:
        """A file a repair built for the artifact `key`, taken when that artifact is built."""
        self.prebuilt[key] = (path, facts)

    def take_prebuilt(self, key: str) -> Optional[Tuple[Path, Dict[str, Any]]]:
        return self.prebuilt.pop(key, None)

    def count_refusal(self, key: str) -> None:
        self.refusals[key] = self.refusals.get(key, 0) + 1

    def judging_for(self, decide: Callable[[], Judging]) -> Judging:
        """How outputs are judged: decided once, by the first artifact judged."""
        if self.judging is None:
            self.judging = decide()
        return self.judging

    def streamed_reference_for(self, stream: Callable[[], List[np.ndarray]]) -> List[np.ndarray]:
        """The FP32 model's outputs streamed through its states: computed once, on first use."""
        if "outputs" not in self.streamed_reference:
            self.streamed_reference["outputs"] = stream()
        return self.streamed_reference["outputs"]

    def take_reference(self, runs: AccuracyRuns, predict: Callable[[Dict[str, np.ndarray]], Sequence[np.ndarray]],
                       evaluation: Dataset, outputs: List[np.ndarray]) -> None:
        """The FP32 reference: how it runs, the evaluation data it ran on and its outputs there."""
        self.accuracy_runs, self.reference_predict = runs, predict
        self.evaluation, self.reference = evaluation, outputs

    def extend_reference(self, evaluation: Dataset, added: List[np.ndarray]) -> None:
        """More evaluation data, and the reference's outputs on the samples added."""
        self.reference = [np.concatenate([old, new]) for old, new in zip(self.reference, added)]
        self.evaluation = evaluation

    def seconds_left(self) -> float:
        """Of --time-budget, which the search and repairs spend (infinite without one): exports, the
        reference and the first verdicts do not count against it."""
        budget = self.options.time_budget
        return budget - self.clock.seconds(SEARCH) if budget else math.inf

    @property
    def batch(self) -> int:
        """Samples in one feed as the model takes it (its own batch size)."""
        return feed_batch(self.specs)

    def shape_sets(self) -> List[Dict[str, Tuple[int, ...]]]:
        """The input shapes of each calibration part and of the evaluation data."""
        return shape_sets(self.calibration, self.evaluation, self.batch)

    def varying_axes(self) -> Tuple[Tuple[str, int, str], ...]:
        """Axes (besides the batch) whose size differs across the data files (calibration parts and
        evaluation): they stay dynamic in the export. Axes that vary alike across inputs share one size."""
        sets = self.shape_sets()
        groups: Dict[Tuple[int, Tuple[int, ...]], str] = {}
        axes = []
        for name, shape in sets[0].items():
            for axis in range(len(shape)):
                sizes = tuple(s[name][axis] for s in sets if name in s)
                if len(set(sizes)) > 1 and not (axis == 0 and not self.calibration.whole):
                    group = groups.setdefault((axis, sizes), f"dim{len(groups)}")
                    axes.append((name, axis, group))
        return tuple(axes)

    def step_context(self, advance: Optional[Callable[[int], None]] = None,
                     calibration_cache: Optional[Path] = None) -> StepContext:
        """What a conversion step may use of this conversion."""
        return StepContext(self.source, self.specs, self.calibration, self.batch, advance,
                           example=self.calibration.first_feed(self.batch), fix_dims=not self.varying_axes(),
                           calibration_cache=calibration_cache, threads=self.accuracy_runs.threads,
                           run_batch=self.accuracy_runs.batch, pt2e_statistics=self.pt2e_statistics)

    def float_artifact(self, fmt: str) -> Optional[Path]:
        """The built FP32 artifact of a format: what that format's other artifacts are compared with."""
        key = next((a.key for a in self.plan.artifacts if a.format == fmt and a.precision == "fp32"), None)
        return self.built.get(key) if key else None
