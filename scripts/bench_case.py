"""One real model as scripts/bench_real_models.py benchmarks it (the model, its data and its task judge),
and the text and audio helpers the cases share."""
from __future__ import annotations

import math
import struct
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional

import numpy as np


@dataclass(frozen=True)
class TaskResult:
    """A case's task judgement of one artifact: the figure people read, whether the artifact keeps the
    task (not measurably worse than FP32 on it), and the one-line criterion that decided."""
    figure: str
    kept: bool
    criterion: str

    def __post_init__(self):  # numpy's bool would reach the --json output as the string "False"
        object.__setattr__(self, "kept", bool(self.kept))

    def __str__(self) -> str:  # where a caller prints the judgement: the figure and the decision
        return f"{self.figure} ({'keeps' if self.kept else 'does not keep'} the task)"


ALPHA = 0.05  # one-sided: an artifact measurably worse than FP32 at 95 % does not keep the task


def mcnemar_worse_p(reference_right, candidate_right) -> float:
    """Exact one-sided McNemar test on paired per-sample outcomes (right / wrong against the truth): the
    probability, were the candidate as good as FP32, of losing at least as many samples FP32 gets right
    as it lost, among the samples where the two differ."""
    ref, got = np.asarray(reference_right, bool), np.asarray(candidate_right, bool)
    lost, gained = int((ref & ~got).sum()), int((~ref & got).sum())
    n = lost + gained
    return sum(math.comb(n, k) for k in range(lost, n + 1)) / 2 ** n if n else 1.0


def not_worse(reference_right, candidate_right) -> tuple:
    """(kept, "lost L, gained G, p=...") by mcnemar_worse_p at ALPHA."""
    ref, got = np.asarray(reference_right, bool), np.asarray(candidate_right, bool)
    p = mcnemar_worse_p(ref, got)
    return p >= ALPHA, f"lost {int((ref & ~got).sum())}, gained {int((~ref & got).sum())}, p={p:.3f}"


@dataclass
class Case:
    name: str
    what: str
    onnx: Path
    shapes: List[str]
    dtypes: List[str]
    calibration: Dict[str, np.ndarray]
    evaluation: Dict[str, np.ndarray]
    kind: Optional[str]  # edgeopt output kind of the first output; None: edgeopt infers it
    task: Callable[[List[np.ndarray], List[np.ndarray]], TaskResult]  # (reference outputs, candidate outputs)
    whole: bool = False  # data arrays hold whole samples (inputs without a shared batch axis)
    labels: Optional[np.ndarray] = None  # the evaluation's ground truth, given to edgeopt and to every verdict
    source: Optional[str] = None  # what edgeopt converts when not `onnx`: "scripts/corpus_models.py:factory"
    weights: Optional[Path] = None  # the state_dict edgeopt loads into `source` (--weights)
    kinds: Optional[List[Optional[str]]] = None  # every output's kind in order (None: edgeopt infers it)
    # The inputs the task judge runs every artifact on, where the task needs more than the evaluation
    # data edgeopt's verdicts use (a retrieval set of 1,600 texts); None: the evaluation data.
    task_data: Optional[Dict[str, np.ndarray]] = None
    # Whether edgeopt is told `kinds` (--output-kind), as someone who knows the model would; False: it
    # decides them from evidence, as a new user's conversion does (the kinds are then what check_kind_inference
    # compares its decision with).
    tell_kinds: bool = True

    def feed(self, arrays: Dict[str, np.ndarray], i: int) -> Dict[str, np.ndarray]:
        return {k: np.asarray(v[i]) if self.whole else v[i:i + 1] for k, v in arrays.items()}  # a scalar as a 0-d array


IMAGENET_MEAN, IMAGENET_STD = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)


def imagenet_chw(image) -> np.ndarray:
    """An RGB image (PIL or uint8 HWC) as the float CHW input ImageNet-normalised models take."""
    return ((np.asarray(image, np.float32) / 255 - IMAGENET_MEAN) / IMAGENET_STD).transpose(2, 0, 1)


def font(size: int):
    """Pillow's bundled font at `size` pixels (older Pillow: its one bitmap size)."""
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except TypeError:
        return ImageFont.load_default()


def read_float_wav(path: Path) -> np.ndarray:
    data = path.read_bytes()
    pos, fmt, samples = 12, None, None
    while pos < len(data):
        chunk, size = data[pos:pos + 4], struct.unpack("<I", data[pos + 4:pos + 8])[0]
        body = data[pos + 8:pos + 8 + size]
        if chunk == b"fmt ":
            fmt = struct.unpack("<HHIIHH", body[:16])
        elif chunk == b"data":
            samples = body
        pos += 8 + size + (size & 1)
    if fmt is None or samples is None or fmt[0] != 3:
        raise ValueError(f"{path}: not a float WAV")
    return np.frombuffer(samples, np.float32).reshape(-1, fmt[1])[:, 0]


SENTENCES = [
    "A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby.",
    "A man is riding a horse.", "A woman is playing violin.", "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.", "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.", "The quick brown fox jumps over the lazy dog.",
    "Hello world.", "One two three four five six seven eight nine ten.", "The weather is lovely today.",
    "It is raining in the city and the streets are wet.", "Quantization makes neural networks smaller.",
    "The board runs the model at thirty frames per second.", "She sold her car and bought a bicycle.",
    "A child is reading a book under a tree.", "The stock market fell sharply on Monday.",
    "He forgot his keys at the office again.", "Fresh bread smells wonderful in the morning.",
    "The train to the airport leaves every ten minutes.", "Birds are singing outside the window.",
    "This recipe needs two eggs and a cup of flour.", "The museum opens at nine o'clock.",
    "A dog is chasing a ball across the park.", "The laptop battery lasts about eight hours.",
    "They watched the sunset from the hill.", "Please close the door when you leave.",
    "The concert was cancelled because of the storm.", "Our team won the final match.",
    "Water boils at one hundred degrees Celsius.",
]


LINES = ["Region-based segmentation", "Let us first determine markers", "background pixels we can label",
         "histogram of grey values", "The quick brown fox 1234", "edge boards run models fast", "INT8 QDQ per-channel",
         "Raspberry Pi and Jetson", "accuracy verdicts per output", "fleet telemetry over MQTT", "hello world 2026",
         "calibration data matters", "mixed precision search", "one two three four five", "ONNX Runtime 1.32",
         "silero voice activity", "nudenet detector head", "sentence embeddings", "weights as Constant nodes",
         "opset upgrade to 13", "symbolic shape inference", "CTC greedy decoding", "text line recognizer",
         "orientation classifier"]


def _zen_of_python() -> List[str]:
    """PEP 20, the English text every Python ships (`import this` prints it; it is stored in rot13)."""
    import codecs
    import contextlib
    import importlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        this = importlib.import_module("this")
    return codecs.decode(this.s, "rot13").splitlines()[2:]


def ocr_eval_lines(width: int = 24) -> List[str]:
    """Text lines the recognizer is judged on, none of them calibration's LINES: SENTENCES and the Zen
    of Python wrapped at `width` characters (what fits PP-OCR's 320-pixel line unsqueezed)."""
    return [line for text in SENTENCES + _zen_of_python() for line in textwrap.wrap(text, width)]
