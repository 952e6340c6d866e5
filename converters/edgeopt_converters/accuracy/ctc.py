"""Greedy CTC decoding and edit distance: what a reader of a CTC head's output sees.

A CTC head scores every time step over an alphabet plus a blank. The text is the per-step argmax
with repeated symbols collapsed and blanks dropped, so most step changes (blank against a repeat,
a letter one step earlier) change nothing a reader sees. Blank is the first class (PaddleOCR,
torchaudio, wav2vec2) or the last (Keras's ctc_batch_cost and ctc_decode); FP32's own output says
which: the blank wins more steps than any other class.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np

MIN_BLANK_SHARE = 0.2  # a blank separates symbols: it wins at least this share of all steps


def class_shares(steps: np.ndarray, classes: int) -> np.ndarray:
    """The share of all time steps each class wins, from per-step argmax indices [N, T]."""
    counts = np.bincount(steps.ravel(), minlength=classes).astype(np.float64)
    return counts / max(int(steps.size), 1)


def likely_blank(shares: np.ndarray) -> int:
    """Of the first and the last class, the one that wins more steps (`shares` as class_shares gives them)."""
    return 0 if shares[0] >= shares[-1] else len(shares) - 1


def blank_index(shares: np.ndarray) -> Optional[int]:
    """The blank (first or last class) if FP32's steps read like CTC output, else None.

    The blank wins more steps than any other class and at least MIN_BLANK_SHARE of them.
    """
    blank = likely_blank(shares)
    others = np.delete(shares, blank)
    if shares[blank] < MIN_BLANK_SHARE or (others.size and shares[blank] <= others.max()):
        return None
    return blank


def collapse(steps: Sequence[int], blank: int) -> List[int]:
    """Greedy CTC decoding of one sample's per-step argmax: repeats merged, blanks dropped."""
    symbols, previous = [], None
    for step in steps:
        step = int(step)
        if step != previous and step != blank:
            symbols.append(step)
        previous = step
    return symbols


def edit_distance(a: Sequence, b: Sequence) -> int:
    """Levenshtein distance: insertions, deletions and substitutions turning `a` into `b`."""
    row = list(range(len(b) + 1))
    for i, item in enumerate(a, 1):
        diagonal, row[0] = row[0], i
        for j, other in enumerate(b, 1):
            diagonal, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, diagonal + (item != other))
    return row[-1]
