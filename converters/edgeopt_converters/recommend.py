"""Pick the artifact to deploy: the fastest one within the accuracy budget.

On the host's own architecture the choice rests on measured host timings, and a lower precision
must beat FP32 of the same format by a margin, never lose to it. For other boards nothing here can
be measured: the choice is a prediction from the profile's peak throughput per precision, and the
manifest says so.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import List, Optional

from edgeopt_agent.profiles import DeviceProfile

RUNTIME_FORMAT = {"tflite": "tflite", "onnxruntime": "onnx", "tensorrt": "onnx"}
MIN_SPEEDUP = 1.05  # a lower precision must be at least this much faster than FP32 to be chosen
# Outputs that are not class scores have no top-1 to lose: they must match FP32 this closely.
MIN_COSINE_WITHOUT_TOP1 = 0.99


@dataclass(frozen=True)
class Recommendation:
    key: Optional[str]
    basis: str  # "measured" | "predicted" | "none"
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)


def _within(records, budget: float):
    return [r for r in records if (r.accuracy.min_cosine >= MIN_COSINE_WITHOUT_TOP1 if r.accuracy.drop_points is None
                                   else r.accuracy.drop_points <= budget)]


def recommend(records: List, profile: DeviceProfile, budget: float, measured: bool,
              why_predicted: str = "") -> Recommendation:
    usable = [r for r in _within(records, budget) if r.planned.format in
              {RUNTIME_FORMAT[rt] for rt in profile.runtimes}]
    if not usable:
        return Recommendation(None, "none", f"no artifact stays within the accuracy budget ({budget} points of top-1, "
                                            f"or cosine {MIN_COSINE_WITHOUT_TOP1} for outputs that are not class scores)")
    if measured and all(r.host_timing is not None for r in usable):
        return _by_measurement(usable, profile, budget)
    return _by_prediction(usable, profile, why_predicted or "nothing was timed on the target")


def _by_measurement(usable, profile: DeviceProfile, budget: float) -> Recommendation:
    fp32 = {r.planned.format: r.host_timing.p50_ms for r in usable if r.planned.precision == "fp32"}
    eligible, rejected = [], []
    for r in usable:
        base = fp32.get(r.planned.format)
        if r.planned.precision != "fp32" and (base is None or base / r.host_timing.p50_ms < MIN_SPEEDUP):
            speed = f"{base / r.host_timing.p50_ms:.2f}x FP32" if base else "no FP32 to compare"
            rejected.append(f"{r.planned.key} ({speed})")
            continue
        eligible.append(r)
    best = min(eligible, key=lambda r: r.host_timing.p50_ms)
    reason = f"fastest measured on this {profile.cpu.arch} host within a {budget}-point accuracy budget: p50 {best.host_timing.p50_ms:.3f} ms"
    if rejected:
        reason += "; not recommended because not faster than FP32: " + ", ".join(rejected)
    return Recommendation(best.planned.key, "measured", reason)


def _precision_rank(profile: DeviceProfile) -> List[str]:
    peaks = profile.peak_tops
    base = peaks.get("fp32", 0.0)
    faster = sorted((p for p in peaks if p != "fp32" and peaks[p] > base), key=lambda p: -peaks[p])
    return faster + ["fp32"]


def _by_prediction(usable, profile: DeviceProfile, why: str) -> Recommendation:
    ranks = _precision_rank(profile)
    for runtime in profile.runtimes:
        fmt = RUNTIME_FORMAT[runtime]
        for precision in ranks:
            for r in usable:
                if (r.planned.format, r.planned.precision) == (fmt, precision):
                    evidence = ", ".join(f"{p} {v:g}" for p, v in profile.peak_tops.items()) or "no peak figures"
                    return Recommendation(
                        r.planned.key, "predicted",
                        f"predicted, not measured: {why}; "
                        f"{runtime} is its preferred runtime and {precision} its fastest precision by peak "
                        f"throughput (TOPS: {evidence}). Confirm on the board with `edgeopt bench`.",
                    )
    first = usable[0]
    return Recommendation(first.planned.key, "predicted", f"predicted ({why}): no better evidence than the profile's recipe order")
