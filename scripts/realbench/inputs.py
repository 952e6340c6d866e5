"""Inputs the cases share, all made here or read from the corpus (nothing downloaded): ImageNet-style
images, Pillow's font, float WAV files, English sentences and text lines, and grids of LFW faces."""
from __future__ import annotations

import struct
import textwrap
from pathlib import Path
from typing import List

import numpy as np

from realbench.corpus import corpus_file


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


def face_grid_tiles(faces, start: int, count: int, grid: int = 3, size: int = 320, smallest: int = 70,
                    largest: int = 100, face_crops: int = 100, placed: list = None):
    """Detector evaluation canvases that never repeat: tile i is drawn from a generator seeded by
    start + i and holds grid x grid LFW faces (the `lfw` file's first 100 crops are faces, the rest
    are not) at random sizes, offsets, mirroring, contrast and brightness on a random grey. About six
    detections per 3x3 tile, against one per 2x2 canvas of the LFW crops in file order (the earlier
    set, which repeated after 50 tiles). The 100 face crops recur in new
    placements, so detections of one person are not fully independent. `placed`, if given, receives
    each tile's pasted squares as [(x0, y0, x1, y1), ...]: the ground truth of where faces are."""
    import numpy as np
    from PIL import Image

    cell = size // grid
    images = []
    for index in range(start, start + count):
        rng = np.random.default_rng(index)
        canvas = np.full((size, size), rng.uniform(0.3, 0.7), np.float32)
        squares = []
        for k in range(grid * grid):
            side = min(int(rng.integers(smallest, largest + 1)), cell)
            crop = faces[rng.integers(min(face_crops, len(faces)))]
            if rng.random() < 0.5:
                crop = crop[:, ::-1]
            scaled = Image.fromarray((np.asarray(crop) * 255).astype(np.uint8)).resize((side, side), Image.BILINEAR)
            face = (np.asarray(scaled, np.float32) / 255 - 0.5) * rng.uniform(0.8, 1.2) + 0.5 + rng.uniform(-0.1, 0.1)
            y = (k // grid) * cell + int(rng.integers(0, cell - side + 1))
            x = (k % grid) * cell + int(rng.integers(0, cell - side + 1))
            canvas[y:y + side, x:x + side] = np.clip(face, 0.0, 1.0)
            squares.append((x, y, x + side, y + side))
        if placed is not None:
            placed.append(squares)
        images.append(np.stack([canvas] * 3))
    return np.stack(images)


def photo(name: str):
    from PIL import Image

    return Image.open(corpus_file("photos", name)).convert("RGB")
