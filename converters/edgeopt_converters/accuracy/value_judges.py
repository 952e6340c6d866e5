"""Judges of real values: a tensor nothing more is known of, and coordinates in their own units."""
from __future__ import annotations

import numpy as np

from .judges import FAILED, OK, Judgement, Tolerances, common_figures


def relative_errors(ref: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """Per-sample |cand - ref| / |ref| (L2); a zero sample matched exactly counts 0, missed counts inf."""
    r = ref.reshape(len(ref), -1).astype(np.float64)
    error = np.linalg.norm(r - cand.reshape(len(cand), -1).astype(np.float64), axis=1)
    norm = np.linalg.norm(r, axis=1)
    return np.where(norm > 0, error / np.where(norm > 0, norm, 1.0), np.where(error > 0, np.inf, 0.0))


def judge_tensor(name, kind, ref, cand, tol: Tolerances) -> Judgement:
    """SQNR over the whole output and the 95th percentile of per-sample relative error."""
    figures = common_figures(ref, cand)
    relative = relative_errors(ref, cand) if len(ref) else np.zeros(1)
    figures["relative_error_mean"] = float(relative.mean())
    figures["relative_error_p95"] = float(np.percentile(relative, 95))
    sqnr = figures["sqnr_db"]
    ok = (sqnr is None or sqnr >= tol.min_sqnr_db) and figures["relative_error_p95"] <= tol.max_relative_error
    shown = (f"SQNR {'exact' if sqnr is None else f'{sqnr:.1f} dB'} (limit {tol.min_sqnr_db:g} dB), per-sample "
             f"relative error {figures['relative_error_p95']:.3g} at the 95th percentile "
             f"(limit {tol.max_relative_error:g})")
    return Judgement(name, kind, OK if ok else FAILED, shown, figures)


def coordinate_spread(ref: np.ndarray) -> np.ndarray:
    """Each coordinate's standard deviation over samples (where that is zero, that of all values)."""
    values = ref.reshape(len(ref), -1).astype(np.float64)
    spread = values.std(axis=0)
    overall = float(values.std())
    return np.where(spread > 0, spread, overall)


def judge_coordinates(name, kind, ref, cand, tol: Tolerances) -> Judgement:
    """Boxes, landmarks, keypoints: |error| in the output's own units over FP32's spread, mean and 95th percentile."""
    figures = common_figures(ref, cand)
    error = np.abs(ref.reshape(len(ref), -1).astype(np.float64) - cand.reshape(len(cand), -1).astype(np.float64))
    spread = coordinate_spread(ref) if len(ref) else np.ones(1)
    relative = np.where(spread > 0, error / np.where(spread > 0, spread, 1.0), np.where(error > 0, np.inf, 0.0))
    figures.update(p95_abs_error=float(np.percentile(error, 95)) if error.size else 0.0,
                   mean_spread=float(spread.mean()),
                   coordinate_error_mean=float(relative.mean()) if relative.size else 0.0,
                   coordinate_error_p95=float(np.percentile(relative, 95)) if relative.size else 0.0)
    ok = (figures["coordinate_error_mean"] <= tol.max_coordinate_error
          and figures["coordinate_error_p95"] <= tol.max_coordinate_error_p95)
    shown = (f"coordinates moved {figures['mean_abs_error']:.3g} on average, {figures['p95_abs_error']:.3g} at the "
             f"95th percentile (output units): {figures['coordinate_error_mean']:.3f} and "
             f"{figures['coordinate_error_p95']:.3f} of FP32's spread {figures['mean_spread']:.3g} "
             f"(limits {tol.max_coordinate_error:g} and {tol.max_coordinate_error_p95:g})")
    return Judgement(name, kind, OK if ok else FAILED, shown, figures)
