"""The ncnn backend (runner.py): a `.param` graph and its `.bin` weights in one edgeopt bundle, on the CPU.
Importing this package imports neither numpy nor ncnn."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Optional

if TYPE_CHECKING:  # pragma: no cover
    from ...runtimes import Runtime

__all__ = ["runner_class", "spec_options", "unavailable_reason"]


def runner_class() -> type:
    from .runner import NcnnRunner

    return NcnnRunner


def unavailable_reason(runtime: "Runtime") -> Optional[str]:
    """None when ncnn imports here; otherwise MissingExtraError names the extra."""
    from .runner import import_ncnn

    import_ncnn()
    return None


def spec_options(spec: Any) -> Dict[str, Any]:
    """What the runner takes from a benchmark spec: where to extract the bundle."""
    return {"extract_dir": spec.bundle_dir}
