"""The report's three kinds of chart, drawn as inline SVG: no script, no network, no plotting library.

- latency_chart: one row per (board, artifact), a box-style range min · p50–p90 · p99 · max
- scatter_chart: points with colour (board) and marker (format), optional reference lines
- time_chart: one line per device over time, broken where the device went quiet
- build_chart: one line per board across a model's builds, its regressions marked
"""
from __future__ import annotations

import datetime as _dt
import math
import statistics
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

from .svg import GRID, INK, MUTED, Scale, element, fit, marker, svg, tick_label, tooltip, wants_log
from .text import esc

WIDTH = 960
FONT = 12
CHAR_W = 6.6  # average glyph width of the 12px UI font, to size label columns


@dataclass(frozen=True)
class LatencyRow:
    label: str
    color: str
    p50: float
    min: Optional[float] = None
    p90: Optional[float] = None
    p99: Optional[float] = None
    max: Optional[float] = None
    tip: str = ""

    def values(self) -> List[float]:
        return [v for v in (self.min, self.p50, self.p90, self.p99, self.max) if v is not None]


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    color: str
    shape: str = "circle"
    hollow: bool = False
    label: str = ""
    tip: str = ""
    invalid: bool = False  # its outputs did not match the FP32 reference: crossed out, labelled so


INVALID_COLOR = "#C0392B"
INVALID_MARK = " ✗ invalid"


@dataclass
class Series:
    name: str
    color: str
    points: List[Tuple[float, float]] = field(default_factory=list)  # (epoch seconds, value)


# --- latency ----------------------------------------------------------------------------------

ROW_H = 26


def latency_chart(rows: Sequence[LatencyRow], title: str, unit: str = "ms") -> str:
    """Horizontal ranges on a shared axis, logarithmic when they span more than 30×."""
    label_w = min(max(len(_clip(r.label)) for r in rows) * CHAR_W + 16, 320)
    left, right, top, bottom = label_w, 24, 12, 44
    height = top + ROW_H * len(rows) + bottom
    values = [v for r in rows for v in r.values()]
    log = wants_log(values)
    lo, hi = fit(values, log=log, include=None if log else [0.0])
    x = Scale(lo, hi, left, WIDTH - right, log=log)
    body = _x_axis(x, top, height - bottom, f"latency ({unit}){' — log scale' if log else ''}")
    for i, row in enumerate(rows):
        cy = top + ROW_H * i + ROW_H / 2
        body.append(_latency_row(row, x, cy, unit))
        body.append(element("text", esc(_clip(row.label)), x=left - 8, y=cy, text_anchor="end",
                            dominant_baseline="middle", font_size=FONT, fill=INK))
    return svg(WIDTH, height, body, title)


def _latency_row(row: LatencyRow, x: Scale, cy: float, unit: str) -> str:
    parts = []
    span = row.values()
    if len(span) > 1:
        parts.append(element("line", x1=x(min(span)), x2=x(max(span)), y1=cy, y2=cy, stroke=row.color, stroke_width=1.5))
        for end in (min(span), max(span)):
            parts.append(element("line", x1=x(end), x2=x(end), y1=cy - 5, y2=cy + 5, stroke=row.color, stroke_width=1.5))
    if row.p90 is not None and row.p90 >= row.p50:
        parts.append(element("rect", x=x(row.p50), y=cy - 8, width=max(x(row.p90) - x(row.p50), 1.0), height=16,
                             fill=row.color, fill_opacity=0.35, stroke=row.color, stroke_width=1.2, rx=2))
    parts.append(element("line", x1=x(row.p50), x2=x(row.p50), y1=cy - 9, y2=cy + 9, stroke=INK, stroke_width=2.5))
    if row.p99 is not None:
        parts.append(marker("diamond", x(row.p99), cy, row.color, r=4.5))
    tip = row.tip or row.label
    # One transparent band over the whole row carries the tooltip, so hovering anywhere shows it.
    parts.append(element("rect", tooltip(tip), x=x.start, y=cy - ROW_H / 2, width=x.end - x.start, height=ROW_H,
                         fill="transparent"))
    return element("g", "".join(parts))


# --- scatter ----------------------------------------------------------------------------------


