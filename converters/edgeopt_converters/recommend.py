"""Pick the artifact to deploy: the fastest one whose accuracy verdict holds.

Only an artifact judged ok is recommended, or one judged unresolved (the evaluation data cannot
decide) whose every continuous figure is excellent, and the reason says so. On the host's own
architecture the choice rests on measured speed-ups with their intervals: a lower precision must be
shown faster than FP32 of its format (the whole interval at or above MIN_SPEEDUP), and the fastest
artifact is chosen over another only where the 95 % interval of their ratio, over the rounds they were
timed in together, lies above 1; artifacts it cannot tell apart go to the profile's order of runtimes and
precisions, and the reason says so. For other
boards nothing here can be measured: the choice is a prediction, and says so. Where the board's
profile holds efficiency priors fitted on published measurements (`cost/priors.py`), each artifact
is predicted with those of its runtime and precision, and the reason names the evidence (rows, median
error on held-out rows); a runtime with FP32 priors but none at the artifact's precision is estimated
from the speed-up other runtimes show on the board (`priors.transferred`), and the reason names that
evidence and how well such transfers predicted published rows; an artifact with neither is not ranked
against those that have, and the reason says so. Without priors: the roofline latency
of each artifact's graph on the board (`roofline.predict_artifacts`) where the profile states peak
figures and bandwidth, else the profile's peak throughput per precision, and a tie between runtimes
the roofline cannot tell apart is said to be one.
"""
from __future__ import annotations

import platform
from dataclasses import asdict, dataclass
from typing import Dict, List, Mapping, Optional, Tuple

from edgeopt_agent import runtimes
from edgeopt_agent.profiles import DeviceProfile

from .accuracy import OK, UNRESOLVED
from .cost.host_timing import ratio_interval, speedup_text
from .cost.priors import BoardEstimate, estimate
from .recipe import board_config

MIN_SPEEDUP = 1.05  # a lower precision must be shown at least this much faster than FP32 to be chosen
NOTHING_QUANTIZED = 0.9  # an "INT8" artifact whose weights take this share of FP32's is not offered at all
TIE = 1.05  # artifacts within this factor of the fastest are ties, settled by the profile's preferences
# A host runtime gap that carries over to a board of another CPU architecture: a structural one, as the
# TFLite vs ONNX Runtime gap on an LSTM (2.4-3.3x) that motivated settling ties; smaller gaps are kernel
# tuning, which differs by architecture.
FOREIGN_ARCH_GAP = 1.5
_PRECISION_ORDER = ("int8", "fp16", "fp32")


@dataclass(frozen=True)
class Recommendation:
    key: Optional[str]
    basis: str  # "measured" | "predicted" | "none"
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)


def _accuracy_split(records) -> Tuple[list, List[str]]:
    usable, excluded = [], []
    for r in records:
        a = r.accuracy
        weights = (getattr(r, "info", None) or {}).get("weights") or {}
        if getattr(r, "not_quantized", False) and weights.get("ratio", 0) >= NOTHING_QUANTIZED:
            excluded.append(f"{r.planned.key} is not really quantized (its weights take {weights['ratio']:.2f}x FP32's)")
        elif a.verdict == OK or (a.verdict == UNRESOLVED and a.excellent):
            usable.append(r)
        else:
            excluded.append(f"{r.planned.key} {a.verdict} ({a.reason})")
    return usable, excluded


def _accuracy_note(record) -> str:
    a = record.accuracy
    if a.verdict == UNRESOLVED:
        criteria = f"cosine >= {a.tolerances.excellent_cosine:g}, SQNR >= {a.tolerances.excellent_sqnr_db:g} dB"
        if any(getattr(j, "task_excellent", None) is not None for j in a.judgements):
            criteria += f"; a bin head's decoded values within {a.tolerances.excellent_bin_shift:g} bin"
        return (f"; its accuracy verdict is unresolved ({a.reason}) and it is recommended only because every "
                f"continuous figure is excellent ({criteria})")
    return ""


