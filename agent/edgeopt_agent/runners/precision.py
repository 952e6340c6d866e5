"""The precisions an artifact is written in or an engine is built at (the runtime table re-exports
them as `runtimes.PRECISIONS`); stdlib only, so every backend can check a name against them."""
from __future__ import annotations

from typing import Optional

from .errors import UnsupportedModelError

PRECISIONS = ("fp32", "fp16", "int8")


def check_known(precision: Optional[str]) -> None:
    """Refuse a precision name edgeopt does not know (None: not given, nothing to check)."""
    if precision is not None and precision not in PRECISIONS:
        raise UnsupportedModelError(f"unknown precision '{precision}'; available: {', '.join(PRECISIONS)}")
