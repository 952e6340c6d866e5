"""A metric the user brings (`--metric file.py:fn`) for what the output kinds do not cover.

`fn(reference, candidate, labels)` gets FP32's and the artifact's outputs as {output name: array
over the evaluation samples} and the labels (or None), and returns one number, higher is better.
The artifact fails when its score is more than `--max-metric-drop` below FP32's own.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Optional

import numpy as np

from edgeopt_agent.errors import UserError

from ..source.user_code import user_function

Metric = Callable[[Dict[str, np.ndarray], Dict[str, np.ndarray], Optional[np.ndarray]], float]


@dataclass(frozen=True)
class UserMetric:
    spec: str
    fn: Metric
    max_drop: Optional[float]

    def score(self, reference: Dict[str, np.ndarray], candidate: Dict[str, np.ndarray], labels) -> float:
        try:
            value = float(self.fn(reference, candidate, labels))
        except Exception as exc:
            raise UserError(f"--metric {self.spec} raised {type(exc).__name__}: {exc}") from exc
        if not math.isfinite(value):
            raise UserError(f"--metric {self.spec} returned {value}; it must return a finite number (higher is better)")
        return value


def load_metric(spec: str, max_drop: Optional[float]) -> UserMetric:
    path_text, sep, name = spec.rpartition(":")
    if not sep or Path(path_text).suffix != ".py" or not name:
        raise UserError(f"--metric '{spec}' must be file.py:function")
    return UserMetric(spec, user_function(Path(path_text), name, "--metric"), max_drop)