def recommend(records: List, profile: DeviceProfile, measured: bool, why_predicted: str = "",
              predicted_ms: Optional[Mapping[str, float]] = None, host_machine: Optional[str] = None,
              board_costs: Optional[Mapping] = None) -> Recommendation:
    """`predicted_ms`: roofline latency on the board by artifact key, used when nothing was measured;
    `host_machine`: this host's `platform.machine()` (by default, read here); `board_costs`: the GraphCost
    of each ONNX artifact by key, which the profile's priors predict from (None: no prediction with priors)."""
    formats = set(_profile_formats(profile))
    usable, excluded = _accuracy_split([r for r in records if r.planned.format in formats])
    dropped = f"; not recommended for accuracy: {'; '.join(excluded)}" if excluded else ""
    if not usable:
        return Recommendation(None, "none", f"no artifact passes its accuracy verdict{dropped}")
    if measured and all(r.host_timing is not None for r in usable):
        key, reason = _by_measurement(usable, profile)
        basis = "measured"
    else:
        why = why_predicted or "nothing was timed on the target"
        by_priors = _by_priors(usable, profile, why, board_costs) if board_costs is not None else None
        by_roofline = by_priors or _by_roofline(usable, profile, why, predicted_ms or {}, host_machine)
        key, reason = by_roofline or _by_prediction(usable, profile, why)
        if by_priors is None and board_costs is not None:
            reason += _no_evidence_note(profile)
        basis = "predicted"
    chosen = next(r for r in usable if r.planned.key == key)
    return Recommendation(key, basis, reason + _accuracy_note(chosen) + dropped)


def _profile_formats(profile: DeviceProfile) -> List[str]:
    """The formats the profile's runtimes run, in the profile's order of preference."""
    return list(dict.fromkeys(f for rt in profile.runtimes for f in runtimes.BY_NAME[rt].formats))


def _preference(profile: DeviceProfile, record) -> tuple:
    order = _profile_formats(profile)
    return (order.index(record.planned.format), _PRECISION_ORDER.index(record.planned.precision), record.planned.key)


def _by_measurement(usable, profile: DeviceProfile) -> Tuple[str, str]:
    eligible, slow = [], []
    for r in usable:
        speedup = r.host_timing.speedup
        if r.planned.precision == "fp32":
            eligible.append(r)
        elif speedup is None:
            slow.append(f"{r.planned.key} (no FP32 of its format to compare with)")
        elif speedup.low < MIN_SPEEDUP:
            slow.append(f"{r.planned.key} ({speedup.text()} over FP32, 95%)")
        else:
            eligible.append(r)
    if not eligible:
        eligible = usable
    fastest = min(eligible, key=lambda r: r.host_timing.p50_ms)
    undecided = [(r, _against(r, fastest)) for r in eligible if r is not fastest]
    tied = [fastest] + [r for r, (decided, _) in undecided if not decided]
    best = min(tied, key=lambda r: _preference(profile, r))
    timing = best.host_timing
    shown = f"p50 {timing.p50_ms:.3f} ms over {timing.rounds} interleaved rounds"
    if timing.speedup:
        shown += f", {timing.speedup.text()} over FP32 (95%)"
    reason = f"fastest measured on this {profile.cpu.arch} host among artifacts that pass their accuracy verdict: {shown}"
    if len(tied) > 1:
        open_ = [text for r, (decided, text) in undecided if not decided]
        reason += (f"; the timing does not decide between {', '.join(r.planned.key for r in tied)} ({'; '.join(open_)}), "
                   f"so {profile.name}'s order of runtimes and precisions picks {best.planned.key}")
    if slow:
        reason += f"; not shown at least {MIN_SPEEDUP:g}x faster than FP32: " + ", ".join(slow)
    return best.planned.key, reason


def _against(record, fastest) -> Tuple[bool, str]:
    """(whether `fastest` is shown faster than `record`, the comparison in words): by the 95 % interval of
    their ratio over the rounds they were timed in together; by TIE on the medians where there are none."""
    mine, theirs = record.host_timing, fastest.host_timing
    if len(mine.round_ms) >= 2 and len(mine.round_ms) == len(theirs.round_ms):
        ratio = ratio_interval(list(mine.round_ms), list(theirs.round_ms))  # > 1: `fastest` takes less time
        return ratio.low > 1.0, (f"{fastest.planned.key} {speedup_text(ratio.estimate, ratio.low, ratio.high)} as fast "
                                 f"as {record.planned.key} (95%)")
    gap = mine.p50_ms / theirs.p50_ms if theirs.p50_ms > 0 else float("inf")
    return gap > TIE, f"{fastest.planned.key} {gap:.2f}x as fast as {record.planned.key} by their medians"


