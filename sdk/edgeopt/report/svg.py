"""Just enough SVG to draw charts: elements with escaped attributes, scales and tick marks."""
from __future__ import annotations

import math
from typing import Iterable, List, Optional, Sequence, Tuple

from .text import esc

# Okabe-Ito, reordered: distinguishable with the common colour-vision deficiencies.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#7F7F7F", "#F0E442", "#000000")
MARKERS = ("circle", "square", "triangle", "diamond")
INK = "#1f2933"
GRID = "#e4e7eb"
MUTED = "#616e7c"


def element(tag: str, content: str = "", **attrs) -> str:
    """`<tag a="…">content</tag>`; attribute names use _ for - (stroke_width → stroke-width)."""
    parts = [tag]
    for name, value in attrs.items():
        if value is None:
            continue
        if isinstance(value, float):
            value = f"{value:.2f}".rstrip("0").rstrip(".")
        parts.append(f'{name.rstrip("_").replace("_", "-")}="{esc(value)}"')
    opening = " ".join(parts)
    return f"<{opening}>{content}</{tag}>" if content else f"<{opening}/>"


def tooltip(text: str) -> str:
    """A native hover tooltip: no script needed."""
    return element("title", esc(text))


def svg(width: int, height: int, body: Iterable[str], label: str) -> str:
    return element(
        "svg",
        tooltip(label) + "".join(body),
        xmlns="http://www.w3.org/2000/svg",
        viewBox=f"0 0 {width} {height}",
        width=width,
        role="img",
        aria_label=label,
        class_="chart",
    )


def marker(shape: str, x: float, y: float, color: str, hollow: bool = False, r: float = 5.0, tip: str = "") -> str:
    fill, stroke = ("#ffffff", color) if hollow else (color, "#ffffff")
    style = dict(fill=fill, stroke=stroke, stroke_width=1.6 if hollow else 1.0)
    content = tooltip(tip) if tip else ""
    if shape == "square":
        return element("rect", content, x=x - r * 0.9, y=y - r * 0.9, width=r * 1.8, height=r * 1.8, **style)
    if shape == "triangle":
        points = f"{x:.1f},{y - r * 1.15:.1f} {x + r:.1f},{y + r * 0.75:.1f} {x - r:.1f},{y + r * 0.75:.1f}"
        return element("polygon", content, points=points, **style)
    if shape == "diamond":
        points = f"{x:.1f},{y - r * 1.2:.1f} {x + r:.1f},{y:.1f} {x:.1f},{y + r * 1.2:.1f} {x - r:.1f},{y:.1f}"
        return element("polygon", content, points=points, **style)
    return element("circle", content, cx=x, cy=y, r=r, **style)


class Scale:
    """Maps data values in [lo, hi] onto pixels [start, end]; logarithmic when `log`."""

    def __init__(self, lo: float, hi: float, start: float, end: float, log: bool = False):
        if log and lo <= 0:
            raise ValueError("a log scale needs positive values")
        if hi <= lo:
            lo, hi = _widen(lo, log)
        self.lo, self.hi, self.start, self.end, self.log = lo, hi, start, end, log

    def __call__(self, value: float) -> float:
        f = self._fn
        share = (f(value) - f(self.lo)) / (f(self.hi) - f(self.lo))
        return self.start + share * (self.end - self.start)

    def _fn(self, value: float) -> float:
        return math.log10(value) if self.log else value

    def ticks(self, count: int = 5) -> List[float]:
        return log_ticks(self.lo, self.hi) if self.log else nice_ticks(self.lo, self.hi, count)


def fit(values: Sequence[float], log: bool = False, pad: float = 0.05, include: Optional[Sequence[float]] = None) -> Tuple[float, float]:
    """A data range around `values` (plus `include`), padded and snapped to round numbers."""
    values = list(values) + list(include or ())
    lo, hi = min(values), max(values)
    if log:
        lo, hi = math.log10(lo), math.log10(hi)
        span = (hi - lo) or 1.0
        return 10 ** (lo - span * pad), 10 ** (hi + span * pad)
    if hi == lo:
        lo, hi = _widen(lo, False)
    span = hi - lo
    floor = 0.0 if lo >= 0 else None  # padding never pushes positive data below zero
    lo, hi = lo - span * pad, hi + span * pad
    if floor is not None:
        lo = max(lo, floor)
    step = _step(lo, hi, 5)
    return math.floor(lo / step) * step, math.ceil(hi / step) * step


def wants_log(values: Sequence[float], ratio: float = 30.0) -> bool:
    """Spread over more than `ratio`× and all positive: a linear axis would crush the small ones."""
    positive = [v for v in values if v > 0]
    return len(positive) == len(values) and len(values) > 1 and max(positive) / min(positive) > ratio


def nice_ticks(lo: float, hi: float, count: int = 5) -> List[float]:
    step = _step(lo, hi, count)
    first = math.ceil(lo / step - 1e-9) * step
    ticks, value = [], first
    while value <= hi + step * 1e-9:
        ticks.append(round(value, 12))
        value += step
    return ticks


def log_ticks(lo: float, hi: float) -> List[float]:
    """Powers of ten, with 2 and 5 in between when the range spans few decades."""
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    steps = (1, 2, 5) if last - first <= 3 else (1,)
    ticks = [m * 10.0 ** e for e in range(first, last + 1) for m in steps]
    return [t for t in ticks if lo * (1 - 1e-9) <= t <= hi * (1 + 1e-9)]


def tick_label(value: float) -> str:
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 1e4 or magnitude < 1e-3:
        return f"{value:.0e}".replace("e+0", "e").replace("e-0", "e-")
    if magnitude >= 10 or float(value).is_integer():
        return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"
    return f"{value:.3g}"


def _step(lo: float, hi: float, count: int) -> float:
    raw = (hi - lo) / max(count, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    for multiple in (1, 2, 2.5, 5, 10):
        if raw <= multiple * magnitude:
            return multiple * magnitude
    return 10 * magnitude


def _widen(value: float, log: bool) -> Tuple[float, float]:
    if log:
        return value / 2, value * 2
    if value == 0:
        return -1.0, 1.0
    return value - abs(value) * 0.5, value + abs(value) * 0.5
