"""Accuracy-aware mixed precision: when static INT8 is not ok (failed, or unresolved: the data cannot
tell whether it keeps the budget), search for what makes it ok.

Every attempt is re-quantized and judged by the same per-output verdicts as every artifact; the
best attempt so far (by verdict, then decisions lost, then cosine) is the base of the next stage,
and the search ends at the first attempt judged ok. Its time is --time-budget's, counted from the
first search (phase_clock.SEARCH), not from the start of the conversion. The stages, cheapest first:

1. Structure: the post-processing tail (graph_regions.py: nodes after the last heavy compute on
   every path to an output, such as a detector's box decoding and box/score concatenation) in
   float: its most sensitive node alone, then all of it. These nodes have no real arithmetic.
2. Calibrator: the other activation-range methods (minmax, percentile, entropy) with the best
   float set so far. Outliers in a few calibration samples can make minmax scales coarse for every
   later input; a clipped range can instead cut off values that matter: which wins is measured.
3. Input-side prefix: the first share of the graph's multiply-accumulates (in graph order) in
   float, bisected between none and half (PREFIX_STEPS attempts) for the smallest share whose
   verdict no longer fails; at half, each calibrator is tried until one passes. A CNN's early high-resolution layers carry their INT8 error into
   everything after them; a prefix measured by the verdict finds that without ranking single nodes.
   Before it, one attempt quantizes only the multiply-accumulate ops (mac_only.py).
4. Sensitivity: nodes ranked by the SQNR they lose (sensitivity.py, on a few calibration samples,
   measured on the best attempt so far), the most sensitive 1, 2, 4, 8, ... kept in float on top,
   until three attempts in a row gain nothing, MAX_TRIES, or half of the quantized nodes.

The best attempt replaces the whole-graph artifact; the manifest says what each attempt was and
which nodes stayed float.
"""
from __future__ import annotations

import os
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from edgeopt_agent.errors import require

from .. import accuracy as acc
from ..accuracy.judges import SEVERITY
from .data_bound import data_bound
from .graph_regions import mac_shares, post_processing_tail
from .mac_only import mac_only_stage, restricted
from ..passes.errors import StepFailed
from ..passes.quantize_onnx import CALIBRATION_METHODS
from ..recipe import with_exclusions, with_int8
from .sensitivity import node_sensitivity, quantized_nodes
from ..source.tensors import feed_batch

if TYPE_CHECKING:
    from ..context import ConversionContext

MAX_TRIES = 8  # sensitivity attempts
STALE_TRIES = 3
SENSITIVITY_SAMPLES = 4
MAX_FLOAT_SHARE = 0.5  # past half of the quantized nodes in float, INT8 has little left to give
MAX_PREFIX_SHARE = 0.5  # of the graph's multiply-accumulates
PREFIX_STEPS = 4  # half, then bisection to 1/16 of the MACs
NOT_TRIED, NOT_BUILT = "not tried", "not built"  # an attempt's verdict when the budget or the build stopped it


def _badness(a) -> tuple:
    """Lower is better: the verdict, then decisions lost, then cosine."""
    return (SEVERITY[a.verdict], a.drop_points if a.drop_points is not None else 0.0, -a.min_cosine)


def _summary(a, floats: int, stage: str = "whole graph", method: Optional[str] = None) -> Dict[str, Any]:
    out = {"float_nodes": floats, "stage": stage, "verdict": a.verdict, "reason": a.reason,
           "drop_points": a.drop_points, "cosine": round(a.min_cosine, 6)}
    if method:
        out["calibrate_method"] = method
    return out


