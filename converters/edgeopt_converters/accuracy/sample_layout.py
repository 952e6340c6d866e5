"""Where an output holds its samples: axis 0 for most models; a CTC reader exported time-major gives
[T, N, C], a recurrent state [layers, N, H]. Judges compare samples-first arrays, so such outputs are
moved before they are stacked over runs."""
from __future__ import annotations

from typing import List, Sequence, Tuple

import numpy as np


def samples_first(outputs: Sequence[np.ndarray], axes: Sequence[int] = ()) -> List[np.ndarray]:
    """`outputs` with each one's samples moved to axis 0 (`axes`: where they sit, as sample_axes finds)."""
    arrays = [np.asarray(o) for o in outputs]
    return [np.moveaxis(a, axes[i], 0) if i < len(axes) and axes[i] and a.ndim > axes[i] else a
            for i, a in enumerate(arrays)]


def sample_axes(alone: Sequence[np.ndarray], together: Sequence[np.ndarray], factor: int) -> Tuple[int, ...]:
    """Per output, the axis its samples sit on: the one axis that grew `factor`-fold when `factor` times as
    many samples were fed (`alone` and `together`: the outputs of the two runs); 0 where axis 0 did, where
    none or several did, or where the output's rank changed."""
    axes = []
    for one, many in zip(alone, together):
        one, many = np.shape(one), np.shape(many)
        grown = [k for k, (a, b) in enumerate(zip(one, many)) if b == a * factor and a != b]
        same_rest = len(one) == len(many) and all(a == b for k, (a, b) in enumerate(zip(one, many)) if k not in grown)
        axes.append(grown[0] if len(grown) == 1 and same_rest else 0)
    return tuple(axes)
