"""edgeopt: make trained PyTorch models run fast on edge boards, and keep a fleet measured.

    import edgeopt
    manifest = edgeopt.convert("model.py:build", device="rpi4", output_dir="out",
                               input_shape="1,3,224,224", calibration="calib.npz")
"""
from __future__ import annotations

from .api import convert, devices
from .errors import EdgeoptError, MissingExtraError, UserError

__all__ = ["convert", "devices", "EdgeoptError", "MissingExtraError", "UserError"]
