"""Import a Python file the user named (`file.py:factory`, `--metric file.py:fn`) and take one function."""
from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from typing import Callable

from edgeopt_agent.errors import UserError


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
        raise UserError(f"importing {path} failed: {type(exc).__name__}: {exc}") from exc
    fn = getattr(module, name, None)
    if not callable(fn):
        available = sorted(n for n in dir(module) if callable(getattr(module, n)) and not n.startswith("_"))
        raise UserError(f"{path} has no function '{name}'; callables there: {', '.join(available) or 'none'}")
    return fn
