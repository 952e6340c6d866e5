"""Which runtime runs which file, decided from the file alone (stdlib only, nothing loaded).

The runtimes and their formats (suffix, identifying bytes) are listed in edgeopt_agent.runtimes.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Union

from .. import runtimes
from .errors import ArtifactError, UnsupportedModelError
from .precision import check_known


def detect_format(path: Union[str, Path]) -> str:
    """The format of `path` ("onnx", "tflite", ...), from its suffix or, failing that, its first bytes."""
    path = Path(path)
    if not path.is_file():
        raise ArtifactError(f"artifact not found: {path}")
    formats = runtimes.FORMAT_TABLE.values()
    suffix = path.suffix.lower()
    for fmt in formats:
        if suffix == fmt.suffix:
            return fmt.name
    with path.open("rb") as f:
        head = f.read(64)
    for fmt in formats:
        if fmt.magic is not None and head[fmt.magic[0]:fmt.magic[0] + len(fmt.magic[1])] == fmt.magic[1]:
            return fmt.name
    suffixes = [f.suffix for f in formats]
    expected = " or ".join(filter(None, (", ".join(suffixes[:-1]), suffixes[-1])))
    raise ArtifactError(f"{path} is not a model: expected a {expected} file")


def resolve_runtime(path: Union[str, Path], runtime: Optional[str] = None) -> str:
    """The runtime that will run `path`: `runtime` if given and able to, else the format's default."""
    fmt = detect_format(path)
    allowed = runtimes.FORMAT_RUNTIMES[fmt]
    if runtime is None:
        return allowed[0]
    known = runtimes.RUNTIMES
    if runtime not in known:
        raise UnsupportedModelError(f"unknown runtime '{runtime}'; available: {', '.join(known)}")
    if runtime not in allowed:
        raise UnsupportedModelError(f"runtime '{runtime}' cannot run a .{fmt} file; use: {', '.join(allowed)}")
    return runtime


def check_precision(runtime: Optional[str], precision: Optional[str]) -> None:
    """Refuse a precision the runtime cannot act on (runtime None: not known yet, only the name is checked)."""
    if precision is None:
        return
    check_known(precision)
    engines = runtimes.ENGINE_RUNTIMES
    if runtime is not None and runtime not in engines:
        raise UnsupportedModelError(
            f"precision applies to runtimes that build an engine on the board ({', '.join(engines)}); "
            f"with runtime '{runtime}' the artifact's own precision is what runs: leave precision out"
        )
