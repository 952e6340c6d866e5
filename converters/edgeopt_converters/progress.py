"""Progress reporting that the pipeline calls and the CLI renders (no-op for API users)."""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, List, Optional


class ProgressReporter:
    """Null reporter: the Python API is silent unless given one that draws.

    `step(description, total, unit)`: a piece of work of `total` units (samples, rounds, epochs),
    advanced by the callable it yields; an exception leaving it says the step failed (a
    KeyboardInterrupt: that it was interrupted)."""

    @contextlib.contextmanager
    def step(self, description: str, total: int = 0, unit: str = "samples") -> Iterator[Callable[[int], None]]:
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


def _ended(exc: Optional[BaseException]) -> str:
    return "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"


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
    def step(self, description: str, total: int = 0, unit: str = "samples"):
        task = self._bars.add_task(description, total=total or 1)
        try:
            yield lambda advance=1: self._bars.advance(task, advance)
        except BaseException as exc:  # the bar stays where the step stopped
            self._bars.update(task, description=f"{description}: {_ended(exc)}")
            self._bars.stop_task(task)
            raise
        self._bars.update(task, completed=total or 1)

    def note(self, message: str) -> None:
        self._bars.console.print(message, markup=False, style="yellow")

    def say(self, message: str) -> None:
        self._bars.console.print(message, markup=False)


BEAT_S = 30.0  # in a log, the longest silence while edgeopt works


@dataclass
class _Running:
    description: str
    total: int
    unit: str
    started: float
    done: int = 0


@dataclass
class _Activity:
    """What the beat reports: the steps running (innermost last) and the last one that ended."""
    running: List[_Running] = field(default_factory=list)
    last_ended: str = ""
    idle_since: float = 0.0  # when the last step ended (or the reporter was entered)
    last_line: float = 0.0


class LineProgress(ProgressReporter):
    """For a log or a pipe (`| tee log`, CI), where a live display would come out all at once at the
    end: a line as each step starts (with its size) and ends (with its count and time), and, while
    the reporter is entered (`with LineProgress() as progress:`), a line whenever `beat_s` seconds
    passed without one, from a timer thread, since a step may sit in one long call (an export):
    `FP32 reference 120/300, 2 min, about 3 min left`."""

    def __init__(self, stream=None, beat_s: float = BEAT_S, clock: Callable[[], float] = time.monotonic):
        self.stream = stream or _own_stderr()
        self.beat_s = beat_s
        self._clock = clock
        self._lock = threading.Lock()
        self._activity = _Activity(idle_since=clock(), last_line=clock())
        self._stop = threading.Event()
        self._beat: Optional[threading.Thread] = None
        self._headline: Optional[str] = None

    def headline(self, text: str) -> None:
        """A first line (what runs), written with the next line, so a mistake found at once is still
        one line (`error: ...`) and a run that goes on says first what it is."""
        self._headline = text

    def __enter__(self):
        self._stop.clear()
        with self._lock:
            self._activity.last_line = self._activity.idle_since = self._clock()
        self._beat = threading.Thread(target=self._beat_loop, name="edgeopt-progress-beat", daemon=True)
        self._beat.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._beat is not None:
            self._beat.join()
            self._beat = None
        return False

    @contextlib.contextmanager
    def step(self, description: str, total: int = 0, unit: str = "samples"):
        running = _Running(description, total, unit, self._clock())
        self._line(f"{description}: started" + (f" ({total} {unit})" if total > 1 else ""))
        with self._lock:
            self._activity.running.append(running)

        def advance(count: int = 1) -> None:
            running.done += count

        try:
            yield advance
        except BaseException as exc:
            self._finish(running, f"{_ended(exc)} after {self._clock() - running.started:.1f} s"
                         + (f" ({running.done}/{total})" if total > 1 else ""))
            raise
        count = f" ({running.done}/{total})" if total > 1 else ""
        self._finish(running, f"done in {self._clock() - running.started:.1f} s{count}")

    def note(self, message: str) -> None:
        self._line(message)

    def say(self, message: str) -> None:
        self._line(message)

    def _finish(self, running: _Running, outcome: str) -> None:
        with self._lock:
            if running in self._activity.running:
                self._activity.running.remove(running)
            self._activity.last_ended = running.description
            self._activity.idle_since = self._clock()
        self._line(f"{running.description}: {outcome}")

    def _line(self, text: str) -> None:
        with self._lock:
            if self._headline is not None:
                text, self._headline = f"{self._headline}\n{text}", None
            self.stream.write(text + "\n")
            self.stream.flush()
            self._activity.last_line = self._clock()

    def _beat_loop(self) -> None:
        period = min(1.0, self.beat_s / 4)
        while not self._stop.wait(period):
            with self._lock:
                quiet = self._clock() - self._activity.last_line
            if quiet + period >= self.beat_s:  # the next look would come too late
                self._line(self.beat_line())

    def beat_line(self) -> str:
        """What is going on now, for a log that has been quiet for a while."""
        now = self._clock()
        with self._lock:
            running = self._activity.running[-1] if self._activity.running else None
            last_ended, idle_since = self._activity.last_ended, self._activity.idle_since
        if running is None:
            return f"still working, {duration(now - idle_since)} " + (f"since {last_ended} ended" if last_ended else "in")
        elapsed = now - running.started
        if running.total > 1 and running.done > 0:
            left = elapsed / running.done * max(running.total - running.done, 0)
            return (f"{running.description} {running.done}/{running.total}, {duration(elapsed)}, "
                    f"about {duration(left)} left")
        if running.total > 1:
            return f"{running.description} 0/{running.total}, {duration(elapsed)}, still on the first"
        return f"{running.description}: {duration(elapsed)} so far"


def duration(seconds: float) -> str:
    """A span as a person says it in a log: `12 s`, `2 min`, `2 min 30 s`, `1 h 5 min`."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    minutes, rest = divmod(seconds, 60)
    if minutes < 10:
        return f"{minutes} min" + (f" {rest} s" if rest else "")
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h" + (f" {minutes} min" if minutes else "")


def terminal_progress() -> ProgressReporter:
    """Bars on a terminal; a line as each step starts and ends, and a beat while it runs, anywhere else."""
    try:
        interactive = sys.stderr.isatty()
    except (AttributeError, ValueError):
        interactive = False
    return RichProgress() if interactive else LineProgress()
