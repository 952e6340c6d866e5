"""Every output kind, one small class each, in one table: its name, description, evidence and judge.

`REGISTRY` lists the kinds as the CLI shows them; each kind's `priority` is the order its evidence
is asked in (lowest first), and the first kind with positive evidence is claimed. "tensor" comes
last: an output nothing speaks for is judged by SQNR and relative error, never by a guess from its
shape.
"""
from __future__ import annotations

from dataclasses import replace
from typing import ClassVar, Dict, Optional, Tuple

import numpy as np

from . import bins, class_heads, ctc, grids, heatmaps, regression, time_series
from .evidence import (Evidence, Hints, class_labels, in_unit_range, name_hint, per_sample, sigmoid_like,
                       softmax_rows, unit_norm_rows)
from .judges import (FAILED, Judgement, Tolerances, judge_classes, judge_ctc, judge_detection, judge_embedding,
                     judge_mask, judge_probability, judge_sequence, judge_values)
from .layouts import detection_layout
from .output_kind import OutputKind
from .value_judges import judge_coordinates, judge_tensor

MIN_EMBEDDING = 16
MASK_SIDE = 8
SOFTMAX_OPS = ("Softmax", "LogSoftmax")
ACTIVATION_OPS = SOFTMAX_OPS + ("Sigmoid", "HardSigmoid")


class Kind:
    name: ClassVar[str]
    description: ClassVar[str]
    parts: ClassVar[Tuple[str, ...]] = ()  # semantic parts judged apart (their figures decide "excellent")
    priority: ClassVar[int] = 100  # evidence order: specific layouts and state before names and values
    NAMES: ClassVar[str] = ""  # a regular expression of output names that say this kind

    def evidence(self, name: str, reference: np.ndarray, hints: Hints) -> Optional[Evidence]:
        return None

    def named(self, name: str) -> Optional[Evidence]:
        """Evidence from the output's name matching the kind's NAMES, or None."""
        hint = name_hint(name, self.NAMES) if self.NAMES else None
        return Evidence(f"name '{name}' ('{hint}')") if hint else None

    def judge(self, name: str, kind: OutputKind, ref: np.ndarray, cand: np.ndarray, labels,
              tol: Tolerances) -> Judgement:
        raise NotImplementedError


class State(Kind):
    priority = 10
    name, description = "state", "recurrent state fed back as an input: judged by streaming it"

    def evidence(self, name, reference, hints):
        return Evidence("fed back as an input") if hints.state else None

    def judge(self, name, kind, ref, cand, labels, tol):
        return judge_values(name, kind, ref, cand, tol)


class YoloGrid(Kind):
    priority = 20
    name = "yolo-grid"
    description = ("raw YOLOv5/YOLOX grid [N, A, 5+C] (xywh, objectness, class scores): decoded to "
                   "objectness x class score, then as a detection head")
    parts = grids.GridParts._fields

    def evidence(self, name, reference, hints):
        return grids.grid_evidence(reference, hints.input_hw)

    def judge(self, name, kind, ref, cand, labels, tol):
        return grids.judge_grid(name, kind, ref, cand, tol)


class Detection(Kind):
    priority = 30
    name = "detection"
    description = "detection head [N, 4+C, A] or [N, A, 4+C]: recall of FP32's detections, box IoU, score error"
    parts = ("boxes", "scores")
    NAMES = r"box|bbox|detect|^det|anchor"

    def evidence(self, name, reference, hints):
        layout = detection_layout(reference.shape)
        # One activation over the whole tensor (PicoDet's per-class score maps) leaves no channel a box.
        if layout is None or softmax_rows(reference) or hints.producer in ACTIVATION_OPS:
            return None
        scores = reference[:, 4:, :] if layout == "channels_first" else reference[:, :, 4:]
        where = layout.replace("_", " ")
        if in_unit_range(scores):
            return Evidence(f"{list(reference.shape)} reads as 4 box values + {scores.shape[1 if layout == 'channels_first' else 2]} "
                            f"class scores in [0, 1] per anchor ({where}, YOLOv8's layout)")
        hint = name_hint(name, self.NAMES)
        return Evidence(f"name '{name}' ('{hint}') and a {where} head layout") if hint else None

    def judge(self, name, kind, ref, cand, labels, tol):
        return judge_detection(name, kind, ref, cand, tol)


class TimeSeries(Kind):
    priority = 35  # before bins: a smooth contour has a peak with falling neighbours too
    name = "time-series"
    description = ("per-frame values or probabilities along one axis [N, T] (pitch in Hz, voicing): values by "
                   "per-frame error against FP32's spread, probabilities by frames whose decision flipped")

    def evidence(self, name, reference, hints):
        return time_series.time_series_evidence(reference, hints)

    def judge(self, name, kind, ref, cand, labels, tol):
        return time_series.judge_time_series(name, kind, ref, cand, tol)


