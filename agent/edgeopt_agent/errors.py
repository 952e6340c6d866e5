"""The one exception hierarchy shared by the agent and the host tools.

`UserError` is something the user can fix (bad path, bad shape, unknown board, missing extra):
the CLI prints its message as one line and exits non-zero. Anything else that escapes is a bug
and keeps its traceback under `-v`.
"""
from __future__ import annotations

import importlib
from types import ModuleType


class EdgeoptError(Exception):
    """Root of every error edgeopt raises on purpose."""


class UserError(EdgeoptError):
    """Bad input or environment the user can fix; the message says how."""


class ArtifactError(UserError):
    """The file is missing, is not a model, or the runtime cannot parse it."""


class MissingExtraError(UserError):
    """An optional dependency is not installed."""

    def __init__(self, module: str, extra: str, purpose: str = ""):
        self.module = module
        self.extra = extra
        what = f" (needed for {purpose})" if purpose else ""
        super().__init__(
            f"the Python package '{module}' is not installed{what}; "
            f"install it with: pip install 'edgeopt[{extra}]'"
        )


def require(module: str, extra: str, purpose: str = "") -> ModuleType:
    """Import an optional dependency or fail with the extra that provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        # Only the module itself being absent is a missing extra; a broken install of it
        # (one of its own imports failing) must surface as what it is.
        missing = getattr(exc, "name", None) or ""
        if missing and module != missing and not module.startswith(missing + "."):
            raise
        raise MissingExtraError(module, extra, purpose) from exc