def _roofline_estimates(usable, predicted_ms: Mapping[str, float]) -> Dict[str, Tuple[float, str]]:
    """Predicted ms per usable artifact; a format whose row says roofline "onnx" (TFLite, ncnn, ExecuTorch)
    takes its precision's ONNX graph's (the same arithmetic)."""
    onnx = sorted((r for r in usable if r.planned.format == "onnx" and r.planned.key in predicted_ms),
                  key=lambda r: r.planned.key == f"onnx-{r.planned.precision}")  # the plain one (static INT8) last: it wins
    by_precision = {r.planned.precision: predicted_ms[r.planned.key] for r in onnx}
    estimates = {}
    for r in usable:
        if r.planned.key in predicted_ms:
            estimates[r.planned.key] = (predicted_ms[r.planned.key], "")
        elif runtimes.format_of(r.planned.format).roofline == "onnx" and r.planned.precision in by_precision:
            estimates[r.planned.key] = (by_precision[r.planned.precision], f" (the onnx-{r.planned.precision} graph's)")
    return estimates


def _not_costed(usable, estimates: Mapping[str, Tuple[float, str]]) -> str:
    """The usable artifacts the roofline left out, and why, for the reason."""
    left = [r.planned.key for r in usable if r.planned.key not in estimates]
    if not left:
        return ""
    uncostable = [k for k in left if runtimes.format_of(k.split("-")[0]).roofline is None]
    said = f"; not costed by the roofline: {', '.join(left)}"
    if uncostable:
        said += f" ({', '.join(uncostable)}: the roofline cannot read that format's graph)"
    return said


def _by_roofline(usable, profile: DeviceProfile, why: str, predicted_ms: Mapping[str, float],
                 host_machine: Optional[str] = None) -> Optional[Tuple[str, str]]:
    estimates = _roofline_estimates(usable, predicted_ms)
    costed = [r for r in usable if r.planned.key in estimates]
    if not costed:
        return None
    candidates, slow = _predicted_gain_split(costed, estimates)
    fastest = min(estimates[r.planned.key][0] for r in candidates)
    tied = [r for r in candidates if estimates[r.planned.key][0] <= fastest * TIE]
    tied, settled = _settle_by_host_runtimes(tied, profile, host_machine)
    best = min(tied, key=lambda r: _preference(profile, r))
    shown = ", ".join(f"{r.planned.key} {estimates[r.planned.key][0]:.3f} ms{estimates[r.planned.key][1]}"
                      for r in sorted(costed, key=lambda r: estimates[r.planned.key][0]))
    not_faster = (f"; not predicted at least {MIN_SPEEDUP:g}x faster than FP32, so not worth a lower precision's "
                  f"accuracy cost: {', '.join(slow)}" if slow else "")
    return best.planned.key, (
        f"predicted, not measured: {why}; fastest by the roofline of each graph on {profile.name} (its profile's "
        f"peak throughput per precision and memory bandwidth, uncalibrated; `edgeopt analyze` shows it per "
        f"node) among artifacts that pass their accuracy verdict: {shown}{not_faster}{settled}"
        f"{_not_costed(usable, estimates)}. Confirm on the board: "
        f"`edgeopt deploy OUTDIR --wait` to its edgeopt-agent."
    )


def _board_estimates(usable, profile: DeviceProfile, costs: Mapping) -> Dict[str, BoardEstimate]:
    return {r.planned.key: estimate(profile, r.planned.key, board_config(profile, r.planned)["runtime"],
                                    r.planned.precision, costs) for r in usable}