class Bins(Kind):
    priority = 40
    name = "bins"
    description = ("ordinal bins [N, B] (pitch salience, depth, age): the value decoded around the argmax, "
                   "rows moved more than a bin")

    def evidence(self, name, reference, hints):
        return bins.bins_evidence(name, reference)

    def judge(self, name, kind, ref, cand, labels, tol):
        return bins.judge_bins(name, kind, ref, cand, tol)


class Sequence(Kind):
    priority = 60
    name, description = "sequence", "per-step scores [N, T, C]: per-step argmax agreement"
    NAMES = r"logit|class|cls|label"

    def evidence(self, name, reference, hints):
        shape = per_sample(reference)
        if len(shape) != 2 or min(shape) < 2:
            return None
        if hints.producer in SOFTMAX_OPS:
            return Evidence(f"produced by {hints.producer}: per-step probabilities")
        if softmax_rows(reference):
            return Evidence(f"[N, {shape[0]}, {shape[1]}] per-step probabilities (each step's scores sum to 1)")
        return self.named(name)

    def judge(self, name, kind, ref, cand, labels, tol):
        return judge_sequence(name, kind, ref, cand, tol)


class Ctc(Kind):
    priority = 50
    name = "ctc"
    description = "CTC per-step scores [N, T, C], blank first or last: decoded strings, symbols edited against FP32's"

    def evidence(self, name, reference, hints):
        steps = Sequence().evidence(name, reference, hints)
        if steps is None or not reference.size:
            return None
        shares = ctc.class_shares(reference.argmax(-1), reference.shape[-1])
        blank = ctc.blank_index(shares)
        if blank is None:
            return None
        return Evidence(f"{steps.sentence}; class {blank} wins {shares[blank]:.0%} of steps, more than any other: "
                        f"a CTC blank")

    def judge(self, name, kind, ref, cand, labels, tol):
        return judge_ctc(name, kind, ref, cand, labels, tol)


class Mask(Kind):
    priority = 70
    name, description = "mask", "masks [N, C, H, W]: IoU of the thresholded (or argmax) maps"
    NAMES = r"mask|seg"

    def evidence(self, name, reference, hints):
        shape = per_sample(reference)
        if len(shape) != 3 or min(shape[1:]) < MASK_SIDE:
            return None
        named = self.named(name)
        if named:
            return named
        if shape[0] == 1 and (hints.producer == "Sigmoid" and in_unit_range(reference) or sigmoid_like(reference)):
            return Evidence(f"[N, 1, {shape[1]}, {shape[2]}] map of sigmoid probabilities")
        if shape[0] >= 2 and (hints.producer in SOFTMAX_OPS or softmax_rows(reference, axis=1)):
            return Evidence(f"[N, {shape[0]}, {shape[1]}, {shape[2]}] maps whose classes sum to 1 at every pixel")
        return None

    def judge(self, name, kind, ref, cand, labels, tol):
        return judge_mask(name, kind, ref, cand, tol)


class Heatmap(Kind):
    priority = 65  # before masks: a sparse sigmoid map is one too
    name = "heatmap"
    description = ("object-centre heat map [N, C, H, W] beside size/offset maps (CenterNet, CenterFace): its "
                   "peaks, FP32's missed and new ones added")

    def evidence(self, name, reference, hints):
        return heatmaps.heatmap_evidence(reference, hints)

    def judge(self, name, kind, ref, cand, labels, tol):
        return heatmaps.judge_heatmap(name, kind, ref, cand, labels, tol)


class Embedding(Kind):
    priority = 80
    name, description = "embedding", "embeddings [N, D] or [N, T, D]: per-sample cosine, mean and worst"
    NAMES = r"embed|pooler|sentence|hidden|feature|vector"

    def evidence(self, name, reference, hints):
        shape = per_sample(reference)
        if len(shape) not in (1, 2) or shape[-1] < MIN_EMBEDDING:
            return None
        named = self.named(name)
        if named:
            return named
        if hints.producer == "LpNormalization":
            return Evidence("produced by LpNormalization: normalised vectors")
        # A confident softmax's rows are near one-hot, so of unit length too: a distribution is no embedding.
        if hints.producer in SOFTMAX_OPS or softmax_rows(reference):
            return None
        if unit_norm_rows(reference):
            return Evidence(f"[N, {shape[0]}] rows of unit length")
        if len(shape) == 1 and hints.pooled and hints.head is None:
            return Evidence(f"[N, {shape[0]}] features pooled by {hints.pooled}, no layer after it: vectors "
                            f"compared by direction")
        return None

    def judge(self, name, kind, ref, cand, labels, tol):
        return judge_embedding(name, kind, ref, cand, tol)


class Coordinates(Kind):
    priority = 90
    name = "coordinates"
    description = ("boxes, landmarks, keypoints: error in the output's own units against FP32's spread, "
                   "mean and 95th percentile")
    NAMES = r"landmark|keypoint|kpts?|kps|lmk|coord|bbox|box|offset|regress|(^|_)loc"

    def evidence(self, name, reference, hints):
        hint = name_hint(name, self.NAMES)
        if hint and reference.ndim >= 2:
            return Evidence(f"name '{name}' ('{hint.strip('_')}'): coordinates")
        shape = per_sample(reference)
        beside = next((other for other, grid in hints.heatmaps if len(shape) == 3 and tuple(shape[1:]) == grid), None)
        if beside is not None:
            return Evidence(f"[N, {shape[0]}, {shape[1]}, {shape[2]}] on the grid of heat map '{beside}': its centres' "
                            f"sizes, offsets or landmarks")
        return None

    def judge(self, name, kind, ref, cand, labels, tol):
        return judge_coordinates(name, kind, ref, cand, tol)


