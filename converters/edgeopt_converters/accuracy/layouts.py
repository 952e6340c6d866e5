"""Known head layouts, told by shape: a YOLOv8 detection head, and the cells of a strided YOLO grid."""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

MIN_ANCHORS = 64
GRID_STRIDES = (8, 16, 32)  # YOLOv5, YOLOX and YOLOv8 predict at these strides


def detection_layout(shape: Sequence[int]) -> Optional[str]:
    """'channels_first' for [N, 4+C, A], 'channels_last' for [N, A, 4+C], None otherwise."""
    if len(shape) != 3:
        return None
    channels, anchors = sorted(shape[1:])
    if channels < 5 or anchors < MIN_ANCHORS or channels * 4 > anchors:
        return None
    return "channels_first" if shape[1] == channels else "channels_last"


def grid_cells(input_hw: Tuple[int, int], strides: Sequence[int] = GRID_STRIDES) -> int:
    """Cells over all strides of an input of `input_hw` pixels: sum of (H/s)*(W/s)."""
    height, width = input_hw
    return sum((height // s) * (width // s) for s in strides)


def anchors_per_cell(anchors: int, input_hw: Optional[Tuple[int, int]]) -> Optional[int]:
    """1 (YOLOX, YOLOv8) or 3 (YOLOv5) when `anchors` is the grid of an `input_hw` input, else None."""
    if not input_hw or min(input_hw) < max(GRID_STRIDES):
        return None
    cells = grid_cells(input_hw)
    return next((per for per in (1, 3) if anchors == per * cells), None)


def image_input_hw(shapes: Sequence[Optional[Sequence[int]]]) -> Optional[Tuple[int, int]]:
    """(height, width) of the one image input among input shapes: 4-D NCHW or NHWC with 1, 3 or 4
    channels and known sides; None when there is none or more than one (nothing to say which)."""
    found = set()
    for shape in shapes:
        if shape is None or len(shape) != 4:
            continue
        if shape[1] in (1, 3, 4) and min(shape[2:]) > 0:
            found.add((int(shape[2]), int(shape[3])))
        elif shape[3] in (1, 3, 4) and min(shape[1:3]) > 0:
            found.add((int(shape[1]), int(shape[2])))
    return found.pop() if len(found) == 1 else None
