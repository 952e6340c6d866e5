"""Accuracy of an artifact against the FP32 reference, judged output by output by what it means.

Every output gets a kind (kinds.py) and a judge (judges.py); a stateful model is also judged
streamed (streaming.py); a user metric can add its own verdict (user_metric.py). The artifact's
verdict is its worst: ok, unresolved (the evaluation data cannot decide) or failed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..source.tensors import Dataset
from .judges import FAILED, OK, SEVERITY, UNRESOLVED, Judgement, Tolerances
from .kind_registry import judge
from .kinds import KINDS, OutputGraph, OutputKind, graph_evidence, image_input_hw, infer_kind
from .sample_layout import samples_first
from .user_metric import UserMetric

__all__ = ["Accuracy", "MetricResult", "Judgement", "Tolerances", "OutputKind", "KINDS", "OK", "UNRESOLVED",
           "FAILED", "collect_outputs", "compare", "decide_kinds", "graph_evidence",
           "image_input_hw"]

Predict = Callable[[Mapping[str, np.ndarray]], Sequence[np.ndarray]]


@dataclass(frozen=True)
class MetricResult:
    spec: str
    reference: float
    candidate: float
    max_drop: Optional[float]

    @property
    def drop(self) -> float:
        return self.reference - self.candidate

    @property
    def verdict(self) -> str:
        return FAILED if self.max_drop is not None and self.drop > self.max_drop else OK

    def to_dict(self) -> dict:
        return {"metric": self.spec, "reference": self.reference, "candidate": self.candidate,
                "drop": round(self.drop, 6), "max_drop": self.max_drop, "verdict": self.verdict}


@dataclass(frozen=True)
class Accuracy:
    samples: int
    outputs: Tuple[Judgement, ...]
    tolerances: Tolerances = field(default_factory=Tolerances)
    streamed: Tuple[Judgement, ...] = ()  # the same outputs over `stream_steps` steps with state fed back
    stream_steps: int = 0
    metric: Optional[MetricResult] = None

    @property
    def judgements(self) -> Tuple[Judgement, ...]:
        return self.outputs + self.streamed

    @property
    def verdict(self) -> str:
        verdicts = [j.verdict for j in self.judgements] + ([self.metric.verdict] if self.metric else [])
        return max(verdicts, key=SEVERITY.__getitem__, default=OK)

    @property
    def deciding(self) -> Optional[Judgement]:
        """The output whose verdict is the artifact's (the first of the worst)."""
        worst = [j for j in self.judgements if j.verdict == self.verdict]
        return worst[0] if worst else None

    @property
    def reason(self) -> str:
        if self.metric and self.metric.verdict == FAILED:
            return f"--metric {self.metric.spec} dropped {self.metric.drop:.4g} (limit {self.metric.max_drop:g})"
        j = self.deciding
        if j is None:
            return "no outputs compared"
        streamed = f" streamed over {self.stream_steps} steps" if j in self.streamed else ""
        return f"{j.name} ({j.kind.kind}){streamed}: {j.reason}"

    @property
    def excellent(self) -> bool:
        """Every continuous figure is excellent: the only doubt left is the sample count."""
        return all(j.excellent(self.tolerances) for j in self.judgements)

    @property
    def drop_points(self) -> Optional[float]:
        """The most decisions any output changed, in percentage points (None: no output counts decisions)."""
        losses = [j.loss_points.estimate * 100 for j in self.judgements if j.loss_points is not None]
        return round(max(losses), 4) if losses else None

    def _first_classes(self, key: str) -> Optional[float]:
        return next((j.figures.get(key) for j in self.outputs if j.kind.kind == "classes"), None)

    @property
    def top1_agreement(self) -> Optional[float]:
        return self._first_classes("top1_agreement")

    @property
    def top1_accuracy(self) -> Optional[float]:
        return self._first_classes("top1_accuracy")

    @property
    def reference_top1_accuracy(self) -> Optional[float]:
        return self._first_classes("reference_top1_accuracy")

    @property
    def min_cosine(self) -> float:
        """The lowest mean per-sample cosine of any output (streamed ones included)."""
        return min((j.cosine for j in self.judgements), default=1.0)

    cosine_similarity = min_cosine

    def to_dict(self) -> dict:
        first = self.outputs[0].figures if self.outputs else {}
        return {
            "samples": self.samples,
            "verdict": self.verdict,
            "reason": self.reason,
            "excellent": self.excellent,
            "worst_output": self.deciding.name if self.deciding else None,
            "drop_points": self.drop_points,
            "top1_agreement": self.top1_agreement,
            "top1_accuracy": self.top1_accuracy,
            "reference_top1_accuracy": self.reference_top1_accuracy,
            "max_abs_error": first.get("max_abs_error"),
            "mean_abs_error": first.get("mean_abs_error"),
            "cosine_similarity": self.cosine_similarity,
            "outputs": [j.to_dict() for j in self.outputs],
            "streamed": {"steps": self.stream_steps, "outputs": [j.to_dict() for j in self.streamed]} if self.streamed else None,
            "metric": self.metric.to_dict() if self.metric else None,
        }


