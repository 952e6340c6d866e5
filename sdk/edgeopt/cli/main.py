"""The `edgeopt` console script: checks that the host CLI's packages are installed, then runs it.

A board installs edgeopt without them (`edgeopt-agent` is argparse), so there `edgeopt` says in
one line which extra to install instead of failing on an import.
"""
from __future__ import annotations

import sys

from ..errors import MissingExtraError, require

CLI_PACKAGES = ("click", "rich")


def main(argv=None) -> int:
    try:
        for module in CLI_PACKAGES:
            require(module, "cli", "the edgeopt command line")
    except MissingExtraError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from .group import run

    return run(argv)


if __name__ == "__main__":
    sys.exit(main())