def scatter_chart(points: Sequence[Point], title: str, x_title: str, y_title: str, x_ref: Optional[float] = None,
                  y_ref: Optional[float] = None, x_log: Optional[bool] = None, zero: bool = False,
                  height: int = 420) -> str:
    """zero: both axes start at 0 (for quantities whose ratios matter, like time and energy)."""
    left, right, top, bottom = 70, 24, 16, 48
    xs, ys = [p.x for p in points], [p.y for p in points]
    log = wants_log(xs) if x_log is None else x_log
    x_include = [v for v in (x_ref, 0.0 if zero and not log else None) if v is not None]
    y_include = [v for v in (y_ref, 0.0 if zero else None) if v is not None]
    x = Scale(*fit(xs, log=log, include=x_include), left, WIDTH - right, log=log)
    y = Scale(*fit(ys, include=y_include), height - bottom, top)
    body = _x_axis(x, top, height - bottom, x_title + (" — log scale" if log else ""))
    body += _y_axis(y, left, WIDTH - right, y_title)
    frame = (left, top, WIDTH - right, height - bottom)
    rules = []  # the dashed reference lines: labels keep off them where they can
    if x_ref is not None:
        body.append(element("line", x1=x(x_ref), x2=x(x_ref), y1=top, y2=height - bottom, stroke=MUTED,
                            stroke_dasharray="4 4", stroke_width=1))
        rules.append((x(x_ref) - 1, top, x(x_ref) + 1, height - bottom))
    if y_ref is not None:
        body.append(element("line", x1=left, x2=WIDTH - right, y1=y(y_ref), y2=y(y_ref), stroke=MUTED,
                            stroke_dasharray="4 4", stroke_width=1))
        rules.append((left, y(y_ref) - 1, WIDTH - right, y(y_ref) + 1))
    # Labels avoid every marker and each other; drawn last, over the lines.
    placed: List[Tuple[float, float, float, float]] = [(x(p.x) - 6, y(p.y) - 6, x(p.x) + 6, y(p.y) + 6) for p in points]
    for p in points:
        px, py = x(p.x), y(p.y)
        body.append(marker(p.shape, px, py, p.color, hollow=p.hollow, r=6, tip=p.tip or p.label))
        if p.invalid:
            body.append(_cross(px, py, 8))
    if len(points) <= 24:
        labels = [_place_label(text, px, py, placed, rules, frame) for text, px, py in _point_labels(points, x, y)]
        body += [label for label in labels if label]
    return svg(WIDTH, height, body, title)


def _point_labels(points: Sequence[Point], x: Scale, y: Scale) -> List[Tuple[str, float, float]]:
    """One label per spot: points drawn on top of each other (every FP32 baseline sits at 1×, 0) share a label
    naming each of them once; a name already said close by (several boards, one artifact) is not repeated."""
    spots: List[Tuple[float, float, List[str]]] = []
    for p in points:
        if not p.label:
            continue
        px, py = x(p.x), y(p.y)
        spot = next((s for s in spots if abs(s[0] - px) < 4 and abs(s[1] - py) < 4), None)
        if spot is None:
            spots.append((px, py, [p.label]))
        elif p.label not in spot[2]:
            spot[2].append(p.label)
    labels: List[Tuple[str, float, float]] = []
    for px, py, names in spots:
        text = ", ".join(names)
        if not any(name == text and abs(px - lx) < 40 and abs(py - ly) < 20 for name, lx, ly in labels):
            labels.append((text, px, py))
    return labels


def _cross(px: float, py: float, r: float) -> str:
    """An X over a marker: this measurement is invalid."""
    return "".join(element("line", x1=px - r, y1=py - r * s, x2=px + r, y2=py + r * s, stroke=INVALID_COLOR,
                           stroke_width=2) for s in (1, -1))


# Where a label may go around its point: (dx, dy, anchor), nearest first; diagonals clear the reference lines.
LABEL_SPOTS = ((9, 0, "start"), (-9, 0, "end"), (8, -12, "start"), (8, 13, "start"), (-8, -12, "end"),
               (-8, 13, "end"), (0, -14, "middle"), (0, 16, "middle"), (8, -26, "start"), (8, 27, "start"))


