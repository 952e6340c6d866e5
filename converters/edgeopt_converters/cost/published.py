"""Published board measurements: latencies others measured on the boards edgeopt converts for, with their sources.

The data ship with the device profiles (`device_profiles/published/`): `measurements.csv`, one row per
published latency, and `sources.csv`, one row per page or paper it was read from (title, address,
date). A row names its board (a profile name), runtime (a row of the runtime table), the model (an
architecture `scripts/arch_zoo.py` rebuilds), the input shape, the precision it computed in (that of
the edgeopt artifact it stands for: ncnn's default options compute an FP32 model in FP16 on CPUs with
FP16 arithmetic) and the precision the source names (`published_precision`), threads (empty: not stated,
the board's default), the latency in ms and how it was published (`published`: the figure as the
source prints it, `statistic`: mean, avg, 1000/fps, ...), the processor clock where the source states
one other than the profile's (`clock_mhz`), the board's settings, the source's id and where in the
source the figure is (`locator`), and its split.

The split was fixed before anything was fitted, by `split_of`: a hash of the board, model and input
shape with SPLIT_SEED puts about HELDOUT_PERCENT of the (board, model, input) groups in "heldout", so
every runtime measured on one model and board lands on the same side and the held-out rows are models
the priors never saw on that board. `load_measurements` refuses a row whose split is not the rule's.

A user adds measurements of a board of their own in a CSV of the same columns (docs/BOARDS.md) and
passes its path (and, for a board edgeopt does not ship, its profile's name in `boards`); its sources
go in a sources.csv beside it.
"""
from __future__ import annotations

import csv
import hashlib
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from edgeopt_agent import runtimes
from edgeopt_agent.errors import UserError

MEASUREMENTS = "measurements.csv"
SOURCES = "sources.csv"
COLUMNS = ("board", "runtime", "model", "input", "precision", "published_precision", "threads", "latency_ms", "statistic", "published",
           "clock_mhz", "settings", "source", "locator", "split")
SOURCE_COLUMNS = ("id", "title", "url", "date", "notes")
SPLITS = ("train", "heldout")
SPLIT_SEED = "edgeopt-published-split-v1"
HELDOUT_PERCENT = 30


class PublishedDataError(UserError):
    """A published-measurements file is malformed; the message names the file, line and column."""


@dataclass(frozen=True)
class Source:
    id: str
    title: str
    url: str
    date: str
    notes: str = ""


@dataclass(frozen=True)
class Measurement:
    board: str
    runtime: str
    model: str
    input: Tuple[int, ...]
    precision: str  # what it computed in: the precision of the edgeopt artifact it stands for
    published_precision: str  # what the source calls it
    threads: Optional[int]  # None: not stated (the board's default threads)
    latency_ms: float
    statistic: str
    published: str
    clock_mhz: Optional[float]  # None: the profile's clock
    settings: str
    source: Source
    locator: str
    split: str
    where: str = ""  # file:line, for messages

    @property
    def group(self) -> Tuple[str, str, Tuple[int, ...]]:
        """What the split and the runtime comparisons are made by: board, model and input shape."""
        return self.board, self.model, self.input

    @property
    def shape_text(self) -> str:
        return "x".join(str(d) for d in self.input)


def split_of(board: str, model: str, shape: str) -> str:
    """The split rule fixed before fitting: "heldout" for about HELDOUT_PERCENT of (board, model, input) groups."""
    digest = hashlib.sha256(f"{SPLIT_SEED}|{board}|{model}|{shape}".encode()).hexdigest()
    return "heldout" if int(digest[:8], 16) % 100 < HELDOUT_PERCENT else "train"


def bundled_folder() -> Path:
    """device_profiles/published/, as installed."""
    if sys.version_info >= (3, 9):
        from importlib import resources

        return Path(str(resources.files("edgeopt_device_profiles") / "published"))
    import importlib

    return Path(importlib.import_module("edgeopt_device_profiles").__file__).parent / "published"


def load_sources(path: Path) -> Dict[str, Source]:
    found: Dict[str, Source] = {}
    for line, row in _rows(path, SOURCE_COLUMNS):
        where = f"{path.name}:{line}"
        for column in ("id", "title", "url", "date"):
            if not row[column].strip():
                raise PublishedDataError(f"{where}: '{column}' is empty; every source needs its id, title, address and date")
        if row["id"] in found:
            raise PublishedDataError(f"{where}: source id '{row['id']}' appears twice")
        found[row["id"]] = Source(row["id"], row["title"], row["url"], row["date"], row["notes"])
    return found


