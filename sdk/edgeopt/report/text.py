"""Turning untrusted values into safe, short text: escaping, numbers, times.

Everything the report shows comes from devices or files we do not control, so values are
checked for their type here (a "number" may arrive as a string or a list) and every string is
escaped before it reaches HTML or SVG.
"""
from __future__ import annotations

import datetime as _dt
import html
import math
from typing import Any, Optional


def esc(value: Any) -> str:
    """HTML/SVG-escaped text of any value, quotes included (safe inside attributes)."""
    return html.escape("" if value is None else str(value), quote=True)


def number(value: Any) -> Optional[float]:
    """`value` as a finite float, or None when it is not a real number (bools are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def text(value: Any, default: str = "") -> str:
    """A plain string for a label: None becomes `default`, anything else its str()."""
    return default if value is None else str(value)


def short(value: Any, unit: str = "") -> str:
    """A number short and still telling (1234, 12.35, 0.00436), "-" when missing."""
    x = number(value)
    if x is None:
        return "-"
    if abs(x) >= 100:
        out = f"{x:.0f}"
    elif abs(x) >= 1:
        out = f"{x:.2f}"
    elif x == 0:
        out = "0"
    else:
        out = f"{x:#.3g}"  # '#' keeps trailing zeros: 0.900, 0.0116
    return out + unit


def whole(value: Any) -> str:
    """A count or sequence number: 1150, never 1150.00; "-" when missing."""
    x = number(value)
    return "-" if x is None else f"{x:.0f}"


def fixed(value: Any, digits: int = 1, unit: str = "") -> str:
    """A reading with a set precision, e.g. 58.2 °C; "-" when missing; never "-0.0"."""
    x = number(value)
    return "-" if x is None else f"{round(x, digits) + 0.0:.{digits}f}{unit}"


def signed(value: Any, unit: str = "") -> str:
    """Like short(), with an explicit sign: accuracy drops read +0.50 / -0.25."""
    x = number(value)
    if x is None:
        return "-"
    return ("+" if x > 0 else "") + short(x) + unit


def count(n: int, noun: str, plural: str = "") -> str:
    """'1 artifact', '2 artifacts', '1 telemetry sample'."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def when(epoch: Any) -> str:
    """Seconds since the epoch as "2026-11-21 10:40:57 UTC", "-" when missing."""
    x = number(epoch)
    if x is None:
        return "-"
    try:
        moment = _dt.datetime.fromtimestamp(x, tz=_dt.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return "-"
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def size(num_bytes: Any) -> str:
    x = number(num_bytes)
    if x is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(x) < 1024 or unit == "GiB":
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1024
    return "-"
