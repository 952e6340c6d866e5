"""Which runtimes this machine can use now, and why not where it cannot.

    unavailable_reason("tensorrt")   # None, or "TensorRT is not installed (...); on a Jetson ..."
    runtime_report()                 # {"tensorrt": {"available": False, "reason": "..."}, ...}

Each row's `available` (its backend's `unavailable_reason`) answers. Asking imports the runtime (and,
for TensorRT, initialises CUDA), so a daemon asks once, or in a child process.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

from .. import runtimes
from ..errors import UserError


def unavailable_reason(runtime: str) -> Optional[str]:
    """None when `runtime` can run here, else why it cannot, in words the user can act on."""
    rows = runtimes.BY_NAME
    if runtime not in rows:
        return f"unknown runtime '{runtime}'; known: {', '.join(rows)}"
    try:
        return rows[runtime].unavailable_reason()
    except UserError as exc:
        return str(exc)


def runtime_report(names: Optional[Sequence[str]] = None) -> Dict[str, Dict[str, Any]]:
    """Every runtime (or those named): available or not, why not, and what its row says it does not offer."""
    report = {}
    for runtime in runtimes.RUNTIMES if names is None else names:
        reason = unavailable_reason(runtime)
        report[runtime] = {"available": reason is None, "reason": reason}
        row = runtimes.BY_NAME.get(runtime)
        if row is not None and row.notes:
            report[runtime]["notes"] = row.notes
    return report