def load_measurements(paths: Iterable[Path] = (), bundled: bool = True, boards: Sequence[str] = ()) -> List[Measurement]:
    """The bundled measurements (unless `bundled=False`) and those of each CSV in `paths`, each checked;
    a CSV's sources come from the sources.csv beside it (and the bundled ones). `boards`: names of
    custom profiles (a file of one's own) that rows may name besides the bundled boards."""
    folder = bundled_folder()
    sources = load_sources(folder / SOURCES)
    files = ([folder / MEASUREMENTS] if bundled else []) + [Path(p) for p in paths]
    found: List[Measurement] = []
    for path in files:
        own = path.parent / SOURCES
        known = dict(sources)
        if own.is_file() and own.resolve() != (folder / SOURCES).resolve():
            known.update(load_sources(own))
        found.extend(_measurement(row, f"{path.name}:{line}", known, boards) for line, row in _rows(path, COLUMNS))
    return found


def _rows(path: Path, columns: Sequence[str]):
    if not Path(path).is_file():
        raise PublishedDataError(f"{path}: no such file")
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in columns if c not in (reader.fieldnames or ())]
        if missing:
            raise PublishedDataError(f"{Path(path).name}: missing column(s) {', '.join(missing)}; "
                                     f"the columns are {', '.join(columns)}")
        for row in reader:
            yield reader.line_num, {c: (row.get(c) or "").strip() for c in columns}


def _measurement(row: Dict[str, str], where: str, sources: Dict[str, Source], boards: Sequence[str] = ()) -> Measurement:
    from edgeopt_agent.profiles import profile_names

    def one_of(column: str, allowed: Sequence[str]) -> str:
        if row[column] not in allowed:
            raise PublishedDataError(f"{where}: {column} '{row[column]}' is not one of {', '.join(allowed)}")
        return row[column]

    def number(column: str, kind=float, optional: bool = False):
        text = row[column]
        if not text and optional:
            return None
        try:
            value = kind(text)
        except ValueError:
            raise PublishedDataError(f"{where}: {column} '{text}' is not a number") from None
        if not (math.isfinite(value) and value > 0):
            raise PublishedDataError(f"{where}: {column} must be above 0, got {text}")
        return value

    board = one_of("board", tuple(profile_names()) + tuple(boards))
    runtime = one_of("runtime", runtimes.RUNTIMES)
    precision = one_of("precision", runtimes.PRECISIONS)
    published_precision = one_of("published_precision", runtimes.PRECISIONS)
    try:
        shape = tuple(int(d) for d in row["input"].split("x"))
    except ValueError:
        shape = ()
    if len(shape) < 2 or min(shape) < 1:
        raise PublishedDataError(f"{where}: input '{row['input']}' is not a shape like 1x3x224x224")
    for column in ("model", "statistic", "published", "locator"):
        if not row[column]:
            raise PublishedDataError(f"{where}: '{column}' is empty")
    if row["source"] not in sources:
        raise PublishedDataError(f"{where}: source '{row['source']}' is not in {SOURCES}")
    split = one_of("split", SPLITS)
    rule = split_of(board, row["model"], row["input"])
    if split != rule:
        raise PublishedDataError(f"{where}: split '{split}' is not the rule's '{rule}' (split_of: the held-out "
                                 f"rows are fixed by a hash of board, model and input, before any fit)")
    return Measurement(board, runtime, row["model"], shape, precision, published_precision,
                       number("threads", int, optional=True),
                       number("latency_ms"), row["statistic"], row["published"], number("clock_mhz", optional=True),
                       row["settings"], sources[row["source"]], row["locator"], split, where)


def runtime_pairs(rows: Sequence[Measurement]) -> List[Tuple[Measurement, Measurement]]:
    """Every pair of rows of two runtimes on the same board, model, input and published precision, each
    runtime as it is deployed: its rows with the most threads (threads not stated: the board's default,
    all cores). A runtime measured by several sources pairs each of them."""
    deployed: Dict[Tuple, List[Measurement]] = {}
    for row in rows:
        key = row.group + (row.published_precision, row.runtime)
        held = deployed.get(key, [])
        most = max((r.threads or 10 ** 6 for r in held), default=0)
        if (row.threads or 10 ** 6) > most:
            deployed[key] = [row]
        elif (row.threads or 10 ** 6) == most:
            held.append(row)
    by_group: Dict[Tuple, List[List[Measurement]]] = {}
    for key, held in deployed.items():
        by_group.setdefault(key[:-1], []).append(held)
    return [(a, b) for runtimes_rows in by_group.values() for i, first in enumerate(runtimes_rows)
            for second in runtimes_rows[i + 1:] for a in first for b in second]