class _Search:
    """The best attempt so far and the attempts made, each built and judged like any artifact."""

    def __init__(self, ctx: ConversionContext, record, prepared: Path, validate):
        self.ctx, self.record, self.prepared, self.validate = ctx, record, prepared, validate
        self.target = ctx.work / record.planned.filename
        self.best, self.best_path = record, self.target
        self.tries: List[Dict[str, Any]] = [_summary(record.accuracy, 0, method=record.planned.int8.calibrate_method)]
        self.calibrations: Dict[str, Path] = {}
        self.last_passed = False
        self.budget_points = ctx.tolerances.budget_points
        self.seconds: List[float] = []  # how long each attempt took
        self.out_of_time = False

    @property
    def failed(self) -> bool:
        """The best attempt so far is not ok yet, and another attempt could make it ok: the search goes on.
        Once the best is open only for want of data (data_bound), no split can close it."""
        return self.best.accuracy.verdict != acc.OK and data_bound(self.best.accuracy, self.budget_points) is None

    @property
    def floats(self) -> List[str]:
        return list(self.best.planned.int8.nodes_to_exclude)

    @property
    def method(self) -> str:
        return self.best.planned.int8.calibrate_method

    def attempt(self, nodes: Sequence[str], stage: str, method: Optional[str] = None,
                fewer_floats: bool = False, op_types: Optional[Tuple[str, ...]] = None) -> Optional[bool]:
        """Build and judge one attempt; True if it beat the best so far, None if it could not be built.
        With `fewer_floats`, a passing attempt with fewer float nodes than a passing best beats it too, as
        long as the decisions it loses, as measured, are within the budget (not only its bound)."""
        if self._would_overrun():
            self.out_of_time = True
            self.tries.append({"float_nodes": len(nodes), "stage": stage, "verdict": NOT_TRIED,
                               "reason": f"--time-budget {self.ctx.options.time_budget:g} s would be overrun"})
            return None
        began = time.monotonic()
        try:
            return self._attempt(nodes, stage, method, fewer_floats, op_types)
        finally:
            self.seconds.append(time.monotonic() - began)

    def _would_overrun(self) -> bool:
        """The next attempt, expected to take as long as the slowest so far, would end past the budget."""
        return self.out_of_time or self.ctx.seconds_left() < max(self.seconds, default=0.0)

    def _attempt(self, nodes: Sequence[str], stage: str, method: Optional[str], fewer_floats: bool,
                 op_types: Optional[Tuple[str, ...]]) -> Optional[bool]:
        method = method or self.method
        own = tuple(self.record.planned.int8.nodes_to_exclude)  # what a quantizer repair kept in float stays so
        nodes = list(dict.fromkeys(own + tuple(nodes)))
        planned = with_exclusions(self.record.planned, nodes, method)
        # `op_types` restricts what is quantized; by default as in the best attempt so far.
        planned = with_int8(planned, restricted(planned.int8, op_types or self.best.planned.int8.op_types))
        trial = self.ctx.work / ".steps" / f"mixed-{len(self.tries)}.onnx"
        try:
            info = _quantize(self.ctx, planned, self.prepared, trial, self._calibration(method),
                             self.record.planned.int8.op_types)
        except StepFailed as exc:
            self.tries.append({"float_nodes": len(nodes), "stage": stage, "verdict": NOT_BUILT, "reason": str(exc),
                               "calibrate_method": method})
            return None
        accuracy, io = self.validate(planned, trial)
        self.tries.append(_summary(accuracy, len(nodes), stage, method))
        if planned.int8.op_types != self.record.planned.int8.op_types:
            self.tries[-1]["op_types"] = list(planned.int8.op_types)
        self.last_passed = accuracy.verdict == acc.OK
        smaller = (fewer_floats and accuracy.verdict == acc.OK and not self.failed and len(nodes) < len(self.floats)
                   and SEVERITY[accuracy.verdict] <= SEVERITY[self.best.accuracy.verdict]
                   and (accuracy.drop_points or 0.0) <= self.budget_points)
        if _badness(accuracy) >= _badness(self.best.accuracy) and not smaller:
            return False
        self.best = replace(self.record, planned=planned, accuracy=accuracy, io=io, info=dict(self.record.info, **info))
        self.best_path = trial
        return True

    def _calibration(self, method: str) -> Path:
        """Where the ranges of `method` are cached: the whole-graph artifact's own for its method."""
        from ..passes.quantize_onnx import calibration_cache

        if method == self.record.planned.int8.calibrate_method:
            return calibration_cache(self.target)
        return self.calibrations.setdefault(method, self.ctx.work / ".steps" / f"calibration-{method}.json")


