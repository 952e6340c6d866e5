"""Terminal output helpers: rich when it is installed, plain text otherwise."""
from __future__ import annotations

import json
import sys
from typing import Any, Callable, Sequence

import click


class _PlainConsole:
    def print(self, obj="", **_options):
        sys.stdout.write(f"{obj}\n")


class _PlainTable:
    def __init__(self, headers: Sequence[str], rows: Sequence[Sequence[str]]):
        self.headers, self.rows = list(headers), [list(map(str, r)) for r in rows]

    def __str__(self) -> str:
        widths = [max(len(h), *(len(r[i]) for r in self.rows)) if self.rows else len(h)
                  for i, h in enumerate(self.headers)]
        lines = ["  ".join(h.ljust(w) for h, w in zip(self.headers, widths))]
        lines.append("  ".join("-" * w for w in widths))
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in self.rows]
        return "\n".join(lines)


def json_or_shown(result: Any, as_json: bool, show: Callable[[Any], None]) -> None:
    """`result` as indented JSON (--json), else drawn by the command's `show`."""
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        show(result)


def console(stderr: bool = False):
    try:
        from rich.console import Console
    except ImportError:
        return _PlainConsole()
    stream = sys.stderr if stderr else sys.stdout
    # Piped into a file or another program, a table must not be cut to 80 columns.
    width = None if stream.isatty() else 1000
    return Console(stderr=stderr, width=width)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], title: str = ""):
    try:
        from rich.table import Table
        from rich.text import Text
    except ImportError:
        return _PlainTable(headers, rows)
    # Cells are data (device ids, model names): Text keeps rich from reading "[...]" as markup.
    t = Table(title=Text(title) if title else None)
    for h in headers:
        t.add_column(h, overflow="fold")
    for r in rows:
        t.add_row(*(Text(str(c)) for c in r))
    return t
