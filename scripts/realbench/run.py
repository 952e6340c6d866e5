"""One case benchmarked: edgeopt's conversion in a child process, the baselines, every artifact judged by
edgeopt's verdicts and the case's task, timed in one interleaved run, and predicted for a board of
another architecture. Its results are data (realbench.results), never text to parse back."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

import edgeopt
from edgeopt_converters import accuracy as acc
from edgeopt_converters.cost.host_timing import ORT_SIDE_BY_SIDE, time_interleaved
from realbench.case import Case
from realbench.quantizers import olive, ort_dynamic, ort_static, ort_weight_only
from realbench.results import FP32_SPEED, Interval


THREADS = 2


def ort_session(path: Path):
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.log_severity_level = 3
    for key, value in ORT_SIDE_BY_SIDE.items():
        options.add_session_config_entry(key, value)
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def run_outputs(path: Path, case: Case, data: Optional[Dict[str, np.ndarray]] = None) -> List[np.ndarray]:
    """The artifact's outputs on `data` (the case's evaluation data by default), one sample at a time."""
    data = case.evaluation if data is None else data
    session = ort_session(path)
    names = {i.name for i in session.get_inputs()}
    n = len(next(iter(data.values())))
    runs = [session.run(None, {k: v for k, v in case.feed(data, i).items() if k in names}) for i in range(n)]
    return [np.concatenate([r[j] for r in runs]).astype(np.float32) for j in range(len(runs[0]))]


def judge_artifact(reference: List[np.ndarray], got: List[np.ndarray], case: Case, fp32: Path) -> acc.Accuracy:
    """edgeopt's verdict on an artifact's outputs, each judged by the kind edgeopt would decide on the same
    evidence: the kinds given (where the case tells them) or the FP32 graph's names, ops and heads."""
    names = [o.name for o in ort_session(fp32).get_outputs()]
    given = (dict(zip(names, case.kinds)) if case.kinds else {names[0]: case.kind}) if case.tell_kinds else {}
    shapes = [value.shape for value in case.feed(case.evaluation, 0).values()]
    kinds = acc.decide_kinds(names, reference, {k: v for k, v in given.items() if v}, producers=acc.graph_evidence(fp32),
                             labels=case.labels, input_hw=acc.image_input_hw(shapes))
    return acc.compare(reference, got, case.labels, names, kinds, acc.Tolerances())


def given_kinds(case: Case) -> Dict[str, str]:
    """The output kinds edgeopt is told: by the ONNX file's output names, or for a PyTorch source (whose
    names the export chooses) by position, as `--output-kind #0=coordinates`; none where the case converts
    as a new user would."""
    if not case.tell_kinds:
        return {}
    if case.source:
        return {f"#{i}": kind for i, kind in enumerate(case.kinds or [case.kind]) if kind}
    names = [o.name for o in ort_session(case.onnx).get_outputs()]
    given = dict(zip(names, case.kinds)) if case.kinds else {names[0]: case.kind}
    return {k: v for k, v in given.items() if v}


def _convert_child(model: str, options: dict) -> None:
    os.setsid()  # its own process group, so a timeout ends the workers it starts too
    edgeopt.convert(model, **options)


def run_edgeopt(case: Case, work: Path, device: str, timeout_s: float) -> Optional[dict]:
    """`edgeopt.convert` in a spawned child process stopped after `timeout_s` (a forked one would
    inherit torch's thread locks mid-use); its manifest, or an exception saying why not (a timeout
    or the child's exit status; its traceback is on stderr)."""
    import multiprocessing
    import signal

    options = dict(device=device, output_dir=work / "edgeopt", input_shape=case.shapes or None,
                   input_dtype=case.dtypes or None, calibration=work / "calib.npz", eval_data=work / "eval.npz",
                   formats=["onnx"], precisions=["fp32", "int8"], threads=THREADS, output_kinds=given_kinds(case),
                   weights=case.weights)
    child = multiprocessing.get_context("spawn").Process(target=_convert_child,
                                                         args=(case.source or str(case.onnx), options))
    child.start()
    child.join(timeout_s)
    if child.is_alive():
        os.killpg(child.pid, signal.SIGKILL)
        child.join()
        raise TimeoutError(f"edgeopt convert stopped after {timeout_s:.0f} s")
    if child.exitcode != 0:
        raise RuntimeError(f"edgeopt convert exited with {child.exitcode}")
    return json.loads((work / "edgeopt" / "manifest.json").read_text())


