"""The benchmark's results as data: what a run measured, in numbers and intervals, written to and read
from JSON here only. The done-when check (realbench.done_when) and the report (realbench.report, the
BENCHMARKS.md tables) read these numbers; nothing reads a printed figure back.

A results file: {"schema": SCHEMA, "run": {device, speed, host, load, started, finished, ...},
"models": {model: {row name: row}}, "done_when": summary}. A row of an artifact that ran holds
"verdict", "task_kept", "task" (the case's figure, for people), "p50_ms", "speedup" (an Interval of its
speed-up against FP32 measured on this host, 95 %) and, for a board of another architecture,
"predicted" ({"ms": latency, "speedup": against FP32's}); a row that did not run holds "error". The
"_edgeopt" row holds the conversion: "recommended", "convert_s", "failed_artifacts", "int8", "kinds".
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, Optional

SCHEMA = 2


@dataclass(frozen=True)
class Interval:
    """A speed-up against FP32 with its 95 % interval (FP32 itself: 1.0 [1.0, 1.0])."""
    estimate: float
    low: float
    high: float

    def as_dict(self) -> Dict[str, float]:
        return {k: round(v, 4) for k, v in asdict(self).items()}


FP32_SPEED = Interval(1.0, 1.0, 1.0)


def measured_speedup(row: dict) -> Optional[Interval]:
    """A row's measured speed-up against FP32, or None where it was not timed."""
    value = row.get("speedup")
    return Interval(value["estimate"], value["low"], value["high"]) if isinstance(value, dict) else None


def predicted_speedup(row: dict) -> Optional[float]:
    """A row's speed-up against FP32 predicted for the board, or None."""
    value = row.get("predicted")
    return value.get("speedup") if isinstance(value, dict) else None


class ResultsError(ValueError):
    pass


def save(path: Path, run: dict, models: Dict[str, Dict[str, dict]], summary: dict) -> None:
    path.write_text(json.dumps({"schema": SCHEMA, "run": run, "models": models, "done_when": summary}, indent=1,
                               default=str) + "\n")


def load(path: Path) -> dict:
    """A results file written by `save`; one of another schema (the printed strings of schema 1) is refused."""
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ResultsError(f"{path}: not a results file of schema {SCHEMA} (rerun scripts/bench_real_models.py --json)")
    return data