def _by_priors(usable, profile: DeviceProfile, why: str, costs: Mapping) -> Optional[Tuple[str, str]]:
    """The fastest artifact by the priors of its runtime and precision on this board; None where no usable
    artifact has published evidence there (the roofline alone decides, and says so)."""
    found = _board_estimates(usable, profile, costs)
    ranked = [r for r in usable if found[r.planned.key].ms is not None]
    if not ranked:
        return None
    estimates = {k: (e.ms, "") for k, e in found.items() if e.ms is not None}
    candidates, slow = _predicted_gain_split(ranked, estimates)
    fastest = min(estimates[r.planned.key][0] for r in candidates)
    tied = [r for r in candidates if estimates[r.planned.key][0] <= fastest * TIE]
    best = min(tied, key=lambda r: _preference(profile, r))
    order = sorted(ranked, key=lambda r: estimates[r.planned.key][0])
    shown = "; ".join(f"{r.planned.key} {estimates[r.planned.key][0]:.3g} ms on {found[r.planned.key].runtime} "
                      f"({found[r.planned.key].evidence.text()})" for r in order)
    close = (f"; {', '.join(r.planned.key for r in tied)} are within {(TIE - 1) * 100:.0f} % of each other, closer "
             f"than the evidence separates them: {best.planned.key} by the profile's order" if len(tied) > 1 else "")
    not_faster = (f"; not predicted at least {MIN_SPEEDUP:g}x faster than FP32, so not worth a lower precision's "
                  f"accuracy cost: {', '.join(slow)}" if slow else "")
    unranked = [found[r.planned.key] for r in usable if found[r.planned.key].ms is None]
    left = ("; not ranked, for want of evidence: " + "; ".join(f"{e.key} ({e.why_not})" for e in unranked)
            if unranked else "")
    return best.planned.key, (
        f"predicted, not measured: {why}; fastest on {profile.name} by its runtimes' efficiency priors (fitted on "
        f"published measurements, device_profiles/published/) among artifacts that pass their accuracy verdict, "
        f"fastest first: {shown}{close}{not_faster}{left}. Confirm on the board: "
        f"`edgeopt deploy OUTDIR --wait` to its edgeopt-agent."
    )


def _no_evidence_note(profile: DeviceProfile) -> str:
    if profile.priors:
        return (f" No artifact here runs a runtime and precision with published evidence on {profile.name} (it has "
                f"priors for {', '.join(sorted({f'{p.runtime} {p.precision}' for p in profile.priors}))}).")
    return (f" {profile.name} has no published measurements (no efficiency priors in its profile): runtimes that run "
            f"the same graph predict alike, and their order is the profile's, not evidence.")


def _predicted_gain_split(costed, estimates: Mapping[str, Tuple[float, str]]) -> Tuple[list, List[str]]:
    """As a measured lower precision must be shown MIN_SPEEDUP faster than FP32, a predicted one must be
    predicted so against the fastest FP32 artifact: a board without faster INT8 arithmetic (a Cortex-A72
    has no dot-product instructions) may gain nothing on a compute-bound graph, and then FP32 keeps the
    accuracy for free. Without a costed FP32 artifact nothing is set aside."""
    float_ms = [estimates[r.planned.key][0] for r in costed if r.planned.precision == "fp32"]
    if not float_ms:
        return costed, []
    base = min(float_ms)
    kept, slow = [], []
    for r in costed:
        ms = estimates[r.planned.key][0]
        if r.planned.precision != "fp32" and not (base >= MIN_SPEEDUP * ms and base > ms):
            slow.append(f"{r.planned.key} ({base / ms:.2f}x)" if ms > 0 else r.planned.key)
        else:
            kept.append(r)
    return kept, slow


