"""Raw YOLO grids [N, A, 5+C] (YOLOv5, YOLOX): box xywh, objectness, class scores per anchor, not decoded.

A detection's score is objectness times its class score; judging the grid as a [N, A, 4+C] head
would read objectness as a class and count every anchor that merely holds an object. The grid is
decoded (score = objectness x class score, then the threshold and NMS of detections.py) and its
parts (boxes, objectness, class scores, decoded scores) are judged apart.

Evidence, besides the shape: channel 4 co-fires with the class channels as objectness does (where
it is high the best class score is high, where it is low the best class score is low, which a
YOLOv8 head's class 0 does not), and the anchor count is the grid of the model's input at strides
8/16/32 (one anchor per cell: YOLOX; three: YOLOv5, which nothing else has). YOLOX exported without
its decode gives boxes as offsets in cells; those are decoded with the grid when the input size is
known.
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

import numpy as np

from .detections import match_decoded
from .evidence import Evidence, in_unit_range
from .judges import common_figures, judge_found, part_figures
from .layouts import GRID_STRIDES, MIN_ANCHORS, anchors_per_cell

OBJECTNESS = 4
HIGH = 0.5  # objectness at or above this: the anchor holds an object
LOW = 0.1  # objectness below this: background
MIN_COFIRE = 0.3  # best class score at the median where objectness is high ...
COFIRE_RATIO = 2.0  # ... and at least this many times the median where it is low
UNDECODED_BOX = 16.0  # boxes all within this (cells, log sizes) on an input of pixels: not decoded


class GridParts(NamedTuple):
    boxes: np.ndarray  # [N, A, 4] xywh
    objectness: np.ndarray  # [N, A]
    class_scores: np.ndarray  # [N, A, C]
    scores: np.ndarray  # [N, A, C] objectness x class score


def probabilities(values: np.ndarray, sigmoided: Optional[bool] = None) -> np.ndarray:
    """Values as they are when already through a sigmoid, else through one; `sigmoided` None: when in [0, 1]."""
    values = values.astype(np.float64)
    if sigmoided is None:
        sigmoided = in_unit_range(values)
    return values if sigmoided else 1.0 / (1.0 + np.exp(-values))


def _cofiring(objectness: np.ndarray, classes: np.ndarray) -> Optional[Tuple[float, float, int]]:
    """(median best class score where objectness is high, where it is low, anchors high), or None."""
    best = classes.max(-1)
    high, low = objectness >= HIGH, objectness < LOW
    if not high.any() or not low.any():
        return None
    return float(np.median(best[high])), float(np.median(best[low])), int(high.sum())


def grid_evidence(ref: np.ndarray, input_hw: Optional[Tuple[int, int]]) -> Optional[Evidence]:
    if ref.ndim != 3 or not ref.size or not np.isfinite(ref).all():
        return None
    anchors, channels = ref.shape[1:]
    if channels < OBJECTNESS + 2 or anchors < MIN_ANCHORS or channels * 4 > anchors:
        return None
    per_cell = anchors_per_cell(anchors, input_hw)
    cofire = _cofiring(probabilities(ref[..., OBJECTNESS]), probabilities(ref[..., OBJECTNESS + 1:]))
    cofires = cofire is not None and cofire[0] >= MIN_COFIRE and cofire[0] >= COFIRE_RATIO * cofire[1]
    if not (cofires or per_cell == 3):
        return None
    said = []
    if per_cell:
        said.append(f"{anchors} anchors = {per_cell} per cell of a {input_hw[0]}x{input_hw[1]} input's grids at "
                    f"strides {'/'.join(map(str, GRID_STRIDES))}")
    if cofires:
        said.append(f"channel 4 is objectness: the best class score is {cofire[0]:.2f} at the median on the "
                    f"{cofire[2]} anchors where it is >= {HIGH:g}, {cofire[1]:.2f} where it is < {LOW:g}")
    decode = "grid" if per_cell == 1 and _undecoded(ref, input_hw) else "none"
    if decode == "grid":
        said.append("boxes are cell offsets: decoded with the grid")
    return Evidence(f"[N, {anchors}, {channels}] raw YOLO grid (xywh, objectness, {channels - 5} class scores): "
                    + "; ".join(said), {"decode": decode, "input_hw": tuple(input_hw) if input_hw else None})


def _undecoded(ref: np.ndarray, input_hw) -> bool:
    return bool(input_hw) and min(input_hw) > 4 * UNDECODED_BOX and float(np.abs(ref[..., :4]).max()) < UNDECODED_BOX


def _grid_offsets(input_hw: Tuple[int, int]) -> Tuple[np.ndarray, np.ndarray]:
    """Each cell's (x, y) index [A, 2] and its stride [A, 1], strides in order, cells row by row (YOLOX)."""
    cells, strides = [], []
    for stride in GRID_STRIDES:
        rows_, cols = input_hw[0] // stride, input_hw[1] // stride
        ys, xs = np.meshgrid(np.arange(rows_), np.arange(cols), indexing="ij")
        cells.append(np.stack([xs, ys], -1).reshape(-1, 2))
        strides.append(np.full((rows_ * cols, 1), stride))
    return np.concatenate(cells).astype(np.float64), np.concatenate(strides).astype(np.float64)


def split_grid(output: np.ndarray, decode: str = "none", input_hw: Optional[Tuple[int, int]] = None,
               sigmoided: Optional[bool] = None) -> GridParts:
    """Boxes, objectness, class scores and decoded scores. `sigmoided`: whether objectness and class
    scores are already probabilities (decided on FP32's grid, so a candidate is read the same way)."""
    output = output.astype(np.float64)
    boxes = output[..., :4]
    if decode == "grid" and input_hw:
        cells, strides = _grid_offsets(input_hw)
        boxes = np.concatenate([(boxes[..., :2] + cells) * strides, np.exp(np.minimum(boxes[..., 2:], 30)) * strides], -1)
    objectness = probabilities(output[..., OBJECTNESS], sigmoided)
    classes = probabilities(output[..., OBJECTNESS + 1:], sigmoided)
    return GridParts(boxes, objectness, classes, objectness[..., None] * classes)


def judge_grid(name, kind, ref, cand, tol):
    """Decoded detections matched as a head's are; boxes, objectness, class scores and decoded scores judged apart."""
    decode, input_hw = kind.fact("decode", "none"), kind.fact("input_hw")
    sigmoided = in_unit_range(ref[..., OBJECTNESS:])
    ref_parts, cand_parts = split_grid(ref, decode, input_hw, sigmoided), split_grid(cand, decode, input_hw, sigmoided)
    figures = common_figures(ref, cand)
    figures.update(part_figures({part: i for i, part in enumerate(GridParts._fields)}, ref_parts, cand_parts))
    found = match_decoded(ref_parts.boxes, ref_parts.scores, cand_parts.boxes, cand_parts.scores)
    return judge_found(name, kind, figures, found, tol)