def bench(case: Case, work: Path, device: str = "x86-64", convert_timeout_s: float = 900,
          with_edgeopt: bool = True) -> Dict[str, dict]:
    np.savez(work / "calib.npz", **case.calibration)
    np.savez(work / "eval.npz", **case.evaluation, **({} if case.labels is None else {"labels": case.labels}))
    started = time.perf_counter()
    notes: Dict[str, str] = {}
    manifest = None
    if with_edgeopt:
        try:
            manifest = run_edgeopt(case, work, device, convert_timeout_s)
        except (TimeoutError, RuntimeError, OSError, ValueError) as exc:
            notes["edgeopt"] = f"failed: {type(exc).__name__}: {exc}"
    convert_s = time.perf_counter() - started
    out = work / "edgeopt"
    artifacts = {a["key"]: a for a in manifest["artifacts"]} if manifest else {}
    fp32 = out / artifacts["onnx-fp32"]["path"] if "onnx-fp32" in artifacts else case.onnx
    candidates: Dict[str, Path] = {"fp32": fp32}
    recommended = manifest["recommended"] if manifest else None
    if recommended and recommended != "onnx-fp32":
        candidates["edgeopt"] = out / artifacts[recommended]["path"]
    int8s = [a for a in manifest["artifacts"] if a["precision"] == "int8"] if manifest else []
    for a in int8s:
        candidates[f"edgeopt:{a['key']}"] = out / a["path"]
    makers = {"ort-static": lambda: ort_static(case, fp32, work / "ort_static.onnx"),
              "ort-dynamic": lambda: ort_dynamic(case, fp32, work / "ort_dynamic.onnx"),
              "ort-weight-only-int8": lambda: ort_weight_only(case, fp32, work / "ort_wo8.onnx", 8),
              "ort-weight-only-int4": lambda: ort_weight_only(case, fp32, work / "ort_wo4.onnx", 4),
              "olive-static": lambda: olive(case, fp32, work, "static"),
              "olive-dynamic": lambda: olive(case, fp32, work, "dynamic")}
    for name, make in makers.items():
        try:
            candidates[name] = make()
        except Exception as exc:  # a baseline that crashes is a result too
            notes[name] = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
    reference = run_outputs(fp32, case)
    task_reference = reference if case.task_data is None else run_outputs(fp32, case, case.task_data)
    rows: Dict[str, dict] = {}
    for name, path in candidates.items():
        try:
            got = run_outputs(path, case)
            verdict = judge_artifact(reference, got, case, fp32)
            task = case.task(task_reference, got if case.task_data is None else run_outputs(path, case, case.task_data))
            rows[name] = {"path": str(path), "size_mb": round(path.stat().st_size / 1e6, 2), "verdict": verdict.verdict,
                          "reason": verdict.reason, "task": task.figure, "task_kept": task.kept,
                          "task_criterion": task.criterion}
        except Exception as exc:
            notes[name] = f"does not run: {type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
    feed_n = case.feed(case.evaluation, 0)
    runs = {}
    for name in rows:
        session = ort_session(Path(rows[name]["path"]))
        names = {i.name for i in session.get_inputs()}
        feed = {k: v for k, v in feed_n.items() if k in names}
        runs[name] = (lambda s=session, f=feed: s.run(None, f))
    timings = time_interleaved(runs, {k: "fp32" for k in runs if k != "fp32"}, max_rounds=30, max_seconds=90)
    for name, row in rows.items():
        t = timings[name]
        row["p50_ms"] = round(t.p50_ms, 3)
        row["speedup"] = (Interval(t.speedup.estimate, t.speedup.low, t.speedup.high) if t.speedup else FP32_SPEED).as_dict()
    for name, predicted in board_predictions(device, rows, feed_n).items():
        rows[name]["predicted"] = predicted
    for name, note in notes.items():
        rows.setdefault(name, {})["error"] = note
    if manifest is None:
        rows["_edgeopt"] = {"recommended": None, "convert_s": round(convert_s, 1), "fp32": str(fp32),
                            "error": notes.get("edgeopt", "not run (--no-edgeopt)")}
        return rows
    rows["_edgeopt"] = {"recommended": recommended, "reason": manifest["recommendation"]["reason"],
                        "failed_artifacts": manifest.get("failed_artifacts"),
                        "artifacts": [{k: a.get(k) for k in ("key", "format", "precision")} for a in manifest["artifacts"]],
                        "convert_s": round(convert_s, 1), "notes": manifest["notes"], "warnings": manifest["warnings"],
                        "kinds": output_kinds(manifest),
                        "int8": {a["key"]: {"scheme": a["scheme"], "verdict": a["accuracy"]["verdict"],
                                            "calibrate_method": (a.get("mixed_precision") or {}).get("calibrate_method"),
                                            "float_nodes": len(a.get("float_nodes") or []),
                                            "weights": a.get("weights"),
                                            "mixed": (a.get("mixed_precision") or {}).get("result"),
                                            "tries": [{k: t.get(k) for k in ("stage", "float_nodes", "calibrate_method", "op_types",
                                                                             "verdict", "drop_points")}
                                                      for t in (a.get("mixed_precision") or {}).get("tries", [])]}
                                 for a in int8s}}
    return rows


def output_kinds(manifest: dict) -> Dict[str, List[dict]]:
    """Per artifact the manifest judged, each output's kind and the evidence that chose it."""
    return {a["key"]: [{k: o.get(k) for k in ("name", "kind", "kind_source", "kind_why")}
                       for o in (a.get("accuracy") or {}).get("outputs") or []]
            for a in manifest["artifacts"] if a.get("accuracy")}


def board_predictions(device: str, rows: Dict[str, dict], feed: Dict[str, np.ndarray]) -> Dict[str, dict]:
    """For a board this host is not (rpi4 on x86-64): each artifact's uncalibrated roofline latency on
    the board (`predict_artifacts`, as edgeopt recommends there, with the inputs' shapes fixed to the
    timed feed's), and its speed-up against FP32's ({"ms", "speedup"}), so that every artifact (the baselines too) is compared on
    the board's predicted speed, not this host's."""
    from edgeopt_agent.profiles import load_profile
    from edgeopt_converters.cost.roofline import predict_artifacts

    profile = load_profile(device)
    if profile.matches_host():
        return {}
    shapes = {name: value.shape for name, value in feed.items()}
    predicted_ms = predict_artifacts(profile, {name: Path(row["path"]) for name, row in rows.items()},
                                     {name: shapes for name in rows})
    for name in rows.keys() - predicted_ms.keys():
        rows[name]["predicted_error"] = "the roofline cannot cost this graph"
    base = predicted_ms.get("fp32")
    return {name: {"ms": round(ms, 4), "speedup": round(base / ms, 4) if base and ms > 0 else None}
            for name, ms in predicted_ms.items()}