def search_mixed_precision(ctx: ConversionContext, record, prepared: Path, validate):
    item = record.planned
    onnx = require("onnx", "convert")
    feeds = [feed for feed, _ in ctx.calibration.batches(feed_batch(ctx.specs))][:SENSITIVITY_SAMPLES]
    target = ctx.work / item.filename
    candidates = quantized_nodes(target)
    ranked = node_sensitivity(prepared, target, feeds, ctx.accuracy_runs.threads, candidates)
    search = _Search(ctx, record, prepared, validate)
    report: Dict[str, Any] = {"whole_graph": search.tries[0], "tries": search.tries,
                              "sensitivity": [s.to_dict() for s in ranked[:10]]}

    graph = onnx.load(str(prepared), load_external_data=False)  # what the structural stages read
    tail_nodes = set(post_processing_tail(graph)) & candidates
    tail = [s.name for s in ranked if s.name in tail_nodes] + sorted(tail_nodes - {s.name for s in ranked})
    report["post_processing_tail"] = tail
    if tail:
        search.attempt(tail[:1], "post-processing tail: its most sensitive node")
        if search.failed and len(tail) > 1:
            search.attempt(tail, "post-processing tail")

    if search.failed:
        for method in CALIBRATION_METHODS:
            if method != search.method and search.failed and not search.out_of_time:
                search.attempt(search.floats, f"calibrator {method}", method)

    if search.failed and not search.out_of_time:
        mac_only_stage(search, report)

    if search.failed and not search.out_of_time:
        _prefix_stage(search, mac_shares(graph), candidates, report)

    if search.failed and not search.out_of_time:
        _sensitivity_stage(ctx, search, ranked, candidates, feeds, report)

    if search.out_of_time:
        report["stopped"] = (f"--time-budget {ctx.options.time_budget:g} s reached after {len(search.seconds)} "
                             f"attempts of about {statistics.median(search.seconds or [0]):.0f} s")
        may_find = "a split judged ok" if search.failed else "a split that keeps more in INT8"
        ctx.warn(f"{item.key}: mixed precision stopped at the time budget ({report['stopped']}); "
                            f"a larger --time-budget may find {may_find}")
    if search.best is not record:
        os.replace(search.best_path, target)
    best = search.best
    floats = search.floats
    report["float_nodes"] = floats
    report["calibrate_method"] = best.planned.int8.calibrate_method
    bound = data_bound(best.accuracy, search.budget_points)
    if bound and best is not record:
        report["stopped"] = f"the best attempt is {bound}"
    if best.accuracy.verdict != acc.OK:
        report["result"] = no_split_found(search, len(candidates))
        within = " in the attempts the time budget allowed" if search.out_of_time else ""
        ctx.warn(f"{item.key}: mixed precision found no split judged ok{within}; the best is "
                            f"{best.accuracy.verdict} ({best.accuracy.reason})")
    else:
        method = best.planned.int8.calibrate_method
        calibrated = f" with {method} calibration" if method != item.int8.calibrate_method else ""
        how = f"{len(floats)} nodes kept in float{calibrated}" if floats else f"{method} calibration"
        if best.planned.int8.op_types != item.int8.op_types:
            how += ", only " + "/".join(best.planned.int8.op_types) + " in INT8"
        report["result"] = f"{best.accuracy.verdict}: {how}"
        ctx.note(f"{item.key}: whole-graph INT8 was {record.accuracy.verdict} ({record.accuracy.reason}); {how} make it "
                         f"{best.accuracy.verdict}" + (f": {', '.join(floats)}" if floats else ""))
    best.info["mixed_precision"] = report
    best.info["float_nodes"] = floats
    best.info["scheme"] = best.planned.int8.scheme
    return best


def no_split_found(search: _Search, candidates: int) -> str:
    """What a search that found no passing split judged, as it happened: the float nodes and the
    calibrators of its judged attempts, and where the time budget stopped it, if it did."""
    judged = [t for t in search.tries if t["verdict"] not in (NOT_TRIED, NOT_BUILT)]
    methods = list(dict.fromkeys(t["calibrate_method"] for t in judged if t.get("calibrate_method")))
    untried = [m for m in CALIBRATION_METHODS if m not in methods]
    if untried:
        calibrators = f"{' and '.join(methods)} calibration only (not {' or '.join(untried)})"
    else:
        calibrators = f"every calibrator ({', '.join(methods)})"
    most = max((t["float_nodes"] for t in judged), default=0)
    text = (f"no split found: in {len(judged)} judged attempts (the whole graph's included), with up to {most} of "
            f"{candidates} quantized nodes in float and {calibrators}, no verdict was ok (the best: "
            f"{search.best.accuracy.verdict})")
    if search.out_of_time:
        stage = next((t["stage"] for t in search.tries if t["verdict"] == NOT_TRIED), "its next")
        text += (f"; --time-budget {search.ctx.options.time_budget:g} s stopped the search before its {stage} "
                 f"attempt, so nothing after it was tried")
    return text


