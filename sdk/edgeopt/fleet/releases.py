"""A model's builds as the fleet measured them, and one build compared with another on every board.

A build is what a result's job named (its meta): the convert output's identity (`build_id`: the
source model's hash, the options, the edgeopt version and the profile; edgeopt_converters.manifest)
and the version the user gave it at convert or deploy time. Results from before builds were named
fall back on the manifest's hash. A model's builds are ordered by their first result.

`compare(rows, ...)` puts a candidate build against a baseline (by default the build before it),
per board and per profile (the boards' geometric mean): the p50/p90/p99 ratios with intervals
(latency_ratio.py), the change in peak memory and energy, and a verdict on one percentile:

    slower     the interval lies above 1 (the change is real) and the ratio is above 1 + threshold
               (it is big enough to matter)
    faster     the interval lies below 1 and the ratio is below 1 / (1 + threshold)
    no change  neither: no measurable change at that threshold
    unknown    a side's results carry no latency histogram (an older agent): compared on their
               percentiles only, without an interval, and never a verdict
    not compared  no valid run on one side, or nothing to pair

A run that failed, is invalid (throttled, under-voltage, outputs off the reference) or throttled
never counts; those left out are listed. The comparison fails the gate when any board or profile is
measurably slower (its interval above 1) by more than `max_slowdown`.

Both conditions are needed: the interval alone would flag a real 1 % change, and it covers the spread
between benchmarks of one build only when the build ran more than once on the board (runs are
resampled then); the threshold alone would flag noise. scripts/bench_release_gate.py measures both
rates on a simulated fleet (docs/FLEET.md, "Comparing builds").
"""
from __future__ import annotations

import math
import statistics
import zlib
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from edgeopt_agent.wire import LatencyHistogram, ProtocolError

from ..errors import UserError
from .latency_ratio import CONFIDENCE, METHOD, PERCENTILES, RESAMPLES, Ratio, combined, percentile_ratios

SLOWER, FASTER, NO_CHANGE, UNKNOWN, NOT_COMPARED = "slower", "faster", "no change", "unknown", "not compared"
DEFAULT_THRESHOLD = 0.05
METRICS = tuple(f"p{p}" for p in PERCENTILES)
_SEED = 0x5E1EA5E  # resamples are drawn from a fixed seed per board: the same store gives the same answer


@dataclass(frozen=True)
class Build:
    """One build of a model: `key` (identity, version) tells it apart; `label` is how it is shown."""

    key: Tuple[str, str]
    build_id: Optional[str]
    version: Optional[str]
    first_ts: float
    results: int

    @property
    def label(self) -> str:
        identity = self.key[0]
        short = identity if identity.startswith("manifest ") else identity[:12]
        return f"{self.version} ({short})" if self.version else short

    def to_dict(self) -> Dict[str, Any]:
        return {"label": self.label, "build_id": self.build_id, "version": self.version, "identity": self.key[0],
                "first_ts": self.first_ts, "results": self.results}


def build_key(row: Mapping[str, Any]) -> Tuple[str, str]:
    """(identity, version) of the build a result measured."""
    identity = row.get("build_id")
    if not identity:
        manifest = row.get("manifest_sha256")
        identity = f"manifest {manifest[:12]}" if manifest else "unnamed"
    return identity, row.get("build_version") or ""


def builds(rows: Iterable[Mapping[str, Any]]) -> List[Build]:
    """The builds the rows measured (rows of one model), oldest first (by their first result)."""
    found: Dict[Tuple[str, str], List[Mapping[str, Any]]] = {}
    for row in rows:
        found.setdefault(build_key(row), []).append(row)
    listed = [Build(key, rows_[0].get("build_id"), rows_[0].get("build_version"), min(r["ts"] for r in rows_),
                    len(rows_)) for key, rows_ in found.items()]
    return sorted(listed, key=lambda b: (b.first_ts, b.key))


