"""`edgeopt analyze`: per-node roofline of an artifact on a board, checked against what the fleet measured.

    from edgeopt.analysis import analyze
    report = analyze("out", device="rpi5", db="sqlite:///fleet.db")

For each ONNX artifact (a file, or every ONNX artifact of a conversion's OUTDIR): per node its
operations, bytes, arithmetic intensity and roofline verdict on the board, and the whole graph's
predicted latency. `--profile host` costs the graph onnxruntime executes on this host (after its
fusions) and times its nodes with this host's own roofs, measured per kernel kind and precision by
small onnxruntime kernels; a board is timed at its profile's stated peaks on the artifact's graph.
Where the fleet has results of the same artifacts, each board's measured p50 is set against its
prediction, the pair is stored (`roofline_fits`, with the predicted time per kernel kind), and the
board's efficiency factors (whole graph, and per kernel kind where its measured artifacts allow:
`roofline_fit`) calibrate its later predictions. Until the fleet has measured the board, a profile's
efficiency priors (fitted on published measurements of it, `cost/priors.py`) calibrate the prediction
for the runtime the artifact runs on there, on that runtime's processor, and the notes name their
evidence; the fleet's own measurements take their place once there are some.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from edgeopt_agent.profiles import load_profile
from edgeopt_converters.cost.graph_cost import GraphCost, analyze_onnx, by_op_type
from edgeopt_converters.manifest import fed_shapes
from edgeopt_converters.manifest import read as read_manifest
from edgeopt_converters.cost.roofline import Machine, Prediction, machine_for, predict
from edgeopt_converters.cost.roofline_fit import Fit, fit, scoped

from .errors import UserError

HOST = "host"  # --profile host: this machine, its peaks measured


@dataclass(frozen=True)
class Target:
    key: str
    path: Path
    format: str
    shapes: Optional[Dict[str, List[int]]] = None  # each input's shape as the conversion fed it (its manifest)
    runtime: Optional[str] = None  # the runtime the board runs it with (its manifest entry's board configuration)


def targets(path: Path) -> Tuple[Optional[Dict[str, Any]], List[Target], List[str]]:
    """The artifacts to analyse: one ONNX file, or a conversion's ONNX artifacts (with its manifest)."""
    path = Path(path)
    if path.is_file() and path.suffix == ".onnx":
        return None, [Target(path.stem, path, "onnx")], []
    if path.is_file() and path.suffix != ".json":
        raise UserError(f"{path.name}: analyze reads ONNX files or a conversion's output folder")
    manifest = read_manifest(path)
    found, notes = [], []
    for a in manifest.artifacts:
        if a.format == "onnx":
            found.append(Target(a.data["key"], manifest.folder / a.data["path"], "onnx", fed_shapes(a.data),
                                (a.data.get("board") or {}).get("runtime")))
        else:
            notes.append(f"{a.key}: only ONNX graphs are analysed; a {a.format} artifact of the same "
                         f"precision runs the same arithmetic")
    if not found:
        raise UserError(f"{path} has no ONNX artifact to analyse")
    return manifest.data, found, notes


def machine(device: str, threads: Optional[int] = None) -> Machine:
    if device == HOST:
        from edgeopt_converters.cost.host_peaks import measure_host

        return measure_host(threads)
    return machine_for(load_profile(device))


def board_runtime(profile, runtime: Optional[str]) -> Optional[str]:
    """The runtime an ONNX artifact runs with on the board: its manifest's, else the profile's first for ONNX."""
    from edgeopt_agent import runtimes

    return runtime or next((r for r in profile.runtimes if "onnx" in runtimes.BY_NAME[r].formats), None)


def artifact_machine(profile, runtime: Optional[str], precision: str) -> Machine:
    """The roofline of the processor the artifact's runtime uses on the board (`cost/priors.runtime_machine`: a
    GPU runtime at the GPU's peaks, a CPU runtime at the CPU's, threads at its priors' parallel share, and a
    nominal per-node dispatch cost that priors and fleet fits calibrate); the profile's peaks where it has none."""
    from edgeopt_converters.cost.priors import runtime_machine

    runtime = board_runtime(profile, runtime)
    prior = profile.prior(runtime, precision) if runtime else None
    try:
        return runtime_machine(profile, runtime, parallel_fraction=prior.parallel_fraction if prior else None)
    except (UserError, KeyError):
        return machine_for(profile)


