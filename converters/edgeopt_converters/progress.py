"""Progress reporting that the pipeline calls and the CLI renders (no-op for API users)."""
from __future__ import annotations

import contextlib
import os
import sys
from typing import Callable, Iterator


class ProgressReporter:
    """Null reporter: the Python API is silent unless given one that draws."""

    @contextlib.contextmanager
    def step(self, description: str, total: int = 0) -> Iterator[Callable[[int], None]]:
        yield lambda advance=1: None

    def note(self, message: str) -> None:
        pass

    def say(self, message: str) -> None:
        """A line of what is going on, between the steps (the quickstart's own steps)."""


def _own_stderr():
    """A private handle on stderr, so the bars keep drawing while a step silences fd 2."""
    try:
        return os.fdopen(os.dup(sys.stderr.fileno()), "w", buffering=1)
    except (AttributeError, OSError, ValueError):  # stderr is not a real file (e.g. captured)
        return sys.stderr


class RichProgress(ProgressReporter):
    """Progress bars on stderr, one line per step."""

    def __init__(self):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress as _Bars, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.console = Console(file=_own_stderr())
        self._bars = _Bars(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                           TimeElapsedColumn(), console=self.console, transient=False,
                           # sys.stderr stays the real one, so a step's captured_output also catches what
                           # libraries log through handlers made while the bars draw (torch's guard tracebacks)
                           redirect_stdout=False, redirect_stderr=False)

    def __enter__(self):
        self._bars.__enter__()
        return self

    def __exit__(self, *exc):
        return self._bars.__exit__(*exc)

    @contextlib.contextmanager
    def step(self, description: str, total: int = 0):
        task = self._bars.add_task(description, total=total or 1)
        try:
            yield lambda advance=1: self._bars.advance(task, advance)
        finally:
            self._bars.update(task, completed=total or 1)

    def note(self, message: str) -> None:
        self._bars.console.print(message, markup=False, style="yellow")

    def say(self, message: str) -> None:
        self._bars.console.print(message, markup=False)


class LineProgress(ProgressReporter):
    """For a log or a pipe (`| tee log`, CI): one line as each step ends, with its count and time;
    a live display there would come out all at once at the end, wrapped and cut."""

    def __init__(self, stream=None):
        self.stream = stream or _own_stderr()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    @contextlib.contextmanager
    def step(self, description: str, total: int = 0):
        import time

        started, done = time.monotonic(), [0]

        def advance(count: int = 1) -> None:
            done[0] += count

        try:
            yield advance
        except BaseException:
            self._line(f"{description}: failed after {time.monotonic() - started:.1f} s")
            raise
        count = f" ({done[0]}/{total})" if total > 1 else ""
        self._line(f"{description}: done in {time.monotonic() - started:.1f} s{count}")

    def note(self, message: str) -> None:
        self._line(message)

    def say(self, message: str) -> None:
        self._line(message)

    def _line(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()


def terminal_progress() -> ProgressReporter:
    """Bars on a terminal; a line per finished step anywhere else."""
    try:
        interactive = sys.stderr.isatty()
    except (AttributeError, ValueError):
        interactive = False
    return RichProgress() if interactive else LineProgress()
