"""Bundled example models, so the quickstart needs nothing but this package.

`digits-cnn` is a small CNN trained on scikit-learn's bundled 8x8 digits (no download) at load
time (about 10 s on a laptop, a minute or more on a busy 2-core host; the progress says so), with held-out calibration and evaluation splits and real labels, so
the accuracy figures of a conversion mean something.
"""
from __future__ import annotations

import hashlib
from typing import Callable, Dict, Tuple

import numpy as np

from edgeopt_agent.errors import UserError, require

from ..progress import ProgressReporter
from .hashing import update_with_weights
from .source_model import SourceModel
from .tensors import Dataset, InputSpec


def digits_splits(seed: int = 0) -> Dict[str, Tuple[np.ndarray, np.ndarray]]:
    """scikit-learn's 8x8 digits as N,1,8,8 float32 in [-0.5, 0.5]: train / calibration / eval splits."""
    datasets = require("sklearn.datasets", "examples", "the bundled digits example")
    digits = datasets.load_digits()
    images = (digits.images.astype(np.float32) / 16.0 - 0.5)[:, None]
    labels = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(images))
    images, labels = images[order], labels[order]
    cuts = {"train": slice(0, 1200), "calibration": slice(1200, 1400), "eval": slice(1400, None)}
    return {name: (images[cut], labels[cut]) for name, cut in cuts.items()}


EPOCHS = 12


def train_digits_cnn(images: np.ndarray, labels: np.ndarray, epochs: int = EPOCHS, seed: int = 0,
                     on_epoch: Callable[[], None] = lambda: None):
    """A small CNN trained on the digits: about 10 s on a laptop CPU, a minute or more on a busy small host."""
    torch = require("torch", "convert")
    nn = torch.nn
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(32, 10),
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    x, y = torch.from_numpy(images), torch.from_numpy(labels)
    model.train()
    for epoch in range(epochs):
        for idx in torch.randperm(len(x), generator=torch.Generator().manual_seed(seed + epoch)).split(64):
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
            optimizer.step()
        on_epoch()
    return model.eval()


def _digits_cnn(progress: ProgressReporter):
    splits = digits_splits()
    images, labels = splits["train"]
    with progress.step(f"train example:digits-cnn (a small CNN, on {len(images)} digits)", EPOCHS, "epochs") as advance:
        model = train_digits_cnn(images, labels, on_epoch=advance)
    digest = hashlib.sha256(b"example:digits-cnn")
    update_with_weights(digest, model)
    calib_x, _ = splits["calibration"]
    eval_x, eval_y = splits["eval"]
    return SourceModel(
        kind="module",
        description="example:digits-cnn",
        sha256=digest.hexdigest(),
        module=model,
        input_specs=[InputSpec("input", (1, 1, 8, 8), "float32")],
        calibration=Dataset({"input": calib_x}, None, "example:digits-cnn calibration split"),
        eval_data=Dataset({"input": eval_x}, eval_y, "example:digits-cnn evaluation split"),
    )


EXAMPLES: Dict[str, Callable[[ProgressReporter], SourceModel]] = {"digits-cnn": _digits_cnn}


def load_example(name: str, progress: ProgressReporter = ProgressReporter()) -> SourceModel:
    if name not in EXAMPLES:
        raise UserError(f"unknown example '{name}'; available: {', '.join('example:' + n for n in EXAMPLES)}")
    return EXAMPLES[name](progress)