def efficiency(fits: Sequence[Dict[str, Any]], profile: str, precision: str,
               leave_out: Optional[Tuple[str, str]] = None) -> Tuple[Fit, str]:
    """A board's efficiency factors from its stored pairs: at this precision where there are some, else at
    all precisions. Returns the fit (whole graph, and per kernel kind where the data allows) and its scope."""
    mine = [f for f in fits if f["profile"] == profile and f["predicted_ms"] > 0
            and (f["model_sha256"], f["artifact_key"]) != leave_out]
    chosen, scope = scoped(mine, precision)
    found = fit(chosen)
    return found, (scope if found.factor is not None else "")


def mismatched_devices(devices: Sequence[Dict[str, Any]]) -> Dict[str, str]:
    """Devices whose results say nothing about their profile's board, each with why: its agent's status says
    the profile does not describe its CPU (`profile_check`), or the machine its telemetry reports is of
    another architecture than the profile's (an agent from before the check)."""
    found: Dict[str, str] = {}
    boards: Dict[str, Any] = {}  # profile name -> its DeviceProfile, or None when unknown (read once each)
    for d in devices:
        profile = d.get("profile")
        check = d.get("profile_check")
        if isinstance(check, dict) and check.get("ok") is False:
            mismatch = check.get("mismatch") if isinstance(check.get("mismatch"), list) else []
            differs = "; ".join(str(m)[:200] for m in mismatch[:5]) or "no detail given"
            found[d["device_id"]] = f"its agent reports that profile {profile} does not match its CPU ({differs})"
            continue
        machine = (d.get("versions") or {}).get("machine")
        if not profile or not isinstance(machine, str) or not machine:
            continue
        if profile not in boards:
            try:
                boards[profile] = load_profile(profile)
            except UserError:
                boards[profile] = None  # an unknown profile gets no prediction anyway (compare_with_fleet says so)
        board = boards[profile]
        if board is not None and not board.matches_host(machine):
            found[d["device_id"]] = f"it reports machine {machine}, and profile {profile} is {board.cpu.arch}"
    return found


def _fleet_results(store, manifest: Dict[str, Any]
                   ) -> Tuple[Dict[Tuple[str, str], List[float]], Dict[Tuple[str, str], List[str]], Dict[str, str]]:
    """p50 latencies of this conversion's artifacts in the fleet, by (board profile, artifact key); the devices
    left out of each pair (`mismatched_devices`), and why each was."""
    sha = (manifest.get("model") or {}).get("sha256")
    mismatched = mismatched_devices(store.devices())
    measured: Dict[Tuple[str, str], List[float]] = {}
    left_out: Dict[Tuple[str, str], List[str]] = {}
    for r in store.results():
        if r.get("model_sha256") != sha or not r.get("ok") or r.get("valid") is False or not r.get("p50_ms"):
            continue
        if r.get("profile") and r.get("artifact_key"):
            key = (r["profile"], r["artifact_key"])
            if r["device_id"] in mismatched:
                left_out.setdefault(key, []).append(r["device_id"])
            else:
                measured.setdefault(key, []).append(float(r["p50_ms"]))
    reasons = {d: mismatched[d] for devices in left_out.values() for d in devices}
    return measured, left_out, reasons


def _error_pct(predicted: float, measured: float) -> float:
    return round((predicted - measured) / measured * 100.0, 2)


