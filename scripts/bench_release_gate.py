#!/usr/bin/env python3
"""Do `edgeopt fleet compare`'s verdicts hold? A simulated fleet, through the real store and comparison.

Simulated boards (scripts/fleet_simulator.py: signed result envelopes as an agent sends them, each
with its latency histogram) are stored by the fleet store's own write path, and the builds compared
by `edgeopt.fleet.releases.compare` (what `edgeopt fleet compare` runs). Two experiments, for each
spread between benchmarks of one build (`--shifts`: the log-normal SD of a whole run's shift, on top
of each run's own samples) and each number of benchmarks a build gets per board (`--runs-per-build`:
deployed that many times under one version, so the comparison resamples the runs):

    slowed     a candidate made --factor slower (1.10) than its baseline:
               how often each board says "slower", how often every board does, how often the gate fails
    redeploy   one build deployed 1 + 10 times under new versions, each compared with the one before:
               how often a board says "slower" (a false positive), how often the gate fails, and the
               most false gates in any ten re-deploys

A board's false "slower" needs its interval above 1 and its ratio above the threshold; the nominal
rate of the interval alone is (1 - confidence) / 2 = 2.5 %, and the table gives that rate too.

    python scripts/bench_release_gate.py                 # 8 boards, 300 runs a benchmark
    python scripts/bench_release_gate.py --update-docs   # rewrite the section in docs/BENCHMARKS.md
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from edgeopt.fleet import releases
from edgeopt.fleet.store import open_store
from fleet_simulator import LatencyModel, SimulatedDevice
from hostinfo import cpu_model

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "BENCHMARKS.md"
BEGIN, END = "<!-- bench_release_gate:begin -->", "<!-- bench_release_gate:end -->"
PROFILES = ("rpi4", "rpi5", "jetson-orin-nano", "x86-64")
REDEPLOYS = 10


@dataclass
class Counts:
    boards: int = 0  # board verdicts
    slower: int = 0
    interval_above_one: int = 0
    comparisons: int = 0
    every_board: int = 0  # comparisons in which every board said slower
    gated: int = 0
    worst_in_ten: int = 0  # re-deploys: the most failed gates in one series of ten
    seconds: float = 0.0
    series: List[int] = field(default_factory=list)

    def rate(self, part: int, whole: int) -> str:
        return f"{part / whole:.1%}" if whole else "-"


class Fleet:
    """Simulated boards of a few profiles, and the store their results go to."""

    def __init__(self, store, boards: int, samples: int, shift: float, rng: random.Random):
        self.store, self.samples, self.rng = store, samples, rng
        self.devices = [SimulatedDevice(f"board-{i:02d}", profile=PROFILES[i % len(PROFILES)], seed=i)
                        for i in range(boards)]
        # Boards of one profile differ too: each its own p50 (2-60 ms), spread and tail.
        self.models = [LatencyModel(p50_ms=rng.uniform(2, 60), spread=rng.uniform(0.02, 0.08),
                                    tail_share=rng.uniform(0.0, 0.05), run_shift=shift) for _ in range(boards)]
        for device in self.devices:
            self._store(device.status())

    def deploy(self, model: str, build_id: str, version: str, factor: float = 1.0, times: int = 1) -> None:
        for _ in range(times):
            for device, latency in zip(self.devices, self.models):
                meta = {"model": model, "build_id": build_id, "build_version": version, "artifact_key": "onnx-int8"}
                self._store(device.measured(f"{model}-{version}", latency.durations(self.rng, self.samples, factor),
                                            meta=meta))

    def compare(self, model: str, candidate: str, baseline: str, threshold: float) -> releases.Comparison:
        rows = self.store.results(model=model, latest=False, with_histogram=True)
        found = releases.builds(rows)
        chosen, base = releases.choose(found, model, candidate, baseline)
        return releases.compare(rows, model, chosen, base, threshold=threshold)

    def _store(self, published) -> None:
        outcome = self.store.ingest(published.topic, published.payload)
        assert outcome.status == "stored", outcome


def tally(counts: Counts, comparison: releases.Comparison) -> int:
    slower = [b for b in comparison.boards if b.verdict == releases.SLOWER]
    counts.comparisons += 1
    counts.boards += len(comparison.boards)
    counts.slower += len(slower)
    counts.interval_above_one += sum(1 for b in comparison.boards if b.ratios["p50"].low > 1)
    counts.every_board += len(slower) == len(comparison.boards)
    counts.gated += bool(comparison.gated)
    return bool(comparison.gated)


def run(args: argparse.Namespace, shift: float, times: int, folder: Path) -> Dict[str, Counts]:
    rng = random.Random(args.seed)
    with open_store(f"sqlite:///{folder / f'shift-{shift:g}-runs-{times}.db'}") as store:
        fleet = Fleet(store, args.boards, args.samples, shift, rng)
        slowed, redeploy = Counts(), Counts()
        start = time.perf_counter()
        for trial in range(args.trials):
            model = f"slowed-{trial}"
            fleet.deploy(model, f"{trial:08x}aaaaaaaa", "base", times=times)
            fleet.deploy(model, f"{trial:08x}bbbbbbbb", "slower", args.factor, times=times)
            tally(slowed, fleet.compare(model, "slower", "base", args.threshold))
        slowed.seconds = time.perf_counter() - start
        start = time.perf_counter()
        for trial in range(args.redeploy_trials):
            model = f"redeploy-{trial}"
            for k in range(REDEPLOYS + 1):
                fleet.deploy(model, f"{trial:08x}cccccccc", f"r{k}", times=times)
            failed = sum(tally(redeploy, fleet.compare(model, f"r{k}", f"r{k - 1}", args.threshold))
                         for k in range(1, REDEPLOYS + 1))
            redeploy.series.append(failed)
            redeploy.worst_in_ten = max(redeploy.worst_in_ten, failed)
        redeploy.seconds = time.perf_counter() - start
    return {"slowed": slowed, "redeploy": redeploy}


def section(args: argparse.Namespace, found: Dict[Tuple[float, int], Dict[str, Counts]]) -> str:
    lines = [
        f"Measured by `scripts/bench_release_gate.py` on {date.today().isoformat()}: {cpu_model()}, "
        f"{os.cpu_count()} CPUs. {args.boards} simulated boards ({', '.join(PROFILES)}), each its own p50 "
        f"(2-60 ms), spread (2-8 %) and tail (0-5 % of runs 1.5-3x slower); {args.samples} timed runs a benchmark; "
        f"\"benchmarks\": how many a build gets per board (deployed that many times under one version); verdict on p50 at a {args.threshold:.0%} threshold, 95 % intervals "
        f"(2,000 resamples). \"run shift\": the log-normal SD by which a whole benchmark of the same build moves "
        f"(what its own samples cannot show).",
        "",
        f"| run shift | benchmarks | {args.factor - 1:.0%} slower: boards saying slower | every board slower | gate failed "
        f"| same build: boards saying slower | interval above 1 | gate failed | most false gates in {REDEPLOYS} "
        "re-deploys | s per comparison |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (shift, times), counts in found.items():
        s, r = counts["slowed"], counts["redeploy"]
        per = (s.seconds + r.seconds) / max(s.comparisons + r.comparisons, 1)
        lines.append(
            f"| {shift:.0%} | {times} | {s.rate(s.slower, s.boards)} ({s.slower}/{s.boards}) | {s.rate(s.every_board, s.comparisons)} "
            f"| {s.rate(s.gated, s.comparisons)} | {r.rate(r.slower, r.boards)} ({r.slower}/{r.boards}) "
            f"| {r.rate(r.interval_above_one, r.boards)} | {r.rate(r.gated, r.comparisons)} ({r.gated}/{r.comparisons}) "
            f"| {r.worst_in_ten} | {per:.2f} |")
    lines += ["", f"{args.trials} slowed candidates and {args.redeploy_trials} series of {REDEPLOYS} re-deploys per "
              f"row (seed {args.seed})."]
    return "\n".join(lines)


def update_docs(text: str) -> None:
    block = f"{BEGIN}\n{text}\n{END}"
    docs = DOCS.read_text(encoding="utf-8")
    if BEGIN in docs and END in docs:
        docs = docs[: docs.index(BEGIN)] + block + docs[docs.index(END) + len(END):]
    else:
        docs = docs.rstrip("\n") + "\n\n## Release gate (scripts/bench_release_gate.py)\n\n" + block + "\n"
    DOCS.write_text(docs, encoding="utf-8")


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--boards", type=int, default=8)
    parser.add_argument("--samples", type=int, default=300, help="timed runs a benchmark")
    parser.add_argument("--trials", type=int, default=100, help="slowed candidates per run shift")
    parser.add_argument("--redeploy-trials", type=int, default=20, help=f"series of {REDEPLOYS} re-deploys per run shift")
    parser.add_argument("--shifts", default="0,0.01,0.02,0.03", help="run shifts to try (log-normal SD)")
    parser.add_argument("--runs-per-build", default="1,3", help="benchmarks per build and board to try")
    parser.add_argument("--factor", type=float, default=1.10, help="how much slower the slowed candidate is")
    parser.add_argument("--threshold", type=float, default=releases.DEFAULT_THRESHOLD)
    parser.add_argument("--seed", type=int, default=35)
    parser.add_argument("--update-docs", action="store_true", help=f"rewrite the section of {DOCS.name}")
    args = parser.parse_args(list(argv))
    found = {}
    with tempfile.TemporaryDirectory(prefix="edgeopt-release-gate-") as folder:
        for shift in (float(s) for s in args.shifts.split(",")):
            for times in (int(t) for t in args.runs_per_build.split(",")):
                found[(shift, times)] = run(args, shift, times, Path(folder))
                print(f"run shift {shift:.0%}, {times} benchmark(s) a build: done", file=sys.stderr)
    text = section(args, found)
    print(text)
    if args.update_docs:
        update_docs(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
