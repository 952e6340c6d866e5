"""Small continuous heads: a [N, K] score (DNSMOS's SIG/BAK/OVRL, an age, a quality), K up to MAX_COLUMNS.

Evidence: a Linear layer makes the output (graph_heads.py) or its name says a score, and its values
are continuous (each column takes many values over the samples), not a distribution (rows summing to
1), not made by a Sigmoid or Softmax (probabilities), and its columns do not compete as class scores
do (class_heads.py).

Judged by what a score is used for: its error against FP32's spread across the samples (each column's
standard deviation: an error of 0.1 of it is 20 dB on what varies) and whether the samples keep their
order (Spearman's rank correlation per column, the worst column; Kendall's tau reported beside).
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from .class_heads import competing
from .evidence import Evidence, Hints, name_hint, softmax_rows
from .judges import FAILED, OK, Judgement, common_figures
from .value_judges import coordinate_spread

MAX_COLUMNS = 8
MIN_SAMPLES = 8  # fewer samples show no spread to judge against
MIN_DISTINCT = 0.5  # share of samples with a value of their own, in every column: continuous
NAMES = r"mos|quality|rating|regress|(^|[^a-z])(sig|bak|ovrl?|p808|age)($|[^a-z])"
ACTIVATIONS = ("Sigmoid", "HardSigmoid", "Softmax", "LogSoftmax")
KENDALL_CHUNK = 512


def regression_evidence(name: str, reference: np.ndarray, hints: Hints) -> Optional[Evidence]:
    columns = int(np.prod(reference.shape[1:])) if reference.ndim > 1 else 1
    if not 1 <= columns <= MAX_COLUMNS or len(reference) < MIN_SAMPLES or not np.isfinite(reference).all():
        return None
    values = reference.reshape(len(reference), columns).astype(np.float64)
    if hints.producer in ACTIVATIONS or (columns > 1 and softmax_rows(values)):
        return None
    if not continuous(values) or (columns > 1 and competing(values) is not None):
        return None
    said = f"{columns} continuous value{'s' if columns > 1 else ''} per sample, not a distribution"
    if hints.head is not None:
        return Evidence(f"a {hints.head.layer} makes {said}: a regression head")
    hint = name_hint(name, NAMES)
    return Evidence(f"name '{name}' ('{hint.strip('_-./: ')}') and {said}") if hint else None


def continuous(values: np.ndarray) -> bool:
    """Every column takes many values over the samples, not only whole numbers."""
    if np.array_equal(values, np.round(values)):
        return False
    distinct = [len(np.unique(column)) for column in values.T]
    return min(distinct) >= MIN_DISTINCT * len(values)


def ranks(values: np.ndarray) -> np.ndarray:
    """Ranks along axis 0, ties sharing their mean rank."""
    order = np.argsort(values, axis=0, kind="stable")
    ranked = np.empty_like(values, dtype=np.float64)
    for j in range(values.shape[1]):
        column = values[order[:, j], j]
        position = np.arange(len(column), dtype=np.float64)
        starts = np.r_[0, np.flatnonzero(np.diff(column)) + 1]
        ends = np.r_[starts[1:], len(column)]
        for start, end in zip(starts, ends):
            position[start:end] = (start + end - 1) / 2
        ranked[order[:, j], j] = position
    return ranked


def spearman(ref: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """Spearman's rank correlation per column ([N, K] each); nan where FP32's column is constant."""
    r, c = ranks(ref), ranks(cand)
    r, c = r - r.mean(0), c - c.mean(0)
    norm = np.sqrt((r * r).sum(0) * (c * c).sum(0))
    return np.where(norm > 0, (r * c).sum(0) / np.where(norm > 0, norm, 1.0),
                    np.where(ref.std(0) > 0, 0.0, np.nan))


def kendall(ref: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """Kendall's tau-b per column; nan where FP32's column is constant."""
    taus = []
    for j in range(ref.shape[1]):
        agree = ref_pairs = cand_pairs = 0.0
        for start in range(0, len(ref), KENDALL_CHUNK):
            r = np.sign(ref[start:start + KENDALL_CHUNK, None, j] - ref[None, :, j])
            c = np.sign(cand[start:start + KENDALL_CHUNK, None, j] - cand[None, :, j])
            agree, ref_pairs, cand_pairs = agree + (r * c).sum(), ref_pairs + (r * r).sum(), cand_pairs + (c * c).sum()
        taus.append(agree / np.sqrt(ref_pairs * cand_pairs) if ref_pairs and cand_pairs else
                    (np.nan if not ref_pairs else 0.0))
    return np.asarray(taus)


def spread_errors(ref: np.ndarray, cand: np.ndarray, spread: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(|error|, |error| / spread) of [N, K] values; an error where FP32 has no spread is infinite."""
    error = np.abs(ref - cand)
    return error, np.where(spread > 0, error / np.where(spread > 0, spread, 1.0), np.where(error > 0, np.inf, 0.0))


def judge_regression(name, kind, ref, cand, tol) -> Judgement:
    figures = common_figures(ref, cand)
    columns = int(np.prod(ref.shape[1:])) if ref.ndim > 1 else 1
    r = ref.reshape(len(ref), columns).astype(np.float64)
    c = cand.reshape(len(cand), columns).astype(np.float64)
    spread = coordinate_spread(r) if len(r) else np.ones(columns)
    _, relative = spread_errors(r, c, spread)
    rho = spearman(r, c) if len(r) >= 3 else np.full(columns, np.nan)
    tau = kendall(r, c) if len(r) >= 3 else np.full(columns, np.nan)
    worst_rho = float(np.nanmin(rho)) if not np.isnan(rho).all() else None
    figures.update(mean_spread=float(spread.mean()),
                   spread_error_mean=float(relative.mean()) if relative.size else 0.0,
                   spread_error_p95=float(np.percentile(relative, 95)) if relative.size else 0.0,
                   spearman_worst=worst_rho,
                   kendall_worst=float(np.nanmin(tau)) if not np.isnan(tau).all() else None)
    ok = (figures["spread_error_mean"] <= tol.max_spread_error and figures["spread_error_p95"] <= tol.max_spread_error_p95
          and (worst_rho is None or worst_rho >= tol.min_rank_correlation))
    ranked = ("samples too few or too alike to rank" if worst_rho is None else
              f"rank correlation with FP32 {worst_rho:.4f} (Spearman, worst column; limit {tol.min_rank_correlation:g}; "
              f"Kendall {figures['kendall_worst']:.4f})")
    shown = (f"error {figures['spread_error_mean']:.3f} of FP32's spread across samples on average, "
             f"{figures['spread_error_p95']:.3f} at the 95th percentile (limits {tol.max_spread_error:g} and "
             f"{tol.max_spread_error_p95:g}); {ranked}")
    return Judgement(name, kind, OK if ok else FAILED, shown, figures)
