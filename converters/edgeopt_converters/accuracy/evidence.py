"""Positive evidence that an output is of some kind: what the evidence is and the checks on values.

A kind is claimed only on evidence: the output's name, its FP32 values, the ONNX op that produces
it, the evaluation labels, or a known head layout. `Hints` carries what the pipeline knows besides
the values.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Tuple

import numpy as np

from .graph_heads import LinearHead

SUM_TO_ONE_ATOL = 1e-3
UNIT_NORM_ATOL = 1e-2
SIGMOID_TAIL = 0.05  # a sigmoid's values sit within this of 0 or 1 ...
SIGMOID_TAIL_SHARE = 0.5  # ... for at least this share of them


@dataclass(frozen=True)
class Evidence:
    sentence: str  # a human sentence: what was seen
    facts: Mapping[str, Any] = field(default_factory=dict)  # what the judge needs from it (a grid's layout)


@dataclass(frozen=True)
class Hints:
    """What is known of an output besides its name and FP32 values."""
    producer: Optional[str] = None  # op type of the ONNX node producing it (graph_evidence)
    labels: Optional[np.ndarray] = None  # the evaluation labels
    input_hw: Optional[Tuple[int, int]] = None  # the model's image input height and width
    state: bool = False  # fed back as an input
    head: Optional[LinearHead] = None  # the Linear layer making it, and whether it reads pooled features
    pooled: Optional[str] = None  # a pooling op (ReduceMean, GlobalAveragePool) on its way out, with no layer after
    siblings: Tuple[Tuple[int, ...], ...] = ()  # the per-sample shapes of the model's other outputs
    heatmaps: Tuple[Tuple[str, Tuple[int, int]], ...] = ()  # other outputs claimed heat maps: (name, (H, W))


def name_hint(name: str, pattern: str) -> Optional[str]:
    """The part of `name` (lower-cased) that matches `pattern`, or None."""
    found = re.search(pattern, name.lower())
    return found.group(0) if found else None


def in_unit_range(ref: np.ndarray) -> bool:
    return ref.size > 0 and bool(np.isfinite(ref).all()) and float(ref.min()) >= 0.0 and float(ref.max()) <= 1.0


def rows_sum_to_one(ref: np.ndarray, axis: int = -1) -> bool:
    """Softmax probabilities: in [0, 1], every row along `axis` sums to 1."""
    return in_unit_range(ref) and bool(np.allclose(ref.astype(np.float64).sum(axis), 1.0, atol=SUM_TO_ONE_ATOL))


def softmax_rows(ref: np.ndarray, axis: int = -1) -> bool:
    """Probabilities or log-probabilities of a softmax along `axis`."""
    if rows_sum_to_one(ref, axis):
        return True
    return ref.size > 0 and float(ref.max()) <= 0.0 and rows_sum_to_one(np.exp(ref.astype(np.float64)), axis)


def mean_column_correlation(values: np.ndarray) -> Optional[float]:
    """The mean correlation over samples between every two columns of [N, K] values (K >= 2), leaving
    out constant columns; None where fewer than two columns vary or there are fewer than 3 samples."""
    values = values.reshape(len(values), -1).astype(np.float64)
    values = values[:, values.std(axis=0) > 0]
    if values.shape[1] < 2 or len(values) < 3:
        return None
    matrix = np.corrcoef(values, rowvar=False)
    return float(matrix[np.triu_indices_from(matrix, k=1)].mean())


def unit_norm_rows(ref: np.ndarray) -> bool:
    if ref.ndim != 2 or not len(ref):
        return False
    norms = np.linalg.norm(ref.astype(np.float64), axis=1)
    return bool(np.allclose(norms, 1.0, atol=UNIT_NORM_ATOL))


def sigmoid_like(ref: np.ndarray) -> bool:
    """In [0, 1], most values near 0 or 1 (a sigmoid's saturated ends) and not only 0 and 1 (a binary map)."""
    if not in_unit_range(ref):
        return False
    values = ref.astype(np.float64).ravel()
    tails = (values <= SIGMOID_TAIL) | (values >= 1 - SIGMOID_TAIL)
    exact = (values == 0) | (values == 1)
    return bool(tails.mean() >= SIGMOID_TAIL_SHARE and not exact.all())


def class_labels(labels: Optional[np.ndarray], ref: np.ndarray) -> bool:
    """Labels [N] of integers in [0, C) for an output [N, C]."""
    if labels is None or ref.ndim != 2:
        return False
    labels = np.asarray(labels)
    if labels.ndim != 1 or len(labels) != len(ref) or not len(labels):
        return False
    if labels.dtype.kind not in "iu" and not np.array_equal(labels, np.round(labels)):
        return False
    return float(labels.min()) >= 0 and float(labels.max()) < ref.shape[1]


def per_sample(ref: np.ndarray) -> Tuple[int, ...]:
    return tuple(ref.shape[1:])