def compare_with_fleet(store, manifest: Dict[str, Any], costs: Dict[str, GraphCost],
                       runtimes: Optional[Dict[str, Optional[str]]] = None
                       ) -> Tuple[List[Dict[str, Any]], List[str], List[Dict[str, Any]]]:
    """Predicted against measured for every board that ran these artifacts; stores each pair. Also returns the
    devices whose results were left out (`mismatched_devices`): device_id, the profiles and artifacts, why."""
    sha = (manifest.get("model") or {}).get("sha256")
    rows, notes = [], []
    pairs = []
    measured_by_key, left_out, reasons = _fleet_results(store, manifest)
    devices_left_out = []
    for device_id, why in sorted(reasons.items()):
        keys = sorted(k for k, devices in left_out.items() if device_id in devices)
        profiles = sorted({p for p, _ in keys})
        devices_left_out.append({"device_id": device_id, "profiles": profiles,
                                 "artifacts": sorted({a for _, a in keys}), "reason": why})
        notes.append(f"left out {device_id}'s results: they do not calibrate {', '.join(profiles)} because {why}")
    for profile_name, key in sorted(set(left_out) - set(measured_by_key)):
        if key in costs and store.forget_roofline_fit(profile_name, sha, key):
            notes.append(f"forgot the stored {profile_name} fit of {key}: only left-out devices measured it")
    for (profile_name, key), latencies in sorted(measured_by_key.items()):
        if key not in costs:
            continue
        try:
            board = artifact_machine(load_profile(profile_name), (runtimes or {}).get(key), costs[key].precision)
        except UserError as exc:
            notes.append(f"{profile_name}: no prediction ({exc})")
            continue
        cost = costs[key]
        prediction = predict(cost, board)
        measured = statistics.median(latencies)
        store.save_roofline_fit(profile_name, cost.precision, sha, key, prediction.roofline_ms, measured,
                                prediction.kind_ms())
        pairs.append((profile_name, key, cost.precision, prediction, measured, len(latencies)))
    fits = store.roofline_fits()
    for profile_name, key, precision, prediction, measured, count in pairs:
        found, scope = efficiency(fits, profile_name, precision, leave_out=(sha, key))
        predicted = prediction.roofline_ms
        calibrated = calibrate(prediction, found).ms if found.factor else None
        rows.append({
            "profile": profile_name, "artifact": key, "precision": precision, "measured_ms": round(measured, 6),
            "results": count, "predicted_ms": round(predicted, 6), "error_pct": _error_pct(predicted, measured),
            "calibrated_ms": round(calibrated, 6) if calibrated else None,
            "calibrated_error_pct": _error_pct(calibrated, measured) if calibrated else None,
            "efficiency": round(found.factor, 4) if found.factor else None, "efficiency_samples": found.samples,
            "efficiency_from": scope or None,
            "kind_efficiency": {k: round(v, 4) for k, v in sorted(found.kinds.items())},
        })
    if pairs:
        notes.append("calibrated figures use each board's efficiency fitted from its other artifacts (this one "
                     "left out), so the error shown is out of sample")
    return rows, notes, devices_left_out


def calibrate(prediction: Prediction, found: Fit) -> Prediction:
    """The same prediction with a fit's factors applied (whole graph, and per kind where fitted)."""
    return Prediction(prediction.machine, prediction.nodes, found.factor, found.samples, list(prediction.notes),
                      dict(found.kinds))


def analyze(path, device: str, input_shapes: Sequence[Sequence[int]] = (), db: Optional[str] = None,
            threads: Optional[int] = None, top: Optional[int] = 15) -> Dict[str, Any]:
    manifest, found, notes = targets(Path(path))
    board = machine(device, threads)
    # This host runs the artifacts with onnxruntime: cost the graph it executes. A board's runtime may be
    # another (TFLite, TensorRT) on another machine: it keeps the artifact's own graph.
    runtime = "onnxruntime" if device == HOST else None
    shapes = {t.key: input_shapes or t.shapes or () for t in found}  # given, else as the conversion fed them
    costs = {t.key: analyze_onnx(t.path, shapes[t.key], runtime=runtime) for t in found}
    fleet_rows: List[Dict[str, Any]] = []
    fits: List[Dict[str, Any]] = []
    left_out: List[Dict[str, Any]] = []
    if db is not None:
        from .fleet.store import open_store

        store = open_store(db, create=False)
        try:
            if manifest is not None:
                # The fleet's boards: each artifact's own graph.
                own = costs if runtime is None else {t.key: analyze_onnx(t.path, shapes[t.key]) for t in found}
                fleet_rows, fleet_notes, left_out = compare_with_fleet(store, manifest, own,
                                                                       {t.key: t.runtime for t in found})
                notes.extend(fleet_notes)
            else:
                notes.append("an ONNX file alone has no model hash to find fleet results by; give the OUTDIR")
            fits = store.roofline_fits(device)
        finally:
            store.close()
    artifacts = []
    for t in found:
        cost = costs[t.key]
        fitted, scope = efficiency(fits, device, cost.precision)
        on = board if device == HOST else artifact_machine(load_profile(device), t.runtime, cost.precision)
        prediction = predict(cost, on, fitted.factor, fitted.samples, fitted.kinds)
        if fitted.factor is None and device != HOST:
            prediction = with_priors(cost, on, device, t) or prediction
        elif fitted.factor is not None:
            prediction.notes.append(
                f"calibrated by {device}'s efficiency {fitted.factor:.2f} (measured / predicted) over {fitted.samples} "
                f"fleet result(s) at {scope}" + (
                    "; per kernel kind: " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(fitted.kinds.items()))
                    if fitted.kinds else "; too few results to fit per kernel kind"))
        artifacts.append(artifact_summary(t, cost, prediction, top))
    return {"device": device, "machine": board.to_dict(), "figures": figures(board, device), "artifacts": artifacts,
            "fleet": fleet_rows, "left_out": left_out, "notes": notes}


