"""A benchmark case (a model, its data and its task judge) and the judgement it gives an artifact.

A task judge decides whether an artifact keeps the task: not measurably worse than FP32 on it (one-sided
exact McNemar on per-sample outcomes against the truth where the case has one, stated tolerances elsewhere).
The helpers below export a case's PyTorch source to the FP32 ONNX the baselines quantize and match
detections."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional

import numpy as np

from realbench import sources


@dataclass(frozen=True)
class TaskResult:
    """A case's task judgement of one artifact: the figure people read, whether the artifact keeps the
    task (not measurably worse than FP32 on it), and the one-line criterion that decided."""
    figure: str
    kept: bool
    criterion: str

    def __post_init__(self):  # numpy's bool would reach the --json output as the string "False"
        object.__setattr__(self, "kept", bool(self.kept))

    def __str__(self) -> str:  # where a caller prints the judgement: the figure and the decision
        return f"{self.figure} ({'keeps' if self.kept else 'does not keep'} the task)"


ALPHA = 0.05  # one-sided: an artifact measurably worse than FP32 at 95 % does not keep the task


def mcnemar_worse_p(reference_right, candidate_right) -> float:
    """Exact one-sided McNemar test on paired per-sample outcomes (right / wrong against the truth): the
    probability, were the candidate as good as FP32, of losing at least as many samples FP32 gets right
    as it lost, among the samples where the two differ."""
    ref, got = np.asarray(reference_right, bool), np.asarray(candidate_right, bool)
    lost, gained = int((ref & ~got).sum()), int((~ref & got).sum())
    n = lost + gained
    return sum(math.comb(n, k) for k in range(lost, n + 1)) / 2 ** n if n else 1.0


def not_worse(reference_right, candidate_right) -> tuple:
    """(kept, "lost L, gained G, p=...") by mcnemar_worse_p at ALPHA."""
    ref, got = np.asarray(reference_right, bool), np.asarray(candidate_right, bool)
    p = mcnemar_worse_p(ref, got)
    return p >= ALPHA, f"lost {int((ref & ~got).sum())}, gained {int((~ref & got).sum())}, p={p:.3f}"


@dataclass
class Case:
    name: str
    what: str
    onnx: Path
    shapes: List[str]
    dtypes: List[str]
    calibration: Dict[str, np.ndarray]
    evaluation: Dict[str, np.ndarray]
    kind: Optional[str]  # edgeopt output kind of the first output; None: edgeopt infers it
    task: Callable[[List[np.ndarray], List[np.ndarray]], TaskResult]  # (reference outputs, candidate outputs)
    whole: bool = False  # data arrays hold whole samples (inputs without a shared batch axis)
    labels: Optional[np.ndarray] = None  # the evaluation's ground truth, given to edgeopt and to every verdict
    source: Optional[str] = None  # what edgeopt converts when not `onnx`: "scripts/sources.py:factory"
    weights: Optional[Path] = None  # the state_dict edgeopt loads into `source` (--weights)
    kinds: Optional[List[Optional[str]]] = None  # every output's kind in order (None: edgeopt infers it)
    # The inputs the task judge runs every artifact on, where the task needs more than the evaluation
    # data edgeopt's verdicts use (a retrieval set of 1,600 texts); None: the evaluation data.
    task_data: Optional[Dict[str, np.ndarray]] = None
    # Whether edgeopt is told `kinds` (--output-kind), as someone who knows the model would; False: it
    # decides them from evidence, as a new user's conversion does (the kinds are then what check_kind_inference
    # compares its decision with).
    tell_kinds: bool = True

    def feed(self, arrays: Dict[str, np.ndarray], i: int) -> Dict[str, np.ndarray]:
        return {k: np.asarray(v[i]) if self.whole else v[i:i + 1] for k, v in arrays.items()}  # a scalar as a 0-d array


# ---------------------------------------------------------------- PyTorch sources and detections


FACTORIES = Path(sources.__file__).resolve()


EVAL_SEED = 1000


def export_fp32(module, example: tuple, path: Path, inputs: List[str], outputs: List[str]) -> Path:
    """The FP32 ONNX of `module` the baselines quantize (TorchScript exporter, batch axis dynamic)."""
    import torch

    with torch.no_grad():
        torch.onnx.export(module.eval(), example, str(path), input_names=inputs, output_names=outputs,
                          dynamic_axes={n: {0: "batch"} for n in inputs + outputs}, opset_version=17, dynamo=False)
    return path


def loaded_module(factory: str, weights: Path = None):
    import torch

    module = getattr(sources, factory)()
    if weights is not None:
        module.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
    return module.eval()


def iou(a, b) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - w * h
    return w * h / union if union > 0 else 0.0


def detections_kept(reference: List[list], candidate: List[list], same_class=lambda r, c: True) -> str:
    """FP32's detections (per image, boxes first) that the candidate still finds at IoU >= 0.5."""
    kept = total = extra = 0
    for ref, got in zip(reference, candidate):
        used = set()
        for r in ref:
            total += 1
            match = next((i for i, g in enumerate(got) if i not in used and same_class(r, g) and iou(r[0], g[0]) >= 0.5), None)
            if match is not None:
                used.add(match)
                kept += 1
        extra += len(got) - len(used)
    return f"detections kept {kept}/{total}, {extra} new"
