"""What the report derives from the raw rows: speed-ups, accuracy drops, labels and sort order.

Speed-up is always against FP32 of the same model on the same board: the FP32 artifact of the
same format when the board measured one, else its fastest FP32 artifact of any format. With no
fleet data, the manifest's host timing (`speedup_vs_fp32`, same format) stands in where the host
stands for the board, else the board's predicted speed-up (`predicted`); see provenance.py.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from .svg import MARKERS, PALETTE
from .text import number, text

FORMAT_MARKERS = {"onnx": "circle", "tflite": "square", "tensorrt": "triangle"}


@dataclass(frozen=True)
class ResultView:
    """One stored benchmark result, checked and ready to show."""

    device: str
    profile: str
    model: str
    artifact: str
    format: str
    precision: str
    runtime: str
    ok: bool
    error: str
    latency: Dict[str, Optional[float]]  # min, p50, p90, p95, p99, max, mean (ms)
    throughput_ips: Optional[float]
    peak_rss_mb: Optional[float]
    energy_mj: Optional[float]
    power_source: str
    accuracy_drop: Optional[float]
    accuracy_from: str  # "job" (the manifest entry deploy sent), "manifest" (OUTDIR) or ""
    speedup: Optional[float]
    speedup_basis: str  # the FP32 artifact it was measured against
    speedup_missing: str  # why there is no speed-up ("" when there is one)
    valid: Optional[bool]
    invalid_reasons: Tuple[str, ...]
    ts: Optional[float]

    @property
    def p50(self) -> Optional[float]:
        return self.latency["p50"]

    @property
    def measured(self) -> bool:
        return self.ok and self.p50 is not None


@dataclass(frozen=True)
class ArtifactView:
    """One artifact of a conversion manifest."""

    key: str
    format: str
    precision: str
    scheme: str
    size_bytes: Optional[float]
    top1_accuracy: Optional[float]
    top1_agreement: Optional[float]
    cosine: Optional[float]
    drop: Optional[float]
    host_p50: Optional[float]
    host_p90: Optional[float]
    speedup: Optional[float]
    recommended: bool
    speedup_interval: Optional[Tuple[float, float]] = None  # its 95 % interval, where the host timed it in rounds
    predicted_p50: Optional[float] = None  # the roofline's latency on the board (ms), when the host cannot stand for it
    predicted_speedup: Optional[float] = None
    predicted_graph: str = ""  # the ONNX graph the prediction was made on
    verdict: str = ""  # ok | unresolved | failed ("" in manifests from before verdicts)
    verdict_reason: str = ""
    outputs: Tuple[OutputVerdict, ...] = ()


@dataclass(frozen=True)
class OutputVerdict:
    """How one output of an artifact was judged."""

    name: str
    kind: str
    verdict: str
    reason: str


_LATENCY = {"min": "min_ms", "p50": "p50_ms", "p90": "p90_ms", "p95": "p95_ms", "p99": "p99_ms", "max": "max_ms",
            "mean": "mean_ms"}


def result_views(results: Iterable[Mapping[str, Any]], manifest: Optional[Mapping[str, Any]] = None) -> List[ResultView]:
    """Rows sorted for comparison: by model, then board (profile, device), fastest first, failures last."""
    drops = manifest_drops(manifest)
    base = [_view(row, drops) for row in results if isinstance(row, Mapping)]
    views = [_with_speedup(v, base) for v in base]
    return sorted(views, key=lambda v: (v.model, v.profile, v.device, not v.measured, v.p50 or 0.0, v.artifact))


def _view(row: Mapping[str, Any], drops: Mapping[Tuple[str, str], float]) -> ResultView:
    model = text(row.get("model"), "(unknown model)")
    fmt, precision = text(row.get("format")), text(row.get("precision"))
    artifact = text(row.get("artifact_key")) or "-".join(p for p in (fmt, precision) if p) or f"job {text(row.get('job_id'), '?')}"
    ok = _flag(row.get("ok")) is True
    error = ": ".join(p for p in (text(row.get("error_kind")), text(row.get("error_message"))) if p)
    drop, drop_from = number(row.get("accuracy_drop_points")), "job"
    if drop is None:
        drop = drops.get((model, artifact))
        drop_from = "manifest" if drop is not None else ""
    return ResultView(
        device=text(row.get("device_id"), "?"),
        profile=text(row.get("profile")),
        model=model,
        artifact=artifact,
        format=fmt,
        precision=precision,
        runtime=text(row.get("runtime")),
        ok=ok,
        error=error if not ok else "",
        latency={name: number(row.get(key)) for name, key in _LATENCY.items()},
        throughput_ips=number(row.get("throughput_ips")),
        peak_rss_mb=number(row.get("peak_rss_mb")),
        energy_mj=number(row.get("energy_per_inference_mj")),
        power_source=text(row.get("power_source")),
        accuracy_drop=drop,
        accuracy_from=drop_from,
        speedup=None,
        speedup_basis="",
        speedup_missing="",
        valid=_flag(row.get("valid")),
        invalid_reasons=_reasons(row.get("invalid_reasons")),
        ts=number(row.get("ts")),
    )


def _with_speedup(view: ResultView, views: Sequence[ResultView]) -> ResultView:
    if not view.measured:
        return replace(view, speedup_missing="not measured: the benchmark failed" if not view.ok else "no p50 reported")
    fp32 = [v for v in views if v.measured and v.precision == "fp32" and v.device == view.device and v.model == view.model]
    same_format = [v for v in fp32 if v.format == view.format]
    candidates = same_format or fp32
    if not candidates:
        return replace(view, speedup_missing="no FP32 baseline measured on this board")
    reference = min(candidates, key=lambda v: v.p50)
    if view.p50 <= 0:
        return replace(view, speedup_basis=reference.artifact, speedup_missing="its p50 is 0 ms: no ratio")
    return replace(view, speedup=reference.p50 / view.p50, speedup_basis=reference.artifact)


def manifest_drops(manifest: Optional[Mapping[str, Any]]) -> Dict[Tuple[str, str], float]:
    """(model source, artifact key) -> accuracy drop in points, from a conversion manifest."""
    if not manifest:
        return {}
    model = text(_get(manifest, "model", "source"), "(unknown model)")
    drops = {}
    for view in artifact_views(manifest):
        if view.drop is not None:
            drops[(model, view.key)] = view.drop
    return drops


def _interval(speedup: Any) -> Optional[Tuple[float, float]]:
    bounds = speedup.get("interval") if isinstance(speedup, Mapping) else None
    if isinstance(bounds, list) and len(bounds) == 2 and all(number(b) is not None for b in bounds):
        return number(bounds[0]), number(bounds[1])
    return None


def artifact_views(manifest: Optional[Mapping[str, Any]]) -> List[ArtifactView]:
    artifacts = manifest.get("artifacts") if isinstance(manifest, Mapping) else None
    views = []
    for entry in artifacts if isinstance(artifacts, list) else []:
        if not isinstance(entry, Mapping):
            continue
        accuracy = entry.get("accuracy") if isinstance(entry.get("accuracy"), Mapping) else {}
        timing = entry.get("host_timing") if isinstance(entry.get("host_timing"), Mapping) else {}
        predicted = entry.get("predicted") if isinstance(entry.get("predicted"), Mapping) else {}
        views.append(ArtifactView(
            key=text(entry.get("key"), "?"),
            format=text(entry.get("format")),
            precision=text(entry.get("precision")),
            scheme=text(entry.get("scheme")),
            size_bytes=number(entry.get("size_bytes")),
            top1_accuracy=number(accuracy.get("top1_accuracy")),
            top1_agreement=number(accuracy.get("top1_agreement")),
            cosine=number(accuracy.get("cosine_similarity")),
            drop=number(accuracy.get("drop_points")),
            host_p50=number(timing.get("p50_ms")),
            host_p90=number(timing.get("p90_ms")),
            speedup=number(timing.get("speedup_vs_fp32")),
            recommended=entry.get("recommended") is True,
            speedup_interval=_interval(timing.get("speedup")),
            predicted_p50=number(predicted.get("p50_ms")),
            predicted_speedup=number(predicted.get("speedup_vs_fp32")),
            predicted_graph=text(predicted.get("graph")),
            verdict=text(accuracy.get("verdict")),
            verdict_reason=text(accuracy.get("reason")),
            outputs=tuple(_output_verdicts(accuracy)),
        ))
    return views


def _output_verdicts(accuracy: Mapping[str, Any]) -> List[OutputVerdict]:
    streamed = accuracy.get("streamed") if isinstance(accuracy.get("streamed"), Mapping) else {}
    judged = [o for group in (accuracy.get("outputs"), streamed.get("outputs")) if isinstance(group, list)
              for o in group if isinstance(o, Mapping)]
    return [OutputVerdict(text(o.get("name"), "?"), text(o.get("kind")), text(o.get("verdict")), text(o.get("reason")))
            for o in judged]


def colors(names: Iterable[str]) -> Dict[str, str]:
    """A stable colour per name (sorted), cycling through the palette."""
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(sorted(set(names)))}


def format_marker(fmt: str) -> str:
    if fmt in FORMAT_MARKERS:
        return FORMAT_MARKERS[fmt]
    return MARKERS[sum(map(ord, fmt)) % len(MARKERS)]


def _get(data: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, Mapping):
            return None
        data = data.get(key)
    return data


def _flag(value: Any) -> Optional[bool]:
    """True/False from a JSON bool or a database 0/1; None when missing or anything else."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    return None


def _reasons(value: Any) -> Tuple[str, ...]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return (value,) if value else ()
    if isinstance(value, (list, tuple)):
        return tuple(str(v) for v in value)
    return () if value is None else (str(value),)
