"""Checks on plain JSON-like values, shared by the wire protocol, the benchmark spec and the fleet."""
from __future__ import annotations

import math
import sys
from typing import Any


def is_int(value: Any) -> bool:
    """A whole number that is not a bool (JSON has no bools-as-ints)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """A finite float, or an int that converts to one (a bigger int would overflow in math)."""
    if isinstance(value, float):
        return math.isfinite(value)
    return is_int(value) and -sys.float_info.max <= value <= sys.float_info.max


def finite(value: Any) -> Any:
    """`value` with every NaN or infinity (which JSON cannot carry) replaced by None, tuples as lists."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value
