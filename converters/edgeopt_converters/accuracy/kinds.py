"""What an output means, so it can be judged by what it does.

A kind is inferred from the output's name, shape and FP32 values where that is clear, and the user
overrides it per output name (`--output-kind NAME=KIND`). The inference says why it chose, so a
wrong guess is visible in the table and the manifest.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import numpy as np

from edgeopt_agent.errors import UserError

from . import ctc

KINDS = {
    "classes": "class scores [N, C]: top-1 agreement (top-1 accuracy with labels)",
    "detection": "detection head [N, 4+C, A] or [N, A, 4+C]: recall of FP32's detections, box IoU, score error",
    "embedding": "embeddings [N, D] or [N, T, D]: per-sample cosine, mean and worst",
    "probability": "probabilities in [0, 1]: absolute error, decisions flipped at 0.5",
    "regression": "real values: error against the output's range (SQNR), cosine",
    "sequence": "per-step scores [N, T, C]: per-step argmax agreement",
    "ctc": "CTC per-step scores [N, T, C], blank first or last: decoded strings, symbols edited against FP32's",
    "mask": "masks [N, C, H, W]: IoU of the thresholded (or argmax) maps",
    "state": "recurrent state fed back as an input: judged by streaming it",
}

_NAME_HINTS = (
    (r"embed|pooler|sentence|hidden|feature|vector", "embedding"),
    (r"mask|seg", "mask"),
    (r"box|bbox|detect|^det|anchor", "detection"),
    (r"prob|confidence|speech|vad", "probability"),
    (r"logit|class|cls|label", "classes"),
)
_MIN_ANCHORS = 64
_MIN_EMBEDDING = 16
_MASK_SIDE = 8


@dataclass(frozen=True)
class OutputKind:
    kind: str
    given: bool
    why: str

    def describe(self) -> str:
        return self.kind if self.given else f"{self.kind} (inferred: {self.why})"


def parse_output_kinds(pairs: Sequence[str]) -> dict:
    """`NAME=KIND` strings (CLI) -> {name: kind}, refusing unknown kinds with the list of known ones."""
    kinds = {}
    for pair in pairs:
        name, sep, kind = pair.partition("=")
        if not sep or not name or kind not in KINDS:
            raise UserError(f"--output-kind '{pair}' must be NAME=KIND with KIND one of {', '.join(KINDS)}")
        kinds[name] = kind
    return kinds


def check_output_names(given: Mapping[str, str], names: Sequence[str]) -> None:
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise UserError(f"--output-kind names {', '.join(unknown)}, but the model's outputs are {', '.join(names)}")


def detection_layout(shape: Sequence[int]) -> Optional[str]:
    """'channels_first' for [N, 4+C, A], 'channels_last' for [N, A, 4+C], None otherwise."""
    if len(shape) != 3:
        return None
    channels, anchors = sorted(shape[1:])
    if channels < 5 or anchors < _MIN_ANCHORS or channels * 4 > anchors:
        return None
    return "channels_first" if shape[1] == channels else "channels_last"


def infer_kind(name: str, reference: np.ndarray, given: Optional[str] = None, state: bool = False) -> OutputKind:
    if given:
        return OutputKind(given, True, "given")
    if state:
        return OutputKind("state", False, "fed back as an input")
    lowered = name.lower()
    hinted = next((kind for pattern, kind in _NAME_HINTS if re.search(pattern, lowered)), None)
    by_shape = _by_shape(reference)
    if hinted == "classes" and reference.ndim == 3 and reference.shape[1] >= 2:
        hinted = "sequence"
    if hinted and _fits(hinted, reference):
        return _ctc_if_blank(OutputKind(hinted, False, f"name '{name}'"), reference)
    return _ctc_if_blank(by_shape, reference)


def _ctc_if_blank(kind: OutputKind, ref: np.ndarray) -> OutputKind:
    """A sequence whose first or last class wins most steps reads as a CTC head: judged on decoded strings."""
    if kind.kind != "sequence" or ref.size == 0:
        return kind
    shares = ctc.class_shares(ref.argmax(-1), ref.shape[-1])
    blank = ctc.blank_index(shares)
    if blank is None:
        return kind
    return OutputKind("ctc", False, f"{kind.why}; class {blank} wins {shares[blank]:.0%} of steps, more than any "
                                    f"other: a CTC blank")


def _fits(kind: str, ref: np.ndarray) -> bool:
    per_sample = ref.shape[1:]
    if kind == "classes":
        return len(per_sample) == 1 and per_sample[0] >= 2
    if kind == "detection":
        return detection_layout(ref.shape) is not None
    if kind == "embedding":
        return len(per_sample) in (1, 2) and per_sample[-1] >= _MIN_EMBEDDING
    if kind == "mask":
        return len(per_sample) == 3 and min(per_sample[1:]) >= _MASK_SIDE
    if kind == "probability":
        return _in_unit_range(ref)
    if kind in ("sequence", "ctc"):
        return len(per_sample) == 2 and per_sample[0] >= 2 and per_sample[1] >= 2
    return True


def _in_unit_range(ref: np.ndarray) -> bool:
    return ref.size > 0 and float(ref.min()) >= 0.0 and float(ref.max()) <= 1.0


def _scores_in_unit_range(ref: np.ndarray, layout: str) -> bool:
    """A head's class scores come out of a sigmoid: every channel after the four box values is in [0, 1]."""
    scores = ref[:, 4:, :] if layout == "channels_first" else ref[:, :, 4:]
    return _in_unit_range(scores)


def _rows_sum_to_one(ref: np.ndarray) -> bool:
    return _in_unit_range(ref) and bool(np.allclose(ref.reshape(-1, ref.shape[-1]).sum(-1), 1.0, atol=1e-3))


def _by_shape(ref: np.ndarray) -> OutputKind:
    per_sample = ref.shape[1:]
    size = int(np.prod(per_sample)) if per_sample else 1
    if size <= 2 or (len(per_sample) == 1 and per_sample[0] == 1):
        if _in_unit_range(ref):
            return OutputKind("probability", False, f"{size} value(s) per sample in [0, 1]")
        return OutputKind("regression", False, f"{size} value(s) per sample")
    if len(per_sample) == 2 and per_sample[0] >= 2 and _rows_sum_to_one(ref):
        return OutputKind("sequence", False, f"[N, {per_sample[0]}, {per_sample[1]}] per-step probabilities")
    layout = detection_layout(ref.shape)
    if layout and _scores_in_unit_range(ref, layout):
        return OutputKind("detection", False, f"{list(ref.shape)} reads as boxes + class scores ({layout.replace('_', ' ')})")
    if len(per_sample) == 1:
        norms = np.linalg.norm(ref.reshape(len(ref), -1).astype(np.float64), axis=1)
        if per_sample[0] >= _MIN_EMBEDDING and len(norms) and np.allclose(norms, 1.0, atol=1e-2):
            return OutputKind("embedding", False, f"[N, {per_sample[0]}] rows of unit length")
        return OutputKind("classes", False, f"[N, {per_sample[0]}] scores")
    if len(per_sample) == 2 and per_sample[0] >= 2 and per_sample[1] >= _MIN_EMBEDDING:
        return OutputKind("embedding", False, f"[N, {per_sample[0]}, {per_sample[1]}] per-token vectors")
    if len(per_sample) == 3 and min(per_sample[1:]) >= _MASK_SIDE and (per_sample[0] == 1 or _in_unit_range(ref)):
        return OutputKind("mask", False, f"[N, {per_sample[0]}, {per_sample[1]}, {per_sample[2]}] maps")
    return OutputKind("regression", False, f"{list(ref.shape)} values")
