"""Efficiency factors (measured / predicted) fitted from a board's measured artifacts.

The whole-graph factor is the geometric mean of measured / predicted. Where the measured
artifacts' predicted times are known per kernel kind (`Prediction.kind_ms`: "int8/depthwise" ->
ms, and the nodes' fixed dispatch costs as "overhead"), a factor per kind is fitted too: the
factors f_k that make sum_k f_k * predicted_k closest to measured (error of the logarithm, least
squares), each pulled towards the whole-graph factor by a ridge term, so a kind that few artifacts
spend time in keeps (nearly) the whole-graph factor and one that many do gets its own. Kinds that take under MIN_SHARE of every artifact's predicted time
are not fitted (they keep the whole-graph factor).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

MIN_SHARE = 0.05
RIDGE = 0.1  # weight of (f_k / whole-graph factor - 1)^2 against one artifact's squared relative error
_LIMITS = (0.1, 10.0)  # a kind's factor stays within these multiples of the whole-graph factor


@dataclass
class Fit:
    factor: Optional[float] = None  # whole graph; None: no data
    samples: int = 0
    kinds: Dict[str, float] = field(default_factory=dict)  # roof key -> factor, where fitted
    kind_samples: Dict[str, int] = field(default_factory=dict)  # roof key -> artifacts it took MIN_SHARE of

    def predicted(self, kind_ms: Mapping[str, float]) -> float:
        """Calibrated time of an artifact from its uncalibrated time per kind."""
        return sum(ms * self.kinds.get(kind, self.factor or 1.0) for kind, ms in kind_ms.items())


def whole_graph_factor(rows: Sequence[Mapping[str, Any]]) -> Optional[float]:
    ratios = [r["measured_ms"] / r["predicted_ms"] for r in rows if r["predicted_ms"] > 0 and r["measured_ms"] > 0]
    return math.exp(statistics.fmean(math.log(x) for x in ratios)) if ratios else None


def fit(rows: Sequence[Mapping[str, Any]], ridge: float = RIDGE) -> Fit:
    """Fit from rows of predicted_ms, measured_ms and (optionally) kind_ms.

    Per kind, in log space: the factors g_k (relative to the whole-graph factor F) minimize
    sum_i log(F * (sum_k g_k p_ik + rest_i) / m_i)^2 + ridge * sum_k log(g_k)^2, so an artifact 3x too
    slow weighs as much as one 3x too fast, a kind the data cannot separate stays at F, and no factor
    turns negative. Solved by Gauss-Newton from g = 1.
    """
    usable = [r for r in rows if r["predicted_ms"] > 0 and r["measured_ms"] > 0]
    factor = whole_graph_factor(usable)
    if factor is None:
        return Fit()
    split = [r for r in usable if sum((r.get("kind_ms") or {}).values()) > 0]
    counts: Dict[str, int] = {}
    for r in split:
        total = sum(r["kind_ms"].values())
        for kind, ms in r["kind_ms"].items():
            if ms >= MIN_SHARE * total:
                counts[kind] = counts.get(kind, 0) + 1
    kinds = sorted(counts)
    if len(split) < 2 or not kinds:
        return Fit(factor, len(usable))
    p = np.array([[r["kind_ms"].get(kind, 0.0) for kind in kinds] for r in split])
    rest = np.array([sum(ms for kind, ms in r["kind_ms"].items() if kind not in counts) for r in split])
    target = np.log(np.array([r["measured_ms"] for r in split]) / factor)
    low, high = np.log(_LIMITS[0]), np.log(_LIMITS[1])
    log_g = np.zeros(len(kinds))
    weight = math.sqrt(ridge)
    for _ in range(50):
        g = np.exp(log_g)
        predicted = p @ g + rest
        residual = np.concatenate([np.log(predicted) - target, weight * log_g])
        jacobian = np.vstack([p * g / predicted[:, None], weight * np.eye(len(kinds))])
        step = np.linalg.lstsq(jacobian, -residual, rcond=None)[0]
        log_g = np.clip(log_g + step, low, high)
        if np.max(np.abs(step)) < 1e-9:
            break
    return Fit(factor, len(usable), {kind: float(factor * math.exp(log_g[j])) for j, kind in enumerate(kinds)}, counts)


def scoped(rows: Sequence[Mapping[str, Any]], precision: str) -> tuple:
    """The rows to fit a precision's factors from: those at that precision where there are some, else all."""
    same: List[Mapping[str, Any]] = [r for r in rows if r["precision"] == precision]
    return (same, precision) if same else (list(rows), "all precisions")