def _place_label(label: str, px: float, py: float, placed: List[Tuple[float, float, float, float]],
                 rules: Sequence[Tuple[float, float, float, float]], frame: Tuple[float, float, float, float]) -> str:
    """Put a point's label beside it where it overlaps no other label or marker, off the reference lines if any
    such spot is free; leave it out when no spot is. A white halo keeps it legible over a line it must cross."""
    text = _clip(label, 40)
    w, h = len(text) * CHAR_W * 0.92, FONT + 2
    boxes = []
    for dx, dy, anchor in LABEL_SPOTS:
        x0 = px + dx if anchor == "start" else px + dx - w if anchor == "end" else px - w / 2
        box = (x0, py + dy - h / 2, x0 + w, py + dy + h / 2)
        inside = box[0] >= frame[0] and box[2] <= frame[2] and box[1] >= frame[1] and box[3] <= frame[3]
        if inside and not any(_overlaps(box, other) for other in placed):
            boxes.append((any(_overlaps(box, rule) for rule in rules), box, dx, dy, anchor))
    if not boxes:
        return ""
    _, box, dx, dy, anchor = min(boxes, key=lambda b: b[0])  # min() keeps the nearest of equals
    placed.append(box)
    return element("text", esc(text), x=px + dx, y=py + dy, text_anchor=anchor, dominant_baseline="middle",
                   font_size=FONT - 1, fill=MUTED, stroke="#ffffff", stroke_width=3, stroke_linejoin="round",
                   paint_order="stroke")


def _overlaps(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


# --- time series ------------------------------------------------------------------------------

MAX_POINTS = 300
TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 2 * 3600, 3 * 3600, 6 * 3600, 12 * 3600,
              86400, 2 * 86400, 7 * 86400, 14 * 86400, 28 * 86400)


def time_chart(series: Sequence[Series], title: str, y_title: str, t_range: Tuple[float, float], zero: bool = True,
               height: int = 220) -> str:
    """Lines over a shared time axis (UTC). Long silences break the line instead of bridging it."""
    left, right, top, bottom = 70, 24, 12, 40
    values = [v for s in series for _, v in s.points]
    y = Scale(*fit(values, include=[0.0] if zero else None), height - bottom, top)
    start, end = t_range
    if end - start < 60:  # a single moment, or a few seconds: show a minute around it
        start, end = (start + end) / 2 - 30, (start + end) / 2 + 30
    t = Scale(start, end, left, WIDTH - right)
    body = _time_axis(t, top, height - bottom) + _y_axis(y, left, WIDTH - right, y_title)
    for s in series:
        for segment in _segments(_thin(sorted(s.points))):
            path = " ".join(f"{'M' if i == 0 else 'L'}{t(ts):.1f},{y(v):.1f}" for i, (ts, v) in enumerate(segment))
            if len(segment) == 1:
                body.append(element("circle", tooltip(s.name), cx=t(segment[0][0]), cy=y(segment[0][1]), r=2.5, fill=s.color))
            else:
                body.append(element("path", tooltip(s.name), d=path, fill="none", stroke=s.color, stroke_width=1.8,
                                    stroke_linejoin="round"))
    return svg(WIDTH, height, body, title)


def _thin(points: List[Tuple[float, float]]) -> List[Tuple[float, float]]:
    """At most MAX_POINTS points: the mean of each equal-time bucket (empty buckets stay empty)."""
    if len(points) <= MAX_POINTS:
        return points
    start, end = points[0][0], points[-1][0]
    width = (end - start) / MAX_POINTS or 1.0
    buckets: dict = {}
    for ts, v in points:
        buckets.setdefault(min(int((ts - start) / width), MAX_POINTS - 1), []).append((ts, v))
    return [(statistics.fmean(p[0] for p in b), statistics.fmean(p[1] for p in b)) for _, b in sorted(buckets.items())]


def _segments(points: List[Tuple[float, float]]) -> List[List[Tuple[float, float]]]:
    if len(points) < 3:
        return [points] if points else []
    steps = [b[0] - a[0] for a, b in zip(points, points[1:])]
    limit = max(statistics.median(steps) * 5, 1e-9)
    segments, current = [], [points[0]]
    for step, point in zip(steps, points[1:]):
        if step > limit:
            segments.append(current)
            current = []
        current.append(point)
    segments.append(current)
    return segments


