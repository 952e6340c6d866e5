"""Timing a conversion's artifacts on this host, interleaved, each against the FP32 of its format."""
from __future__ import annotations

from typing import List, Optional

from ..context import ConversionContext
from ..passes._quiet import captured_output
from ..progress import ProgressReporter
from ..runtime import open_predictor
from .host_timing import ORT_SIDE_BY_SIDE, HostTiming, time_interleaved


# A speed-up whose interval still holds the recommendation's threshold after the minute gets up to this much
# more: on a busy host a real 1.3x can take minutes of rounds to show, and timing costs little beside the rest.
UNDECIDED_EXTRA_S = 120.0


def time_artifacts(ctx: ConversionContext, records: List, progress: ProgressReporter, max_rounds: int = 40,
                   decide_at: Optional[float] = None) -> None:
    """Interleaved rounds until every speed-up over FP32 of its format is known within 5 % (or a minute)."""
    feed = ctx.evaluation.first_feed(ctx.batch)
    fp32 = {r.planned.format: r.planned.key for r in records if r.planned.precision == "fp32"}
    baselines = {r.planned.key: fp32[r.planned.format] for r in records if r.planned.format in fp32}
    with captured_output("load artifacts for timing"):
        predictors = {r.planned.key: open_predictor(ctx.work / r.path, ctx.threads,
                                                    ORT_SIDE_BY_SIDE if r.planned.format == "onnx" else None)
                      for r in records}
    try:
        runs = {key: p.bound_call(feed) for key, p in predictors.items()}
        with progress.step(f"time on host (batch {ctx.batch}, {ctx.threads} threads)", max_rounds, "rounds") as advance:
            timings = time_interleaved(runs, baselines, max_rounds=max_rounds, on_round=advance, rank_fastest=True,
                                       decide_at=decide_at, extra_seconds=UNDECIDED_EXTRA_S)
    finally:
        for p in predictors.values():
            p.close()
    for record in records:
        record.host_timing = timings[record.planned.key]
        _warn_if_drifting(ctx, record.planned.key, record.host_timing)


DRIFT_WARNING = 0.10  # the speed-up's two halves of rounds disagree by more than this


def _warn_if_drifting(ctx: ConversionContext, key: str, timing: HostTiming) -> None:
    speedup = timing.speedup
    if speedup is None or speedup.drift is None or speedup.drift <= DRIFT_WARNING:
        return
    load = f" (load average {timing.load[0]:.1f} -> {timing.load[1]:.1f})" if timing.load else ""
    ctx.warn(f"{key}: its speed-up moved {speedup.drift:.0%} between the first and second half of the "
                        f"timing rounds{load}: the host was busy; time it again on a quieter one")
