"""Accuracy of an artifact against the FP32 reference on the evaluation data."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .tensors import Dataset

Predict = Callable[[Mapping[str, np.ndarray]], Sequence[np.ndarray]]


@dataclass(frozen=True)
class Accuracy:
    samples: int
    max_abs_error: float  # of the first output, like the cosine and top-1 figures
    mean_abs_error: float
    cosine_similarity: float  # mean over samples
    top1_agreement: Optional[float]  # percent of samples whose argmax matches FP32
    top1_accuracy: Optional[float]  # percent, when labels are given
    reference_top1_accuracy: Optional[float]
    outputs: Tuple[Dict[str, float], ...] = ()  # max/mean abs error and cosine of every output

    @property
    def drop_points(self) -> Optional[float]:
        """Accuracy lost against FP32 in percentage points (labels), else 100 - top-1 agreement.

        None when the first output is not class scores ([N, classes]): then there is no top-1.
        """
        if self.top1_accuracy is not None and self.reference_top1_accuracy is not None:
            return round(self.reference_top1_accuracy - self.top1_accuracy, 4)
        if self.top1_agreement is not None:
            return round(100.0 - self.top1_agreement, 4)
        return None

    @property
    def min_cosine(self) -> float:
        return min((o["cosine_similarity"] for o in self.outputs), default=self.cosine_similarity)

    def to_dict(self) -> dict:
        return {**asdict(self), "outputs": [dict(o) for o in self.outputs], "drop_points": self.drop_points}


def collect_outputs(predict: Predict, data: Dataset, batch: int,
                    on_batch: Optional[Callable[[int], None]] = None) -> List[np.ndarray]:
    """Run `predict` over the dataset in batches and concatenate each output over samples (float32)."""
    chunks: List[List[np.ndarray]] = []
    for feed, real in data.batches(batch):
        outputs = [_samples(np.asarray(o, dtype=np.float32), real, data.whole) for o in predict(feed)]
        if not chunks:
            chunks = [[] for _ in outputs]
        for store, out in zip(chunks, outputs):
            store.append(out)
        if on_batch:
            on_batch(real)
    return [np.concatenate(parts) for parts in chunks]


def _samples(output: np.ndarray, real: int, whole: bool) -> np.ndarray:
    """One feed's output as rows to concatenate over samples: the real rows of a batch; for a
    whole-sample feed, the output itself where its axis 0 is a batch of 1, else one new row
    (a scalar, or a state [2, 1, H] whose axis 0 is not the batch)."""
    if not whole:
        return output[:real]
    return output if output.ndim and output.shape[0] == 1 else output[None]


def _top1(output: np.ndarray) -> Optional[np.ndarray]:
    """Class indices for a [N, classes] output; None for outputs that are not class scores."""
    if output.ndim != 2 or output.shape[-1] < 2:
        return None
    return output.argmax(-1)


def _cosine(ref: np.ndarray, cand: np.ndarray) -> float:
    """Mean per-sample cosine similarity; two all-zero samples agree, one all-zero sample does not."""
    r = ref.reshape(len(ref), -1).astype(np.float64)
    c = cand.reshape(len(cand), -1).astype(np.float64)
    nr, nc = np.linalg.norm(r, axis=1), np.linalg.norm(c, axis=1)
    both = nr * nc
    cosine = np.where(both > 0, (r * c).sum(axis=1) / np.where(both > 0, both, 1.0),
                      np.where((nr == 0) & (nc == 0), 1.0, 0.0))
    return float(cosine.mean())


def _output_errors(ref: np.ndarray, cand: np.ndarray) -> Dict[str, float]:
    diff = np.abs(ref.astype(np.float64) - cand.astype(np.float64))
    return {"max_abs_error": float(diff.max()) if diff.size else 0.0,
            "mean_abs_error": float(diff.mean()) if diff.size else 0.0,
            "cosine_similarity": _cosine(ref, cand)}


def compare(reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray],
            labels: Optional[np.ndarray] = None) -> Accuracy:
    if len(reference) != len(candidate):
        raise ValueError(f"the artifact has {len(candidate)} outputs, the reference {len(reference)}")
    per_output = []
    for i, (ref, cand) in enumerate(zip(reference, candidate)):
        if ref.shape != cand.shape:
            raise ValueError(f"output {i} shapes differ: reference {ref.shape}, artifact {cand.shape}")
        per_output.append(_output_errors(ref, cand))
    ref, cand = reference[0], candidate[0]
    ref_top, cand_top = _top1(ref), _top1(cand)
    agreement = accuracy = ref_accuracy = None
    if ref_top is not None:
        agreement = float((ref_top == cand_top).mean() * 100)
        if labels is not None:
            accuracy = float((cand_top == labels).mean() * 100)
            ref_accuracy = float((ref_top == labels).mean() * 100)
    first = per_output[0]
    return Accuracy(
        samples=len(ref),
        max_abs_error=first["max_abs_error"],
        mean_abs_error=first["mean_abs_error"],
        cosine_similarity=first["cosine_similarity"],
        top1_agreement=agreement,
        top1_accuracy=accuracy,
        reference_top1_accuracy=ref_accuracy,
        outputs=tuple(per_output),
    )