def figures(board: Machine, device: str) -> List[str]:
    """Where each figure of the roofline comes from: measured on this host, or stated by a profile."""
    if device == HOST:
        found = [f"measured on this host: peak throughput ({', '.join(sorted(board.peak_gops))}), DRAM bandwidth, "
                 "per-node overhead and one run's fixed cost"
                 + (", last-level cache bandwidth" if board.cache_bandwidth_gbps else "")]
        if board.kinds:
            found.append(f"measured on this host, one small kernel each: throughput and bandwidth of {len(board.kinds)} "
                         f"kernel kinds ({', '.join(sorted(board.kinds))}); other nodes use the measured peaks")
        return found
    return [f"from device profile {device} (not measured here): peak throughput per precision "
            f"({', '.join(sorted(board.peak_gops))}) and memory bandwidth, theoretical figures cited in the profile",
            "no per-kernel-kind figures for a board: every node is timed at the profile's peaks; per-kind "
            "efficiency comes from the fleet's measurements of this board, else from the profile's priors fitted on "
            "published measurements of it (each artifact's notes say which)"]


def with_priors(cost: GraphCost, on: Machine, device: str, target: Target) -> Optional[Prediction]:
    """The prediction on `on` (the artifact's runtime's processor) calibrated by the profile's priors for that
    runtime and the artifact's precision; None where the profile has none."""
    from edgeopt_converters.cost.priors import evidence, with_prior

    profile = load_profile(device)
    runtime = board_runtime(profile, target.runtime)
    prior = profile.prior(runtime, cost.precision) if runtime else None
    if prior is None:
        return None
    prediction = with_prior(predict(cost, on), prior)
    prediction.notes.append(f"calibrated by {device}'s efficiency priors for {runtime} {cost.precision}: "
                            f"{evidence(profile, runtime, cost.precision).text()} (device_profiles/published/; "
                            "the fleet's own measurements replace them: --db)")
    return prediction


def artifact_summary(target: Target, cost: GraphCost, prediction: Prediction, top: Optional[int]) -> Dict[str, Any]:
    times: Dict[str, float] = {}
    for n in prediction.nodes:
        times[n.node.op_type] = times.get(n.node.op_type, 0.0) + n.ms
    types = [{"op_type": op, "nodes": int(v["nodes"]), "ops": v["ops"], "bytes": v["bytes"],
              "predicted_ms": round(times.get(op, 0.0), 6)}
             for op, v in by_op_type(cost.nodes).items()]
    types.sort(key=lambda t: -t["predicted_ms"])
    return {
        "key": target.key, "path": str(target.path), "precision": cost.precision, "inputs": {
            k: list(v) if v else None for k, v in cost.inputs.items()},
        "ops": cost.ops, "macs": cost.macs, "bytes": cost.bytes, "node_count": len(cost.nodes),
        "notes": list(cost.notes), "prediction": prediction.to_dict(top), "op_types": types,
        "roofline_points": [
            {"name": n.node.name, "op_type": n.node.op_type, "intensity": n.node.intensity,
             "gops": n.node.ops / (n.ms * 1e6) if n.ms else 0.0, "bound": n.bound, "ms": n.ms,
             "precision": n.peak_precision}
            for n in prediction.nodes if n.bound in ("compute", "memory") and n.node.intensity],
    }