def _time_axis(t: Scale, top: float, base: float) -> List[str]:
    span = t.hi - t.lo
    step = next((s for s in TIME_STEPS if span / s <= 8), TIME_STEPS[-1])
    first = (int(t.lo) // step + 1) * step
    parts = [element("line", x1=t.start, x2=t.end, y1=base, y2=base, stroke=MUTED, stroke_width=1)]
    last_day = None
    tick = first
    while tick <= t.hi:
        moment = _dt.datetime.fromtimestamp(tick, tz=_dt.timezone.utc)
        day = moment.strftime("%m-%d")
        clock = moment.strftime("%H:%M:%S" if step < 60 else "%H:%M")
        label = day if step >= 86400 else (f"{day} {clock}" if day != last_day else clock)
        last_day = day
        px = t(tick)
        parts.append(element("line", x1=px, x2=px, y1=top, y2=base, stroke=GRID, stroke_width=1))
        parts.append(element("text", esc(label), x=px, y=base + 16, text_anchor="middle", font_size=FONT - 1, fill=MUTED))
        tick += step
    parts.append(element("text", "time (UTC)", x=(t.start + t.end) / 2, y=base + 34, text_anchor="middle",
                         font_size=FONT, fill=INK))
    return parts


# --- builds -------------------------------------------------------------------------------------

REGRESSION_COLOR = "#C0392B"


@dataclass
class BuildSeries:
    """One board across a model's builds: (build position, latency, a regression there, tooltip)."""

    name: str
    color: str
    points: List[Tuple[int, float, bool, str]] = field(default_factory=list)


def build_chart(series: Sequence[BuildSeries], builds: Sequence[str], title: str, y_title: str = "p50 latency (ms)",
                height: int = 260) -> str:
    """Lines across builds, oldest left; a regression is a red triangle over the board's point, a build the
    board did not run leaves the line out there. The axis starts at zero, so heights compare as ratios."""
    left, right, top, bottom = 70, 24, 16, 56
    values = [v for s in series for _, v, _, _ in s.points]
    y = Scale(*fit(values, include=[0.0]), height - bottom, top)
    step = (WIDTH - left - right) / max(len(builds), 1)
    x = [left + step * (i + 0.5) for i in range(len(builds))]
    body = _y_axis(y, left, WIDTH - right, y_title)
    body.append(element("line", x1=left, x2=WIDTH - right, y1=height - bottom, y2=height - bottom, stroke=MUTED,
                        stroke_width=1))
    every = max(1, math.ceil(len(builds) * 110 / (WIDTH - left - right)))  # a label needs about 110 px
    for i, label in enumerate(builds):
        if i % every == 0 or i == len(builds) - 1:
            body.append(element("text", esc(_clip(label, 18)), x=x[i], y=height - bottom + 16, text_anchor="middle",
                                font_size=FONT - 1, fill=MUTED))
    body.append(element("text", "build, oldest first", x=(left + WIDTH - right) / 2, y=height - bottom + 38,
                        text_anchor="middle", font_size=FONT, fill=INK))
    for s in series:
        points = sorted(s.points)
        for (i, v, _, _), (j, w, _, _) in zip(points, points[1:]):
            dash = None if j == i + 1 else "4 4"  # a build between them the board did not run
            body.append(element("line", x1=x[i], y1=y(v), x2=x[j], y2=y(w), stroke=s.color, stroke_width=1.8,
                                stroke_dasharray=dash))
        for i, v, regression, tip in points:
            body.append(marker("circle", x[i], y(v), s.color, r=4, tip=tip))
            if regression:
                body.append(marker("triangle", x[i], y(v) - 12, REGRESSION_COLOR, r=6, tip=tip))
    return svg(WIDTH, height, body, title)


# --- axes -------------------------------------------------------------------------------------


def _x_axis(x: Scale, top: float, base: float, title: str) -> List[str]:
    parts = [element("line", x1=x.start, x2=x.end, y1=base, y2=base, stroke=MUTED, stroke_width=1)]
    for tick in x.ticks(6):
        px = x(tick)
        parts.append(element("line", x1=px, x2=px, y1=top, y2=base, stroke=GRID, stroke_width=1))
        parts.append(element("text", esc(tick_label(tick)), x=px, y=base + 16, text_anchor="middle",
                             font_size=FONT - 1, fill=MUTED))
    parts.append(element("text", esc(title), x=(x.start + x.end) / 2, y=base + 34, text_anchor="middle",
                         font_size=FONT, fill=INK))
    return parts


def _y_axis(y: Scale, left: float, right: float, title: str) -> List[str]:
    parts = [element("line", x1=left, x2=left, y1=y.end, y2=y.start, stroke=MUTED, stroke_width=1)]
    for tick in y.ticks(5):
        py = y(tick)
        parts.append(element("line", x1=left, x2=right, y1=py, y2=py, stroke=GRID, stroke_width=1))
        parts.append(element("text", esc(tick_label(tick)), x=left - 8, y=py, text_anchor="end",
                             dominant_baseline="middle", font_size=FONT - 1, fill=MUTED))
    mid = (y.start + y.end) / 2
    parts.append(element("text", esc(title), x=16, y=mid, text_anchor="middle", font_size=FONT, fill=INK,
                         transform=f"rotate(-90 16 {mid:.1f})"))
    return parts


def _clip(label: str, limit: int = 46) -> str:
    return label if len(label) <= limit else label[: limit - 1] + "…"


# --- legend (HTML, so it wraps with the page) ---------------------------------------------------


def legend(items: Sequence[Tuple[str, str, str, bool]]) -> str:
    """items: (name, colour, marker shape, hollow)."""
    entries = []
    for name, color, shape, hollow in items:
        swatch = element("svg", marker(shape, 8, 8, color, hollow=hollow, r=5), xmlns="http://www.w3.org/2000/svg",
                         viewBox="0 0 16 16", width=16, height=16, aria_hidden="true")
        entries.append(f'<span class="key">{swatch}{esc(name)}</span>')
    return f'<div class="legend">{"".join(entries)}</div>'


# --- roofline ----------------------------------------------------------------------------------


def roofline_chart(points: Sequence[Point], peaks: Sequence[Tuple[str, float]], bandwidth: float, title: str,
                   height: int = 420) -> str:
    """Attained throughput (GOP/s) against arithmetic intensity (ops/byte), both log scale, under
    the board's roofs: bandwidth x intensity up to each precision's peak."""
    left, right, top, bottom = 70, 24, 16, 48
    ridges = [peak / bandwidth for _, peak in peaks]
    xs = [p.x for p in points] + ridges
    ys = [p.y for p in points] + [peak for _, peak in peaks]
    x = Scale(*fit(xs, log=True, pad=0.08), left, WIDTH - right, log=True)
    y = Scale(*fit([max(v, 1e-6) for v in ys], log=True, pad=0.08), height - bottom, top, log=True)
    body = _x_axis(x, top, height - bottom, "arithmetic intensity (ops/byte) — log scale")
    body += _y_axis(y, left, WIDTH - right, "GOP/s — log scale")
    for name, peak in peaks:
        ridge = peak / bandwidth
        x0 = max(x.lo, y.lo / bandwidth)
        roof = [(x0, bandwidth * x0), (ridge, peak), (x.hi, peak)]
        path = " ".join(f"{x(a):.1f},{y(min(max(b, y.lo), y.hi)):.1f}" for a, b in roof)
        body.append(element("polyline", tooltip(f"{name} roof: {peak:g} GOP/s, ridge at {ridge:.1f} ops/byte"),
                            points=path, fill="none", stroke=INK, stroke_width=1.5))
        body.append(element("text", esc(f"{name} {peak:g} GOP/s"), x=WIDTH - right - 4, y=y(peak) - 6,
                            text_anchor="end", font_size=FONT - 1, fill=MUTED))
    for p in points:
        body.append(marker(p.shape, x(p.x), y(max(p.y, y.lo)), p.color, hollow=p.hollow, r=4, tip=p.tip or p.label))
    return svg(WIDTH, height, body, title)
