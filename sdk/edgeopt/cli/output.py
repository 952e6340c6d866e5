"""Terminal output helpers: rich when it is installed, plain text otherwise."""
from __future__ import annotations

import json
import os
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
    return Console(stderr=stderr, width=_fixed_width(stream))


PIPE_WIDTH = 100  # a table piped into a file or another program: readable in a log, in an editor, in CI
WIDE_WIDTH = 1000  # `edgeopt --wide ...`: every row on one line, however long
wide = False  # set by `edgeopt --wide` for the command it runs


def _fixed_width(stream):
    """The width a table is drawn at where rich should not guess: on a terminal and with COLUMNS, rich's
    own (the terminal's, COLUMNS); piped, PIPE_WIDTH, or WIDE_WIDTH with `edgeopt --wide`."""
    if stream.isatty() or os.environ.get("COLUMNS", "").isdigit():
        return None
    return WIDE_WIDTH if wide else PIPE_WIDTH


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], title: str = "", optional: Sequence[str] = (),
          whole_lines: bool = False):
    """A table whose columns wrap at spaces, never inside a name or number. Where even so it would
    not fit the terminal (with `whole_lines`: where its rows would not fit on one line each), the
    `optional` columns are left out, in that order, and its caption says so."""
    try:
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text
    except ImportError:
        return _PlainTable(headers, rows)
    cells = [[str(c) for c in r] for r in rows]
    words = [min(max([len(w) for r in cells if i < len(r) for w in r[i].split()] + [len(w) for w in h.split()]),
                 MAX_UNBROKEN) for i, h in enumerate(headers)]
    lines = [max([len(r[i]) for r in cells if i < len(r)] + [len(h)]) for i, h in enumerate(headers)]
    room = _fixed_width(sys.stdout) or Console().width
    kept = list(range(len(headers)))
    dropped = []
    needed = lines if whole_lines else words
    for name in optional:
        if sum(needed[i] + 3 for i in kept) + 1 <= room:
            break
        if name in headers:
            kept.remove(headers.index(name))
            dropped.append(name)
    widths = _fit([words[i] for i in kept], [lines[i] for i in kept], room - 3 * len(kept) - 1)
    wider = "a wider terminal" if sys.stdout.isatty() else "COLUMNS=200 or edgeopt --wide"
    caption = f"left out at this width: {', '.join(dropped)} ({wider}, or --json)" if dropped else None
    # Cells are data (device ids, model names): Text keeps rich from reading "[...]" as markup.
    t = Table(title=Text(title) if title else None, caption=Text(caption) if caption else None)
    for i, width in zip(kept, widths):
        t.add_column(headers[i], overflow="fold", width=width)
    for r in cells:
        t.add_row(*(Text(r[i]) for i in kept if i < len(r)))
    return t


def _fit(words: Sequence[int], lines: Sequence[int], room: int) -> list:
    """Column widths within `room`: every column its whole line where all fit, else at least its longest
    word (the longest words cut down first where even they do not fit), the rest of the room shared
    in proportion to what each would still take."""
    if sum(lines) <= room:
        return list(lines)
    widths = list(words)
    while sum(widths) > room and max(widths) > MIN_FOLDED:  # too narrow even so: the longest words fold first
        widths[widths.index(max(widths))] -= 1
    spare = room - sum(widths)
    wants = [line - word for line, word in zip(lines, words)]
    if spare > 0 and sum(wants):
        total = sum(wants)
        for i, want in enumerate(wants):
            widths[i] += min(want, spare * want // total)
    return widths


MAX_UNBROKEN = 32  # a longer word folds rather than push the table off the screen
MIN_FOLDED = 8  # where even the words do not fit, the longest fold down to this, numbers last
