"""Import a Python file the user named (`file.py:factory`, `--metric file.py:fn`) and take one function."""
from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import sys
import traceback
from pathlib import Path
from typing import Callable, Optional

from edgeopt_agent.errors import UserError

TORCHVISION_FIX = "EDGEOPT_TORCHVISION=1 bash scripts/setup.sh; README: 'A torchvision model'"


def user_function(path: Path, name: str, what: str) -> Callable:
    """`name` from the module at `path`; `what` says in errors what it is for ("model", "--metric")."""
    if not path.is_file():
        raise UserError(f"{what} file not found: {path}")
    module_name = f"_edgeopt_user_{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:8]}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise UserError(torchvision_problem(exc) or f"importing {path} failed: {type(exc).__name__}: {exc}") from exc
    fn = getattr(module, name, None)
    if not callable(fn):
        available = sorted(n for n in dir(module) if callable(getattr(module, n)) and not n.startswith("_"))
        raise UserError(f"{path} has no function '{name}'; callables there: {', '.join(available) or 'none'}")
    return fn


def torchvision_problem(exc: BaseException) -> Optional[str]:
    """One line naming the fix, where user code failed because torchvision is missing or cannot run beside
    this torch (a build for another torch, such as the CUDA one beside the CPU torch edgeopt pins, fails at
    import with `operator torchvision::nms does not exist`); None for any other failure."""
    torch = _version("torch")
    wanted = f"torchvision {matching_torchvision(torch)}, the CPU build for torch {torch} ({TORCHVISION_FIX})"
    if isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] == "torchvision":
        return f"the model's code imports torchvision, which is not installed: install {wanted}"
    in_torchvision = any(f"{'/'}torchvision{'/'}" in frame.filename.replace("\\", "/")
                         for frame in traceback.extract_tb(exc.__traceback__))
    if not in_torchvision and "torchvision::" not in str(exc):
        return None
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return (f"torchvision {_version('torchvision')} cannot run beside torch {torch} ({first}: a build for another "
            f"torch); install {wanted}")


def matching_torchvision(torch_version: str) -> str:
    """The torchvision release made with a torch release: torch 2.Y.Z goes with torchvision 0.(Y+15).Z
    (2.13.0 with 0.28.0, 2.14.1 with 0.29.1); scripts/setup.sh uses the same rule."""
    release = torch_version.split("+")[0].split(".")
    if len(release) < 3 or release[0] != "2" or not release[1].isdigit():
        return "(the release made with this torch)"
    return f"0.{int(release[1]) + 15}.{release[2]}"


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "(version unknown)"