class Classes(Kind):
    priority = 100
    name, description = "classes", "class scores [N, C]: top-1 agreement (top-1 accuracy with labels), SQNR beside"
    NAMES = r"logit|class|cls|label"

    def evidence(self, name, reference, hints):
        shape = per_sample(reference)
        if len(shape) != 1 or shape[0] < 2:
            return None
        if class_labels(hints.labels, reference):
            return Evidence(f"the evaluation labels are class indices in [0, {shape[0]})")
        if hints.producer in SOFTMAX_OPS:
            return Evidence(f"produced by {hints.producer}")
        if softmax_rows(reference):
            return Evidence(f"[N, {shape[0]}] rows that sum to 1: softmax probabilities")
        return self.named(name) or class_heads.structural_evidence(reference, hints)

    def judge(self, name, kind, ref, cand, labels, tol):
        return judge_classes(name, kind, ref, cand, labels, tol)


class Probability(Kind):
    priority = 110
    name, description = "probability", "probabilities in [0, 1]: absolute error, decisions flipped at 0.5"
    NAMES = r"prob|confidence|speech|vad"

    def evidence(self, name, reference, hints):
        if not in_unit_range(reference):
            return None
        hint = name_hint(name, self.NAMES)
        if hint:
            return Evidence(f"name '{name}' ('{hint}') and values in [0, 1]")
        if hints.producer == "Sigmoid":
            return Evidence("produced by Sigmoid")
        if sigmoid_like(reference):
            return Evidence("values in [0, 1], most within 0.05 of 0 or 1: a sigmoid's")
        return None

    def judge(self, name, kind, ref, cand, labels, tol):
        return judge_probability(name, kind, ref, cand, tol)


class Regression(Kind):
    priority = 120
    name = "regression"
    description = ("a small continuous head [N, K], K <= 8 (quality scores, an age): error against FP32's spread "
                   "across samples and rank agreement; larger outputs given as regression: cosine")

    def evidence(self, name, reference, hints):
        return regression.regression_evidence(name, reference, hints)

    def judge(self, name, kind, ref, cand, labels, tol):
        if int(np.prod(ref.shape[1:])) <= regression.MAX_COLUMNS:
            return regression.judge_regression(name, kind, ref, cand, tol)
        return judge_values(name, kind, ref, cand, tol)


class Tensor(Kind):
    priority = 130
    name = "tensor"
    description = "no task known: SQNR and per-sample relative error against FP32"

    def evidence(self, name, reference, hints):
        return Evidence(f"no task evidence: judged as a tensor; --output-kind {name}=KIND to say more")

    def judge(self, name, kind, ref, cand, labels, tol):
        return judge_tensor(name, kind, ref, cand, tol)


REGISTRY: Tuple[Kind, ...] = (Classes(), Detection(), Heatmap(), Embedding(), Probability(), Regression(), TimeSeries(),
                              Sequence(), Ctc(), Mask(), State(), YoloGrid(), Bins(), Coordinates(), Tensor())
BY_NAME: Dict[str, Kind] = {kind.name: kind for kind in REGISTRY}
EVIDENCE_ORDER: Tuple[Kind, ...] = tuple(sorted(REGISTRY, key=lambda kind: kind.priority))


def infer(name: str, reference: np.ndarray, hints: Hints) -> OutputKind:
    """The first kind in EVIDENCE_ORDER with positive evidence ("tensor" always has its own)."""
    for kind in EVIDENCE_ORDER:
        found = kind.evidence(name, reference, hints)
        if found is not None:
            return OutputKind(kind.name, False, found.sentence, dict(found.facts) or None)
    raise RuntimeError("no kind claimed the output, though the tensor kind always has evidence")


def judge(name: str, kind: OutputKind, ref: np.ndarray, cand: np.ndarray, labels, tol: Tolerances) -> Judgement:
    """Its kind's judge, then the check every kind gets: an output whose cosine is below `broken_cosine` fails."""
    labels = None if labels is None else np.asarray(labels)
    chosen = BY_NAME[kind.kind]
    judged = replace(chosen.judge(name, kind, ref, cand, labels, tol), parts=tuple(chosen.parts))
    size = int(np.prod(ref.shape[1:])) if ref.ndim > 1 else 1
    if judged.verdict != FAILED and size >= 4 and judged.cosine < tol.broken_cosine:
        return replace(judged, verdict=FAILED, samples_needed=None, reason=f"broken: cosine {judged.cosine:.3f} with FP32 "
                                                      f"(below {tol.broken_cosine:g}); {judged.reason}")
    return judged
