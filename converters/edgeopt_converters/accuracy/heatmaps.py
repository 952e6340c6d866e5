"""Object-centre heat maps (CenterNet, CenterFace): [N, C, H, W] sigmoid maps whose local maxima are
the detections, beside maps of the same grid that give each centre its size and offset.

What a user gets from such a map is its peaks: a cell at or above the score threshold that is the
maximum of its 3x3 neighbourhood (CenterNet's max-pool NMS). The judge finds FP32's peaks and the
artifact's and counts those the artifact misses and those it adds, with the detections' score band
and systematic-drop test (detections.py): each peak is a PEAK_BOX x PEAK_BOX cell square around its
cell, so a peak one cell away in any direction (two along an axis) is the same peak moved, reported
by the mean IoU. A mask's IoU would reward a map that keeps its blobs and moves every centre.

Evidence: values in [0, 1] made by a Sigmoid (or with a sigmoid's spread), peaks that are sparse
(few cells at or above the threshold: a centre's Gaussian, not an object's area as a mask has), no
softmax across channels (a per-pixel class map is a mask), and sibling outputs on the same H x W grid.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from edgeopt_agent.errors import UserError

from .detections import SCORE_THRESHOLD, match_decoded
from .evidence import Evidence, Hints, in_unit_range, per_sample, sigmoid_like, softmax_rows
from .grids import probabilities
from .judges import Judgement, common_figures, judge_found

MIN_SIDE = 8
MAX_HOT_SHARE = 0.05  # cells at or above the threshold, over all maps: a centre map is sparse
PEAK_BOX = 6.0  # cells: the square a peak is matched by (module doc)


def peaks(maps: np.ndarray) -> np.ndarray:
    """[N, C, H, W] with every cell that is not the maximum of its 3x3 neighbourhood set to 0 (same dtype)."""
    padded = np.pad(maps, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    height, width = maps.shape[2:]
    neighbourhood = np.full(maps.shape, -np.inf, dtype=maps.dtype)
    for dy in range(3):
        for dx in range(3):
            np.maximum(neighbourhood, padded[:, :, dy:dy + height, dx:dx + width], out=neighbourhood)
    return np.where(maps >= neighbourhood, maps, 0).astype(maps.dtype, copy=False)


def heatmap_evidence(reference: np.ndarray, hints: Hints) -> Optional[Evidence]:
    shape = per_sample(reference)
    if len(shape) != 3 or min(shape[1:]) < MIN_SIDE or not in_unit_range(reference):
        return None
    channels, height, width = shape
    siblings = [s for s in hints.siblings if len(s) == 3 and tuple(s[1:]) == (height, width)]
    if not siblings:
        return None
    if not (hints.producer in ("Sigmoid", "HardSigmoid") or sigmoid_like(reference)):
        return None
    if channels >= 2 and (hints.producer in ("Softmax", "LogSoftmax") or softmax_rows(reference, axis=1)):
        return None
    hot = float((reference >= SCORE_THRESHOLD).mean())
    found = sum(int((peaks(reference[i:i + 1]) >= SCORE_THRESHOLD).sum()) for i in range(len(reference)))
    if not found or hot > MAX_HOT_SHARE:
        return None
    beside = ", ".join(f"[N, {s[0]}, {height}, {width}]" for s in siblings)
    return Evidence(f"[N, {channels}, {height}, {width}] sigmoid map with {found} sparse peaks at or above "
                    f"{SCORE_THRESHOLD:g} ({hot:.2%} of cells) beside {beside} on the same grid: object centres")


def _as_detections(maps: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """([N, H*W, 4] xywh cell squares, [N, H*W, C] peak scores) for detections.match_decoded."""
    if maps.ndim != 4:
        raise UserError(f"a heatmap is [N, C, H, W]; this output is {list(maps.shape)}: give it another "
                        f"--output-kind")
    samples, channels, height, width = maps.shape
    ys, xs = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
    boxes = np.stack([xs, ys, np.full_like(xs, PEAK_BOX), np.full_like(ys, PEAK_BOX)], -1).reshape(1, -1, 4)
    scores = peaks(maps).reshape(samples, channels, -1).transpose(0, 2, 1)
    return np.broadcast_to(boxes.astype(np.float64), (samples, height * width, 4)), scores


def judge_heatmap(name, kind, ref, cand, labels, tol) -> Judgement:
    """Peaks found and added; a map of raw logits (given as a heat map) is read through a sigmoid, decided on FP32's."""
    figures = common_figures(ref, cand)
    sigmoided = in_unit_range(ref)
    ref_boxes, ref_scores = _as_detections(probabilities(ref, sigmoided).astype(np.float32))
    cand_boxes, cand_scores = _as_detections(probabilities(cand, sigmoided).astype(np.float32))
    found = match_decoded(ref_boxes, ref_scores, cand_boxes, cand_scores)
    return judge_found(name, kind, figures, found, tol, things="peaks")