def _settle_by_host_runtimes(tied, profile: DeviceProfile, host_machine: Optional[str] = None) -> Tuple[list, str]:
    """Artifacts the roofline cannot tell apart because they are the same graph in two runtimes: the
    one whose runtime ran it slower here is dropped, since the roofline sees the arithmetic, not how
    well each runtime's CPU kernels do it. On a board of this host's architecture a gap beyond TIE
    settles it. On another architecture the kernels differ, so only a structural gap
    (FOREIGN_ARCH_GAP or more) does, and a runtime whose row says host timing does not represent such
    a board (`foreign_host_timing`: ncnn, NEON-tuned) is neither dropped nor compared with. A GPU
    board's runtimes are not this host's CPU kernels, so there the profile's order stays the judge."""
    if profile.has_gpu:
        return tied, ""
    host = (host_machine or platform.machine()).lower()
    foreign = not profile.matches_host(host)
    gap = FOREIGN_ARCH_GAP if foreign else TIE
    kept, said, unsettled, unrepresentative = [], [], [], {}
    for precision in dict.fromkeys(r.planned.precision for r in tied):
        group = [r for r in tied if r.planned.precision == precision]
        timed = {r.planned.key: r.host_timing.p50_ms for r in group if r.host_timing is not None}
        if len(group) < 2 or len(timed) < len(group) or len({r.planned.format for r in group}) < 2:
            kept += group
            continue
        compared = group
        if foreign:
            for r in group:
                why = _host_runtime(r).foreign_host_timing
                if why:
                    unrepresentative[r.planned.key] = why
            compared = [r for r in group if r.planned.key not in unrepresentative]
            if len({r.planned.format for r in compared}) < 2:
                kept += group
                continue
        quickest = min(compared, key=lambda r: timed[r.planned.key])
        ratio = {r.planned.key: timed[r.planned.key] / timed[quickest.planned.key] for r in compared}
        slower = [r for r in compared if ratio[r.planned.key] > gap]
        kept += [r for r in group if r not in slower]
        said += [f"{r.planned.key} ran the same graph {ratio[r.planned.key]:.1f}x slower than "
                 f"{quickest.planned.key} on this host" for r in slower]
        unsettled += [f"{r.planned.key} {ratio[r.planned.key]:.2f}x {quickest.planned.key}'s time" for r in compared
                      if TIE < ratio[r.planned.key] <= gap]
    return kept, _settled_text(profile, host, foreign, said, unsettled, unrepresentative)


def _settled_text(profile: DeviceProfile, host: str, foreign: bool, said: List[str], unsettled: List[str],
                  unrepresentative: Mapping[str, str]) -> str:
    text = ""
    if said and not foreign:
        text += f"; tied by the roofline, settled by this host's runtimes: {'; '.join(said)}"
    elif said:
        text += (f"; tied by the roofline, settled by this {host} host's runtimes although {profile.name} is "
                 f"{profile.cpu.arch}, since the gap is structural (at least {FOREIGN_ARCH_GAP:g}x): {'; '.join(said)}")
    if unsettled:
        text += (f"; this {host} host's gap between runtimes left to {profile.name}'s order, too small to carry over "
                 f"to {profile.cpu.arch} (under {FOREIGN_ARCH_GAP:g}x): {', '.join(unsettled)}")
    if unrepresentative:
        text += (f"; kept without regard to this host's timing, which does not represent {profile.cpu.arch}: "
                 + "; ".join(f"{key} ({why})" for key, why in unrepresentative.items()))
    return text


def _host_runtime(record) -> runtimes.Runtime:
    """The runtime that ran `record`'s artifact on this host (its format's default)."""
    return runtimes.BY_NAME[runtimes.FORMAT_RUNTIMES[record.planned.format][0]]


def _precision_rank(profile: DeviceProfile) -> List[str]:
    peaks = profile.peak_tops
    base = peaks.get("fp32", 0.0)
    faster = sorted((p for p in peaks if p != "fp32" and peaks[p] > base), key=lambda p: -peaks[p])
    return faster + ["fp32"]


def _by_prediction(usable, profile: DeviceProfile, why: str) -> Tuple[str, str]:
    ranks = _precision_rank(profile)
    for runtime in profile.runtimes:
        for precision in ranks:
            for r in usable:
                if r.planned.format in runtimes.BY_NAME[runtime].formats and r.planned.precision == precision:
                    evidence = ", ".join(f"{p} {v:g}" for p, v in profile.peak_tops.items()) or "no peak figures"
                    return r.planned.key, (
                        f"predicted, not measured: {why}; {runtime} is its preferred runtime and {precision} the "
                        f"fastest precision by peak throughput (TOPS: {evidence}) among artifacts that pass their "
                        f"accuracy verdict. Confirm on the board: `edgeopt deploy OUTDIR --wait` to its edgeopt-agent."
                    )
    first = usable[0]
    return first.planned.key, f"predicted ({why}): no better evidence than the profile's recipe order"
