"""Detections from a raw detection head, and how many of FP32's a candidate still finds.

The head is [N, 4+C, A] (channels first, as YOLOv8 exports) or [N, A, 4+C]: four box values
(centre x, centre y, width, height) then one score per class, per anchor. Boxes and scores are
judged apart: a shared INT8 scale can keep boxes intact while rounding every score to zero.

A detection FP32 scores just above the threshold is found when the candidate has the same box at a
score up to SCORE_BAND below it (and a candidate's detection is spurious only when FP32 has nothing
there even down to the band): on the corpus detector, input noise below one grey level moves 3 of
505 detections across the hard threshold, so at that sample size a hard line counts noise as loss.
Detections that only cross the line are reported apart (`strict_found`). Noise moves detections
across the line both ways; a quantization that lowers scores moves them one way only, and a user's
fixed threshold then loses them: when those that fell below it outnumber those that rose above it
(`crossed_up`) beyond chance (one-sided sign test at SYSTEMATIC_P), the surplus counts as missed
(`systematic_drop`). The candidate's spurious detections count as added (judges.judge_found); no
upward surplus is tested, as noise alone tends to cross upward (see sign_test_p) and would be counted.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Tuple

import numpy as np

from .layouts import detection_layout

SCORE_THRESHOLD = 0.25
SCORE_BAND = 0.05  # below the threshold, a candidate's score still keeps FP32's detection (module doc)
MATCH_IOU = 0.5
NMS_IOU = 0.5
MAX_DETECTIONS = 300
SYSTEMATIC_P = 0.05  # one-sided sign test on threshold crossings (module doc)


@dataclass(frozen=True)
class DetectionMatch:
    reference: int  # FP32 detections above the threshold, after NMS
    found: int  # of those, the candidate has one of the same class with IoU >= MATCH_IOU, within the band
    candidate: int  # the candidate's own detections
    spurious: int  # the candidate's detections that match none of FP32's
    mean_iou: float  # over found detections
    score_max_abs_error: float
    box_max_abs_error: float
    strict_found: int = 0  # found with the candidate's score at or above the threshold itself
    crossed_up: int = 0  # the candidate's detections at the threshold where FP32's same box is only within the band

    @property
    def crossed_down(self) -> int:
        """FP32's detections the candidate finds only within the band below the threshold."""
        return self.found - self.strict_found


def sign_test_p(down: int, up: int) -> float:
    """One-sided: the chance of `down` or more of `down + up` crossings going down if either way were as
    likely. Conservative for a detector: its scores are usually denser just below the threshold than
    just above, so noise alone tends to cross upward more often."""
    n = down + up
    return sum(math.comb(n, k) for k in range(down, n + 1)) / 2 ** n if n else 1.0


def systematic_drop(found: DetectionMatch) -> Tuple[int, float]:
    """(detections a systematic score drop takes below the threshold, the sign test's p): the surplus of
    downward over upward crossings where chance does not explain it, else 0."""
    p = sign_test_p(found.crossed_down, found.crossed_up)
    return (found.crossed_down - found.crossed_up if p < SYSTEMATIC_P else 0), p


def split_head(output: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """([N, A, 4] boxes, [N, A, C] scores) from either layout."""
    if detection_layout(output.shape) == "channels_first":
        output = np.swapaxes(output, 1, 2)
    return output[..., :4], output[..., 4:]


def _corners(boxes: np.ndarray) -> np.ndarray:
    cx, cy, w, h = boxes[:, 0], boxes[:, 1], np.abs(boxes[:, 2]), np.abs(boxes[:, 3])
    return np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)


