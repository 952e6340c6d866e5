"""How a step says it could not make its artifact."""
from __future__ import annotations

from edgeopt_agent.errors import UserError


class StepFailed(UserError):
    """This artifact cannot be built (one line, why); the conversion goes on without it.
    `step`: the name of the step that failed, set by the build that ran it."""

    step: str = ""


class QuantizerCrashed(StepFailed):
    """The quantizer itself raised after the graph was calibrated: a bug or a layout it does not expect,
    which keeping what it fails on in float may get around (precision/crash_repair.py)."""


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    detail = text[0] if text else ""
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
