"""Class scores told by the head that makes them, where neither labels nor a softmax say so.

A Linear over pooled features (graph_heads.py) making [N, C] scores is a classifier's head (torchvision's
MobileNetV2 exports GlobalAveragePool, Flatten, Gemm to 1000 logits) when FP32's argmax also behaves as
a classifier's across the evaluation samples: it picks several classes (a constant winner says nothing).
A few columns over pooled features are as often a regression (DNSMOS's SIG/BAK/OVRL scores), so up to
SMALL_HEAD columns the scores must also compete: one rises where the others fall, as logits trained
against each other do, where a sample's quality scores rise together.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from .evidence import Evidence, Hints, mean_column_correlation

MIN_WINNERS = 3  # classes FP32's argmax picks across the samples (all of them where C is smaller)
SMALL_HEAD = 8  # up to this many columns, the scores must compete as well
# Competing columns: a mean pairwise correlation at or below -COMPETE / (C - 1). Scores whose rows are
# centred on zero have -1 / (C - 1) (binary logits: -1); a regression's columns rise together (> 0).
COMPETE = 0.5


def competing(ref: np.ndarray) -> Optional[float]:
    """The columns' mean pairwise correlation where it is as class scores' is, else None."""
    correlation = mean_column_correlation(ref)
    if correlation is None or correlation > -COMPETE / (ref.shape[1] - 1):
        return None
    return correlation


def structural_evidence(reference: np.ndarray, hints: Hints) -> Optional[Evidence]:
    head = hints.head
    if head is None or head.pooled is None or reference.ndim != 2 or reference.shape[1] < 2 or not len(reference):
        return None
    if not np.isfinite(reference).all():
        return None
    classes = reference.shape[1]
    winners = len(np.unique(reference.argmax(axis=1)))
    if winners < min(MIN_WINNERS, classes):
        return None
    said = (f"a {head.layer} over {head.pooled}-pooled features makes [N, {classes}] scores whose FP32 argmax "
            f"picks {winners} classes over {len(reference)} samples")
    if classes <= SMALL_HEAD:
        correlation = competing(reference)
        if correlation is None:
            return None
        said += f", scores competing (mean correlation {correlation:.2f})"
    return Evidence(said + ": a classifier's head")