def iou(one: np.ndarray, many: np.ndarray) -> np.ndarray:
    """IoU of one corner box [4] against corner boxes [K, 4]."""
    x1, y1 = np.maximum(one[0], many[:, 0]), np.maximum(one[1], many[:, 1])
    x2, y2 = np.minimum(one[2], many[:, 2]), np.minimum(one[3], many[:, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area = lambda b: np.clip(b[..., 2] - b[..., 0], 0, None) * np.clip(b[..., 3] - b[..., 1], 0, None)  # noqa: E731
    union = area(one) + area(many) - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def detect(boxes: np.ndarray, scores: np.ndarray, threshold: float = SCORE_THRESHOLD) -> List[Tuple[int, float, np.ndarray]]:
    """Class-wise greedy NMS over one sample's anchors: [(class, score, corner box)], best first."""
    best_class = scores.argmax(-1)
    best_score = scores[np.arange(len(scores)), best_class]
    keep = np.flatnonzero(best_score >= threshold)
    keep = keep[np.argsort(-best_score[keep])][: MAX_DETECTIONS * 10]
    corners = _corners(boxes[keep].astype(np.float64))
    found: List[Tuple[int, float, np.ndarray]] = []
    suppressed = np.zeros(len(keep), dtype=bool)
    for i, anchor in enumerate(keep):
        if suppressed[i]:
            continue
        found.append((int(best_class[anchor]), float(best_score[anchor]), corners[i]))
        if len(found) >= MAX_DETECTIONS:
            break
        same = best_class[keep] == best_class[anchor]
        suppressed |= same & (iou(corners[i], corners) >= NMS_IOU)
    return found


def match(reference: np.ndarray, candidate: np.ndarray, threshold: float = SCORE_THRESHOLD,
          band: float = SCORE_BAND) -> DetectionMatch:
    ref_boxes, ref_scores = split_head(reference.astype(np.float64))
    cand_boxes, cand_scores = split_head(candidate.astype(np.float64))
    return match_decoded(ref_boxes, ref_scores, cand_boxes, cand_scores, threshold, band)


def match_decoded(ref_boxes: np.ndarray, ref_scores: np.ndarray, cand_boxes: np.ndarray, cand_scores: np.ndarray,
                  threshold: float = SCORE_THRESHOLD, band: float = SCORE_BAND) -> DetectionMatch:
    """As `match`, from boxes [N, A, 4] (xywh) and per-class scores [N, A, C] already taken out of a head."""
    total = found = strict = candidates = spurious = crossed_up = 0
    score_error = box_error = 0.0
    ious: List[float] = []
    for i in range(len(ref_boxes)):
        if ref_scores[i].size:  # per sample: a heat map's boxes are a broadcast view, never copied whole
            score_error = max(score_error, float(np.abs(ref_scores[i] - cand_scores[i]).max()))
            box_error = max(box_error, float(np.abs(ref_boxes[i] - cand_boxes[i]).max()))
        # Greedy NMS keeps boxes best first, so FP32's detections at the threshold are the start of those
        # down to the band's floor.
        near = detect(ref_boxes[i], ref_scores[i], threshold - band)
        ref_dets = [d for d in near if d[1] >= threshold]
        cand_dets = detect(cand_boxes[i], cand_scores[i], threshold - band)
        total += len(ref_dets)
        candidates += sum(score >= threshold for _, score, _ in cand_dets)
        used = np.zeros(len(cand_dets), dtype=bool)
        for cls, _, box in ref_dets:
            best, best_iou = _best_match(cls, box, cand_dets, used)
            if best >= 0:
                used[best] = True
                found += 1
                strict += cand_dets[best][1] >= threshold
                ious.append(best_iou)
        taken = np.zeros(len(near), dtype=bool)
        for cls, score, box in cand_dets:
            if score >= threshold:
                best, _ = _best_match(cls, box, near, taken)
                if best >= 0:
                    taken[best] = True
                    crossed_up += near[best][1] < threshold
                else:
                    spurious += 1
    return DetectionMatch(
        reference=total, found=found, candidate=candidates, spurious=spurious,
        mean_iou=float(np.mean(ious)) if ious else 0.0,
        score_max_abs_error=score_error, box_max_abs_error=box_error,
        strict_found=strict, crossed_up=crossed_up,
    )


def _best_match(cls: int, box: np.ndarray, dets, used: np.ndarray) -> Tuple[int, float]:
    """The unused detection of class `cls` overlapping `box` most (IoU >= MATCH_IOU): (index, IoU), or (-1, _)."""
    best, best_iou = -1, MATCH_IOU
    for j, (other_cls, _, other_box) in enumerate(dets):
        if used[j] or other_cls != cls:
            continue
        overlap = float(iou(box, other_box[None])[0])
        if overlap >= best_iou:
            best, best_iou = j, overlap
    return best, best_iou
