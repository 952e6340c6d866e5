"""Each model's builds in order, each board's latency on each, and what changed from the build before
on that board: the ratio with its interval and verdict (releases.compare), and a new runtime or agent
version beside it. What the report's release history draws."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .latency_ratio import pooled_percentiles
from .releases import DEFAULT_THRESHOLD, NOT_COMPARED, Build, Side, build_key, builds, compare, models

HISTORY_RESAMPLES = 1000  # per board and pair of builds: the report compares every consecutive pair


@dataclass
class Cell:
    """One board on one build."""

    p50_ms: Optional[float]
    counted: int
    left_out: int
    runtime: str
    agent_version: str
    verdict: Optional[str] = None  # against the board's previous build: slower, faster, no change, unknown...
    ratio: Optional[float] = None
    low: Optional[float] = None
    high: Optional[float] = None
    changes: List[str] = field(default_factory=list)  # "onnxruntime 1.17.1 -> 1.18.0", "agent 0.1.0 -> 0.2.0"


@dataclass
class BoardHistory:
    device_id: str
    profile: Optional[str]
    cells: Dict[Tuple[str, str], Cell]  # by build key


@dataclass
class ModelHistory:
    model: str
    builds: List[Build]
    boards: List[BoardHistory]

    @property
    def regressions(self) -> int:
        return sum(1 for b in self.boards for c in b.cells.values() if c.verdict == "slower")


def release_history(rows: Sequence[Mapping[str, Any]], threshold: float = DEFAULT_THRESHOLD,
                    resamples: int = HISTORY_RESAMPLES) -> List[ModelHistory]:
    """Every model's history from its results (with their histograms; all of them, not only the latest)."""
    found = []
    for model in models(rows):
        of_model = [r for r in rows if r.get("model") == model]
        ordered = builds(of_model)
        boards: Dict[str, BoardHistory] = {}
        for row in of_model:
            boards.setdefault(row["device_id"], BoardHistory(row["device_id"], row.get("profile"), {}))
        for board in boards.values():
            for build in ordered:
                mine = [r for r in of_model if r["device_id"] == board.device_id and build_key(r) == build.key]
                if mine:
                    board.cells[build.key] = _cell(mine)
        _judge_steps(of_model, model, ordered, boards, threshold, resamples)
        found.append(ModelHistory(model, ordered, sorted(boards.values(), key=lambda b: (b.profile or "", b.device_id))))
    return found


def _cell(rows: List[Mapping[str, Any]]) -> Cell:
    side = Side.of(list(rows))
    p50 = pooled_percentiles(side.histograms, (50,))[50] if side.histograms else side.median("p50_ms")
    return Cell(p50, len(side.counted), len(side.left_out), ", ".join(side.runtimes()),
                ", ".join(side.versions("agent_version")))


def _judge_steps(rows, model: str, ordered: List[Build], boards: Dict[str, BoardHistory], threshold: float,
                 resamples: int) -> None:
    """Each board's cell against the same board's previous build: one comparison per pair of builds."""
    for k, build in enumerate(ordered):
        by_previous: Dict[int, List[BoardHistory]] = {}
        for board in boards.values():
            if build.key not in board.cells:
                continue
            previous = next((j for j in range(k - 1, -1, -1) if ordered[j].key in board.cells), None)
            if previous is not None:
                by_previous.setdefault(previous, []).append(board)
        for j, members in by_previous.items():
            names = {b.device_id for b in members}
            result = compare([r for r in rows if r["device_id"] in names], model, build, ordered[j],
                             threshold=threshold, resamples=resamples)
            for pair in result.boards:
                board = boards[pair.device_id]
                cell, before = board.cells[build.key], board.cells[ordered[j].key]
                if cell.verdict is not None and pair.verdict == NOT_COMPARED:
                    continue  # another artifact of the board was compared
                ratio = pair.ratios.get("p50")
                cell.verdict = pair.verdict
                if ratio is not None:
                    cell.ratio, cell.low, cell.high = ratio.estimate, ratio.low, ratio.high
                elif "p50" in pair.point_ratios:
                    cell.ratio = pair.point_ratios["p50"]["ratio"]
                for what, old, new in (("", before.runtime, cell.runtime), ("agent ", before.agent_version,
                                                                           cell.agent_version)):
                    change = _change(what, old, new)
                    if change and change not in cell.changes:
                        cell.changes.append(change)


def _change(what: str, old: str, new: str) -> Optional[str]:
    """'agent 0.1.0 → 0.2.0', 'onnxruntime 1.17.1 → 1.18.0', 'onnxruntime 1.18.0 → tflite 2.3.0'; None if the same."""
    if not old or not new or old == new:
        return None
    old_name, _, old_version = old.partition(" ")
    new_name, _, new_version = new.partition(" ")
    if old_name == new_name and old_version and new_version and "," not in old + new:
        return f"{what}{old_name} {old_version} → {new_version}"
    return f"{what}{old} → {new}"
