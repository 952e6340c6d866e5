"""The `edgeopt` console script: checks that the host CLI's packages are installed, then runs it.

A board installs edgeopt without them (`edgeopt-agent` is argparse), so there `edgeopt` says in
one line which extra to install instead of failing on an import.

`main(argv)` is the command for Python callers and tests: a KeyboardInterrupt goes through it
to the caller (pytest stops with its summary instead of counting a failed test). `console()` is
the process: it alone turns signals into an exit code, and only it changes signal handlers.
"""
from __future__ import annotations

import contextlib
import signal
import sys

from ..errors import MissingExtraError, require

CLI_PACKAGES = ("click", "rich")


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C would be, so a command cleans up on either (a convert's build folder)."""


def main(argv=None) -> int:
    try:
        for module in CLI_PACKAGES:
            require(module, "cli", "the edgeopt command line")
    except MissingExtraError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from .group import run

    return run(argv)


def console(argv=None) -> int:
    """The `edgeopt` process: main() with Ctrl-C and SIGTERM said as `interrupted` (exit 130, 143)."""
    with terminate_as_interrupt():
        try:
            return main(argv)
        except KeyboardInterrupt as exc:
            print("terminated" if isinstance(exc, Terminated) else "interrupted", file=sys.stderr)
            return 128 + (signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT)


@contextlib.contextmanager
def terminate_as_interrupt():
    """SIGTERM raises Terminated in the main thread while inside; the previous handler after."""

    def terminated(signum, frame):
        raise Terminated()

    try:
        previous = signal.signal(signal.SIGTERM, terminated)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(console())
