"""Accuracy of an artifact against the FP32 reference on the evaluation data."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, List, Mapping, Optional, Sequence

import numpy as np

from .tensors import Dataset

Predict = Callable[[Mapping[str, np.ndarray]], Sequence[np.ndarray]]


@dataclass(frozen=True)
class Accuracy:
    samples: int
    max_abs_error: float
    mean_abs_error: float
    cosine_similarity: float  # mean over samples of the first output
    top1_agreement: Optional[float]  # percent of samples whose argmax matches FP32
    top1_accuracy: Optional[float]  # percent, when labels are given
    reference_top1_accuracy: Optional[float]

    @property
    def drop_points(self) -> Optional[float]:
        """Accuracy lost against FP32 in percentage points (labels), else 100 - top-1 agreement."""
        if self.top1_accuracy is not None and self.reference_top1_accuracy is not None:
            return round(self.reference_top1_accuracy - self.top1_accuracy, 4)
        if self.top1_agreement is not None:
            return round(100.0 - self.top1_agreement, 4)
        return None

    def to_dict(self) -> dict:
        return {**asdict(self), "drop_points": self.drop_points}


def collect_outputs(predict: Predict, data: Dataset, batch: int,
                    on_batch: Optional[Callable[[int], None]] = None) -> List[np.ndarray]:
    """Run `predict` over the dataset in batches and concatenate each output over samples."""
    chunks: List[List[np.ndarray]] = []
    for feed in data.batches(batch):
        outputs = [np.asarray(o, dtype=np.float64) for o in predict(feed)]
        if not chunks:
            chunks = [[] for _ in outputs]
        for store, out in zip(chunks, outputs):
            store.append(out)
        if on_batch:
            on_batch(len(next(iter(feed.values()))))
    return [np.concatenate(parts) for parts in chunks]


def _top1(output: np.ndarray) -> Optional[np.ndarray]:
    """Class indices for a [N, classes] output; None for outputs that are not class scores."""
    if output.ndim != 2 or output.shape[-1] < 2:
        return None
    return output.argmax(-1)


def compare(reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray],
            labels: Optional[np.ndarray] = None) -> Accuracy:
    ref, cand = reference[0], candidate[0]
    if ref.shape != cand.shape:
        raise ValueError(f"output shapes differ: reference {ref.shape}, artifact {cand.shape}")
    diff = np.abs(ref - cand)
    r, c = ref.reshape(len(ref), -1), cand.reshape(len(cand), -1)
    norms = np.linalg.norm(r, axis=1) * np.linalg.norm(c, axis=1)
    cosine = np.where(norms > 0, (r * c).sum(axis=1) / np.where(norms > 0, norms, 1), 1.0)
    ref_top, cand_top = _top1(ref), _top1(cand)
    agreement = accuracy = ref_accuracy = None
    if ref_top is not None:
        agreement = float((ref_top == cand_top).mean() * 100)
        if labels is not None:
            accuracy = float((cand_top == labels).mean() * 100)
            ref_accuracy = float((ref_top == labels).mean() * 100)
    return Accuracy(
        samples=len(ref),
        max_abs_error=float(diff.max()),
        mean_abs_error=float(diff.mean()),
        cosine_similarity=float(cosine.mean()),
        top1_agreement=agreement,
        top1_accuracy=accuracy,
        reference_top1_accuracy=ref_accuracy,
    )