def choose(found: Sequence[Build], model: str, candidate: Optional[str] = None,
           baseline: Optional[str] = None) -> Tuple[Build, Build]:
    """(candidate, baseline): the named ones (a version, or the start of a build id), else the newest build
    and the one before the candidate. UserError when a name matches nothing or there is no baseline."""
    chosen = _find(found, candidate, model, "candidate") if candidate else found[-1]
    if baseline:
        base = _find(found, baseline, model, "baseline")
    else:
        earlier = [b for b in found if b.first_ts < chosen.first_ts or (b.first_ts == chosen.first_ts and b.key < chosen.key)]
        if not earlier:
            raise UserError(f"model '{model}' has no build before {chosen.label} to compare it with (builds: "
                            f"{_listed(found)}); deploy the baseline first, or name one with --baseline")
        base = earlier[-1]
    if base.key == chosen.key:
        raise UserError(f"the candidate and the baseline are the same build ({chosen.label}); name two builds: "
                        f"{_listed(found)}")
    return chosen, base


def _find(found: Sequence[Build], name: str, model: str, role: str) -> Build:
    matches = [b for b in found if b.version == name] or [b for b in found if b.key[0].startswith(name)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise UserError(f"model '{model}' has no build '{name}' (the {role}); its builds: {_listed(found)}")
    raise UserError(f"'{name}' names {len(matches)} builds of model '{model}' ({_listed(matches)}); give the "
                    f"{role} by its version or a longer build id")


def _listed(found: Sequence[Build], most: int = 8) -> str:
    labels = [b.label for b in found[-most:]]
    return ", ".join(labels) + (f" (and {len(found) - most} older)" if len(found) > most else "")


# --- one side: a build's runs on one board ------------------------------------------------------------


@dataclass
class Side:
    """A build's results on one board (one artifact): the runs that count and those left out."""

    rows: List[Mapping[str, Any]]
    counted: List[Mapping[str, Any]] = field(default_factory=list)
    left_out: List[str] = field(default_factory=list)  # why each other run does not count
    histograms: List[LatencyHistogram] = field(default_factory=list)
    without_histogram: int = 0  # counted runs that carry none (older agents)

    @classmethod
    def of(cls, rows: List[Mapping[str, Any]]) -> "Side":
        side = cls(rows)
        for row in sorted(rows, key=lambda r: (r["ts"], r.get("seq") or 0)):
            why = _left_out(row)
            if why:
                side.left_out.append(why)
                continue
            side.counted.append(row)
            histogram = _histogram(row.get("latency_histogram"))
            if histogram is None:
                side.without_histogram += 1
            else:
                side.histograms.append(histogram)
        return side

    def median(self, key: str) -> Optional[float]:
        values = [r[key] for r in self.counted if isinstance(r.get(key), (int, float))]
        return statistics.median(values) if values else None

    def versions(self, key: str) -> List[str]:
        return sorted({str(r[key]) for r in self.counted or self.rows if r.get(key)})

    def runtimes(self) -> List[str]:
        return sorted({" ".join(str(r[k]) for k in ("runtime", "runtime_version") if r.get(k))
                       for r in self.counted or self.rows if r.get("runtime")})

    def summary(self) -> Dict[str, Any]:
        return {
            "runs": len(self.rows), "counted": len(self.counted), "left_out": list(self.left_out),
            "with_histogram": len(self.histograms), "samples": sum(h.count for h in self.histograms),
            "p50_ms": self.median("p50_ms"), "p90_ms": self.median("p90_ms"), "p99_ms": self.median("p99_ms"),
            "peak_rss_mb": self.median("peak_rss_mb"), "energy_per_inference_mj": self.median("energy_per_inference_mj"),
            "temperature_c": max((r["temperature_c"] for r in self.counted if r.get("temperature_c") is not None),
                                 default=None),
            "runtimes": self.runtimes(), "agent_versions": self.versions("agent_version"),
            "artifacts": sorted({r.get("artifact_key") or "-" for r in self.rows}),
        }


def _left_out(row: Mapping[str, Any]) -> Optional[str]:
    if not row.get("ok"):
        return f"failed ({row.get('error_kind') or 'error'})"
    if row.get("throttled"):
        return "throttled"
    if row.get("valid") is False:
        reasons = row.get("invalid_reasons") or []
        return "invalid" + (f": {'; '.join(str(r) for r in reasons)}" if reasons else "")
    if row.get("p50_ms") is None:
        return "no latency"
    return None


def _histogram(data: Any) -> Optional[LatencyHistogram]:
    if data is None:
        return None
    try:
        return LatencyHistogram.from_dict(data)
    except ProtocolError:
        return None


# --- the comparison ------------------------------------------------------------------------------------


@dataclass
class BoardComparison:
    device_id: str
    profile: Optional[str]
    artifact: Optional[str]
    baseline: Side
    candidate: Side
    verdict: str = NOT_COMPARED
    reason: str = ""
    evidence: str = ""  # "histograms" or "percentiles"
    ratios: Dict[str, Ratio] = field(default_factory=dict)
    point_ratios: Dict[str, Dict[str, float]] = field(default_factory=dict)  # percentiles only: ratio, no interval
    notes: List[str] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        return {"device_id": self.device_id, "profile": self.profile, "artifact": self.artifact,
                "verdict": self.verdict, "reason": self.reason, "evidence": self.evidence,
                "ratios": _ratios_dict(self.ratios, self.point_ratios),
                "memory_change": _change(self.baseline.median("peak_rss_mb"), self.candidate.median("peak_rss_mb")),
                "energy_change": _change(self.baseline.median("energy_per_inference_mj"),
                                         self.candidate.median("energy_per_inference_mj")),
                "baseline": self.baseline.summary(), "candidate": self.candidate.summary(), "notes": list(self.notes)}


@dataclass
class ProfileComparison:
    profile: str
    boards: List[str]
    verdict: str
    ratios: Dict[str, Ratio]
    memory_change: Optional[float]
    energy_change: Optional[float]

    def to_dict(self) -> Dict[str, Any]:
        return {"profile": self.profile, "boards": list(self.boards), "verdict": self.verdict,
                "ratios": _ratios_dict(self.ratios, {}), "memory_change": self.memory_change,
                "energy_change": self.energy_change}


@dataclass
class Comparison:
    model: str
    candidate: Build
    baseline: Build
    metric: str
    threshold: float
    max_slowdown: float
    confidence: float
    boards: List[BoardComparison]
    profiles: List[ProfileComparison]

    @property
    def gated(self) -> List[str]:
        """What is slower beyond max_slowdown on the metric: boards by id, profiles as 'profile NAME'."""
        limit = 1 + self.max_slowdown
        rows = [(b.device_id, b.ratios.get(self.metric)) for b in self.boards] + \
            [(f"profile {p.profile}", p.ratios.get(self.metric)) for p in self.profiles]
        return [name for name, ratio in rows if ratio is not None and ratio.low > 1 and ratio.estimate > limit]

    @property
    def one_run_a_side(self) -> List[str]:
        """Boards compared on a single benchmark of the baseline or of the candidate: their intervals cannot
        see how much benchmarks of one build differ between runs (deploying a build again adds runs)."""
        return [b.device_id for b in self.boards if b.ratios and min(len(b.baseline.histograms),
                                                                      len(b.candidate.histograms)) == 1]

    @property
    def same_build(self) -> bool:
        return self.candidate.key[0] == self.baseline.key[0]

    def to_dict(self) -> Dict[str, Any]:
        return {"model": self.model, "candidate": self.candidate.to_dict(), "baseline": self.baseline.to_dict(),
                "metric": self.metric, "threshold": self.threshold, "max_slowdown": self.max_slowdown,
                "confidence": self.confidence, "method": METHOD, "same_convert_output": self.same_build,
                "boards": [b.to_dict() for b in self.boards], "profiles": [p.to_dict() for p in self.profiles],
                "one_run_a_side": self.one_run_a_side, "gate": {"failed": bool(self.gated), "slower": self.gated}}


def compare(rows: Sequence[Mapping[str, Any]], model: str, candidate: Build, baseline: Build,
            metric: str = "p50", threshold: float = DEFAULT_THRESHOLD, max_slowdown: Optional[float] = None,
            confidence: float = CONFIDENCE, resamples: int = RESAMPLES) -> Comparison:
    """`candidate` against `baseline` on every board that ran either (rows: the model's results, with their
    latency histograms: store.results(model=..., latest=False, with_histogram=True))."""
    if metric not in METRICS:
        raise UserError(f"metric '{metric}' is not one of {', '.join(METRICS)}")
    if not 0 <= threshold < 1 or max_slowdown is not None and not 0 <= max_slowdown < 10:
        raise UserError("give the threshold and the slowdown allowed as fractions, e.g. 0.05 for 5 %")
    per_board: Dict[str, Dict[str, Dict[Optional[str], List[Mapping[str, Any]]]]] = {}
    profiles: Dict[str, Optional[str]] = {}
    for row in rows:
        key = build_key(row)
        side = "candidate" if key == candidate.key else "baseline" if key == baseline.key else None
        if side is None:
            continue
        profiles[row["device_id"]] = row.get("profile")
        per_board.setdefault(row["device_id"], {"baseline": {}, "candidate": {}})[side] \
            .setdefault(row.get("artifact_key"), []).append(row)
    boards = []
    for device_id in sorted(per_board):
        for pair in _paired(device_id, profiles[device_id], per_board[device_id]):
            _judge(pair, metric, threshold, confidence, resamples)
            boards.append(pair)
    return Comparison(model, candidate, baseline, metric, threshold,
                      threshold if max_slowdown is None else max_slowdown, confidence, boards,
                      _per_profile(boards, metric, threshold, confidence))


def _paired(device_id: str, profile: Optional[str],
            sides: Dict[str, Dict[Optional[str], List[Mapping[str, Any]]]]) -> List[BoardComparison]:
    """The board's comparisons: the same artifact on both sides; one artifact each (the build ships another
    one) paired with a note; anything else said not compared."""
    base, cand = sides["baseline"], sides["candidate"]
    common = sorted(set(base) & set(cand), key=str)
    pairs = [BoardComparison(device_id, profile, key, Side.of(base[key]), Side.of(cand[key])) for key in common]
    if not common and len(base) == 1 and len(cand) == 1:
        (base_key, base_rows), (cand_key, cand_rows) = next(iter(base.items())), next(iter(cand.items()))
        pair = BoardComparison(device_id, profile, cand_key, Side.of(base_rows), Side.of(cand_rows))
        pair.notes.append(f"the artifact changed: {base_key} -> {cand_key}")
        return [pair]
    for key in sorted(set(base) ^ set(cand), key=str):
        only = "baseline" if key in base else "candidate"
        rows = base.get(key) or cand.get(key) or []
        pair = BoardComparison(device_id, profile, key, Side.of(base.get(key, [])), Side.of(cand.get(key, [])))
        pair.reason = f"only the {only} ran {key or 'an unnamed artifact'} on this board ({len(rows)} run(s))"
        pairs.append(pair)
    return pairs


def _judge(pair: BoardComparison, metric: str, threshold: float, confidence: float, resamples: int) -> None:
    if pair.reason:
        return
    for name, side in (("baseline", pair.baseline), ("candidate", pair.candidate)):
        if not side.counted:
            why = "; ".join(sorted(set(side.left_out))) or "none"
            pair.reason = f"no {name} run counts here ({len(side.rows)} run(s): {why})"
            return
    for name, side in (("baseline", pair.baseline), ("candidate", pair.candidate)):
        if side.left_out:
            pair.notes.append(f"{name}: {len(side.left_out)} run(s) left out ({'; '.join(sorted(set(side.left_out)))})")
    if not pair.baseline.histograms or not pair.candidate.histograms:
        _percentiles_only(pair)
        return
    for name, side in (("baseline", pair.baseline), ("candidate", pair.candidate)):
        if side.without_histogram:
            pair.notes.append(f"{name}: {side.without_histogram} run(s) without a latency histogram left out "
                              "of the interval")
    rng = np.random.default_rng([_SEED, zlib.crc32(f"{pair.device_id}|{pair.artifact}".encode())])
    try:
        found = percentile_ratios(pair.baseline.histograms, pair.candidate.histograms, rng,
                                  confidence=confidence, resamples=resamples)
    except ValueError as exc:
        pair.reason = f"not comparable: {exc}"
        return
    pair.ratios = {f"p{p}": ratio for p, ratio in found.items()}
    pair.evidence = "histograms"
    pair.verdict = verdict(pair.ratios[metric], threshold)


def _percentiles_only(pair: BoardComparison) -> None:
    """An older agent's results: the ratio of the stored percentiles (median over runs), no interval."""
    pair.evidence = "percentiles"
    for metric in METRICS:
        base, cand = pair.baseline.median(f"{metric}_ms"), pair.candidate.median(f"{metric}_ms")
        if base and cand:
            pair.point_ratios[metric] = {"ratio": cand / base, "baseline_ms": base, "candidate_ms": cand}
    lacking = [f"the {name}'s {len(side.counted)} run(s) (agent {', '.join(side.versions('agent_version')) or 'unknown'})"
               for name, side in (("baseline", pair.baseline), ("candidate", pair.candidate)) if not side.histograms]
    pair.verdict = UNKNOWN
    pair.reason = (f"{' and '.join(lacking)} carry no latency histogram: compared on the stored percentiles only, "
                   "without an interval (upgrade the agents and deploy again for a verdict)")


def verdict(ratio: Ratio, threshold: float) -> str:
    if ratio.low > 1 and ratio.estimate > 1 + threshold:
        return SLOWER
    if ratio.high < 1 and ratio.estimate < 1 / (1 + threshold):
        return FASTER
    return NO_CHANGE


def _per_profile(boards: List[BoardComparison], metric: str, threshold: float,
                 confidence: float) -> List[ProfileComparison]:
    grouped: Dict[str, List[BoardComparison]] = {}
    for board in boards:
        if board.ratios and board.profile:
            grouped.setdefault(board.profile, []).append(board)
    found = []
    for profile, members in sorted(grouped.items()):
        ratios = {m: combined([b.ratios[m] for b in members], confidence) for m in METRICS}
        found.append(ProfileComparison(
            profile, [b.device_id for b in members], verdict(ratios[metric], threshold), ratios,
            _geometric_change([(b.baseline.median("peak_rss_mb"), b.candidate.median("peak_rss_mb")) for b in members]),
            _geometric_change([(b.baseline.median("energy_per_inference_mj"),
                                b.candidate.median("energy_per_inference_mj")) for b in members])))
    return found


def _change(before: Optional[float], after: Optional[float]) -> Optional[float]:
    """after / before - 1, or None where either is unknown."""
    if not before or after is None:
        return None
    return after / before - 1


def _geometric_change(pairs: Sequence[Tuple[Optional[float], Optional[float]]]) -> Optional[float]:
    known = [(b, a) for b, a in pairs if b and a]
    if not known:
        return None
    return math.exp(sum(math.log(a / b) for b, a in known) / len(known)) - 1


def _ratios_dict(ratios: Mapping[str, Ratio], points: Mapping[str, Mapping[str, float]]) -> Dict[str, Any]:
    shown: Dict[str, Any] = {}
    for metric in METRICS:
        if metric in ratios:
            r = ratios[metric]
            shown[metric] = {"ratio": r.estimate, "low": r.low, "high": r.high, "baseline_ms": r.baseline_ms,
                             "candidate_ms": r.candidate_ms}
        elif metric in points:
            shown[metric] = {**points[metric], "low": None, "high": None}
    return shown


def models(rows: Iterable[Mapping[str, Any]]) -> List[str]:
    return sorted({r["model"] for r in rows if r.get("model")})