def _samples(output: np.ndarray, real: int, whole: bool) -> np.ndarray:
    """One feed's output (its samples first) as rows to concatenate over samples: the real rows of a batch;
    for a whole-sample feed, the output itself where its axis 0 is a batch of 1, else one new row (a scalar,
    or a state [2, 1, H] whose axis 0 is not the batch)."""
    if not whole:
        return output[:real]
    return output if output.ndim and output.shape[0] == 1 else output[None]


def collect_outputs(predict: Predict, data: Dataset, batch: int,
                    on_batch: Optional[Callable[[int], None]] = None,
                    sample_axes: Sequence[int] = ()) -> List[np.ndarray]:
    """Run `predict` over the dataset in batches and concatenate each output over samples (float32).
    `sample_axes`: per output, the axis its samples sit on where it is not 0 (a time-major [T, N, C])."""
    chunks: List[List[np.ndarray]] = []
    for feed, real in data.batches(batch):
        outputs = [_samples(np.asarray(o, dtype=np.float32), real, data.whole)
                   for o in samples_first(predict(feed), () if data.whole else sample_axes)]
        if not chunks:
            chunks = [[] for _ in outputs]
        for store, out in zip(chunks, outputs):
            store.append(out)
        if on_batch:
            on_batch(real)
    return [np.concatenate(parts) for parts in chunks]


def decide_kinds(names: Sequence[str], reference: Sequence[np.ndarray], given: Mapping[str, str],
                 state_outputs: Sequence[str] = (), producers: Optional[Mapping[str, OutputGraph]] = None,
                 labels: Optional[np.ndarray] = None, input_hw: Optional[Tuple[int, int]] = None) -> List[OutputKind]:
    """Each output's kind: given, or claimed on evidence. `producers`: what the graph says of each output
    (`graph_evidence(onnx_path)`: the op making it, its Linear head); `labels`: the evaluation labels;
    `input_hw`: the image input's size. Each output also sees the shapes of the others (a heat map's
    size and offset maps), and, once the heat maps are known, which of them share its grid."""
    producers = producers or {}
    shapes = [tuple(ref.shape[1:]) for ref in reference]

    def kind_of(i: int, heatmaps=()) -> OutputKind:
        name, graph = names[i], producers.get(names[i])
        return infer_kind(name, reference[i], given.get(name), name in state_outputs, graph.op if graph else None,
                          labels, input_hw, graph.head if graph else None, shapes[:i] + shapes[i + 1:], heatmaps,
                          graph.pooled if graph else None)

    kinds = [kind_of(i) for i in range(len(reference))]
    heatmaps = [(names[i], shapes[i][1:]) for i, kind in enumerate(kinds) if kind.kind == "heatmap" and len(shapes[i]) == 3]
    if heatmaps:
        kinds = [kind_of(i, [h for h in heatmaps if h[0] != names[i]]) if kind.kind == "tensor" else kind
                 for i, kind in enumerate(kinds)]
    return kinds


def judge_all(names: Sequence[str], kinds: Sequence[OutputKind], reference: Sequence[np.ndarray],
              candidate: Sequence[np.ndarray], labels, tol: Tolerances) -> Tuple[Judgement, ...]:
    if len(reference) != len(candidate):
        raise ValueError(f"the artifact has {len(candidate)} outputs, the reference {len(reference)}")
    judged = []
    for name, kind, ref, cand in zip(names, kinds, reference, candidate):
        if ref.shape != cand.shape:
            raise ValueError(f"output {name} shapes differ: reference {ref.shape}, artifact {cand.shape}")
        judged.append(judge(name, kind, ref, cand, labels, tol))
    return tuple(judged)


def compare(reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray], labels: Optional[np.ndarray] = None,
            names: Optional[Sequence[str]] = None, kinds: Optional[Sequence[OutputKind]] = None,
            tolerances: Optional[Tolerances] = None, metric: Optional[UserMetric] = None) -> Accuracy:
    names = list(names) if names else [f"output_{i}" for i in range(len(reference))]
    kinds = list(kinds) if kinds else decide_kinds(names, reference, {}, labels=labels)
    tol = tolerances or Tolerances()
    judged = judge_all(names, kinds, reference, candidate, labels, tol)
    result = None
    if metric is not None:
        as_dict = lambda arrays: dict(zip(names, arrays))  # noqa: E731
        result = MetricResult(metric.spec, metric.score(as_dict(reference), as_dict(reference), labels),
                              metric.score(as_dict(reference), as_dict(candidate), labels), metric.max_drop)
    return Accuracy(samples=len(reference[0]) if reference else 0, outputs=judged, tolerances=tol, metric=result)