def _prefix_stage(search: _Search, shares: Sequence[Tuple[str, float]], candidates, report: Dict[str, Any]) -> None:
    """Bisect the share of MACs kept in float from the input side (see the module doc); `shares` as
    graph_regions.mac_shares gives them."""
    if not shares:
        return
    base = search.floats

    def prefix(share: float) -> List[str]:
        return base + [name for name, done in shares if name in candidates and name not in set(base)
                       and done <= share + 1e-9]

    low, high, share = 0.0, None, MAX_PREFIX_SHARE
    nodes = prefix(share)
    if len(nodes) == len(base):
        return
    # Which calibrator suits the rest of the graph is measured again with the prefix in float.
    for method in [search.method] + [m for m in CALIBRATION_METHODS if m != search.method]:
        kept = search.attempt(nodes, f"input-side prefix ({share:.0%} of MACs)", method)
        if kept:
            report["prefix_share"] = share
        if kept is None or search.last_passed:
            break
    for step in range(PREFIX_STEPS):
        if step:
            nodes = prefix(share)
            kept = None if len(nodes) == len(base) else search.attempt(
                nodes, f"input-side prefix ({share:.0%} of MACs)", fewer_floats=True)
            if kept is None:
                break
            if kept:
                report["prefix_share"] = share
        if not search.last_passed:
            if high is None:
                return  # half the MACs in float still fails: past that INT8 has little left to give
            low = share
        else:
            high = share
        share = (low + high) / 2


def _sensitivity_stage(ctx: ConversionContext, search: _Search, ranked, candidates, feeds, report: Dict[str, Any]) -> None:
    """Keep the most sensitive 1, 2, 4, ... remaining nodes in float on top of the best attempt so far."""
    base = search.floats
    if search.best is not search.record:  # rank what is still lost, measured on the best attempt
        ranked = node_sensitivity(search.prepared, search.best_path, feeds, ctx.accuracy_runs.threads,
                                  quantized_nodes(search.best_path))
        report["sensitivity_after"] = [s.to_dict() for s in ranked[:10]]
    order = [s.name for s in ranked if s.name not in set(base)]
    limit = max(1, int(len(candidates) * MAX_FLOAT_SHARE) - len(base))
    count, stale, tries = 1, 0, 0
    while count <= min(limit, len(order)) and tries < MAX_TRIES and search.failed:
        tries += 1
        gained = search.attempt(base + order[:count], "sensitivity")
        if gained is None:
            break
        stale = 0 if gained else stale + 1
        if stale >= STALE_TRIES:
            report["stopped"] = f"{STALE_TRIES} attempts in a row gained nothing"
            break
        count = min(count * 2, limit, len(order)) if count < min(limit, len(order)) else count + 1


def _quantize(ctx: ConversionContext, attempt, prepared: Path, trial: Path, cache: Path,
              calibrated_ops: Optional[Tuple[str, ...]] = None) -> Dict[str, Any]:
    """Quantize with the ranges cached for the attempt's calibrator (each calibrator runs at most once,
    over the tensors of `calibrated_ops`, the search's own op types, whatever the attempt quantizes),
    through the registered step: it calibrates into `cache` when that holds nothing yet."""
    from ..passes.base import StepCall
    from ..passes.quantize_onnx import ALL_OPS, QuantizeOnnxStatic

    options = replace(attempt.int8, calibrated_op_types=calibrated_ops or ALL_OPS)
    step = StepCall(QuantizeOnnxStatic.name, options).build()
    return step.run(ctx.step_context(calibration_cache=cache), prepared, trial).info
