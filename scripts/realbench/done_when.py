"""The issues' done-when, computed from a run's results (realbench.results: numbers, never printed text)
for the run's device.

Per model (each criterion PASS, FAIL or n/a, with the numbers that decided it):
  (a) edgeopt's conversion produced a manifest (artifacts that failed inside it are listed, not fatal);
  (b) the recommended artifact keeps the task (its case's TaskResult.kept; FP32 keeps by definition);
  (c) where some lower precision (an INT8 or INT4 of edgeopt's or a baseline's) keeps the task at
      >= SPEEDUP_NEEDED x FP32, the recommendation reaches >= SHARE_OF_BEST of the fastest such one
      (FP32 recommended counts 1.0x);
  (d) where onnxruntime's default INT8 (ort-static, ort-dynamic) keeps the task, the recommendation is
      at least as fast: measured on this host, the default's estimate lies at or below the upper end of
      the recommendation's 95 % interval; predicted for a board, the recommendation's predicted
      speed-up is >= PREDICTED_SLACK x the default's (the roofline ignores the kernels' constant factors);
  (e) the manifest records, for every output of every judged artifact, its kind and the evidence
      (`kind_why`) that chose it;
  (f) every failure is listed: each precision the benchmark asked for (FP32, INT8) has an artifact or an
      entry in the manifest's failed_artifacts;
  (g) where any INT8 (edgeopt's or onnxruntime's default) keeps the task, edgeopt's INT8 passed its
      verdict or its repair search ran (at least one attempt recorded);
  (h) where any INT8 keeps the task, the recommendation reaches >= SHARE_OF_BEST of the fastest
      artifact that keeps the task, whatever its speed-up (FP32 included).
Issue 26's done-when is (a)-(e); issue 36's is (a), (b), (f), (g), (h) (CRITERIA_OF).
Each criterion is PASS, FAIL, n/a (does not apply: edgeopt not run, no default INT8 keeps the task) or
UNKNOWN (these results cannot decide it: rows without task judgements, a missing speed).
Speed is the measured speed-up estimate vs FP32 when the run's device is this host's architecture, and
the roofline's predicted speed-up (row["predicted"]["speedup"]) otherwise.
"""
from __future__ import annotations

from typing import Dict, List, Optional

from realbench.results import FP32_SPEED, measured_speedup, predicted_speedup

SPEEDUP_NEEDED = 1.2
SHARE_OF_BEST = 0.9
PREDICTED_SLACK = 0.9
DEFAULT_INT8 = ("ort-static", "ort-dynamic")
CRITERIA = ("a", "b", "c", "d", "e", "f", "g", "h")
CRITERIA_OF = {"issue 26": ("a", "b", "c", "d", "e"), "issue 36": ("a", "b", "f", "g", "h")}
REQUESTED_PRECISIONS = ("fp32", "int8")  # what realbench.run asks edgeopt for
UNKNOWN = "unknown"  # a criterion these results cannot decide (older results, a speed missing), unlike n/a (None)


def _speed(row: dict, predicted: bool) -> Optional[float]:
    if predicted:
        return predicted_speedup(row)
    interval = measured_speedup(row)
    return interval.estimate if interval else None


def _x(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _ran(row: Optional[dict]) -> bool:
    return bool(row) and "verdict" in row


def _kept(row: dict) -> bool:
    return row.get("task_kept") in (True, "True")  # "True": a numpy bool that reached JSON as a string


def _kinds_line(kinds: Dict[str, List[dict]], recommended: Optional[str]) -> str:
    outputs = kinds.get(recommended or "") or next(iter(kinds.values()), [])
    return ", ".join(f"{o.get('name')}={o.get('kind')} ("
                     + ("given" if o.get("kind_source") == "given" else f"inferred: {str(o.get('kind_why'))[:60]}") + ")"
                     for o in outputs)


def model_summary(rows: Dict[str, dict], predicted: bool) -> Dict[str, dict]:
    """One model's criteria: {letter: {"pass": True | False | None (n/a) | UNKNOWN, "detail": str}} plus numbers."""
    edgeopt = rows.get("_edgeopt")
    out: Dict[str, dict] = {}
    if edgeopt is None:
        error = next((r.get("error") for r in rows.values() if r.get("error")), "no results")
        return {c: {"pass": False if c == "a" else None, "detail": f"the case did not run: {error}" if c == "a" else "-"}
                for c in CRITERIA}
    recommended = edgeopt.get("recommended")
    keeping = {name: _speed(row, predicted) for name, row in rows.items()
               if name not in ("fp32", "edgeopt") and not name.startswith("_") and _ran(row) and _kept(row)}
    unspeeded = sorted(name for name, s in keeping.items() if s is None)
    eligible = {name: s for name, s in keeping.items() if s is not None and s >= SPEEDUP_NEEDED}
    best = max(eligible, key=eligible.get) if eligible else None
    if recommended is None:
        not_run = str(edgeopt.get("error", "")).startswith("not run")
        out["a"] = {"pass": None if not_run else False, "detail": edgeopt.get("error", "no manifest")}
        why = "edgeopt not run" if not_run else "no recommendation"
        out.update({c: {"pass": None, "detail": why} for c in CRITERIA[1:]})
        out["c"]["detail"] = (f"{why}; fastest keeping INT8 {best} {eligible[best]:.2f}x" if best
                              else f"{why}; no INT8 keeps the task at >= {SPEEDUP_NEEDED}x")
        out["d"]["detail"] = f"{why}; " + "; ".join(
            f"{name} {'keeps' if _kept(rows[name]) else 'loses'} the task at {_x(_speed(rows[name], predicted))}"
            if _ran(rows.get(name)) else f"{name} did not run" for name in DEFAULT_INT8)
        return out
    failed = edgeopt.get("failed_artifacts") or []
    out["a"] = {"pass": True, "detail": f"converted ({len(failed)} artifacts failed and listed)"}

    fp32_pick = recommended == "onnx-fp32"
    pick_row = None if fp32_pick else (rows.get("edgeopt") or rows.get(f"edgeopt:{recommended}"))
    if fp32_pick:
        out["b"] = {"pass": True, "detail": "FP32 recommended", "kept": True}
    elif not _ran(pick_row):
        out["b"] = {"pass": False, "detail": f"{recommended} does not run here", "kept": False}
    elif "task_kept" not in pick_row:
        out["b"] = {"pass": UNKNOWN, "detail": f"{recommended}: task not judged (results from before TaskResult)", "kept": None}
    else:
        kept = _kept(pick_row)
        out["b"] = {"pass": bool(kept), "kept": kept,
                    "detail": f"{recommended} {'keeps' if kept else 'does not keep'} the task"}

    pick_speed = 1.0 if fp32_pick else (_speed(pick_row, predicted) if _ran(pick_row) else None)
    if not any("task_kept" in row for row in rows.values() if isinstance(row, dict)):
        out["c"] = {"pass": UNKNOWN, "detail": "task not judged (results from before TaskResult)", "best": None}
    elif best is None and unspeeded:
        out["c"] = {"pass": UNKNOWN, "best": None,
                    "detail": f"no speed for {', '.join(unspeeded)}, which keep the task; none else at >= {SPEEDUP_NEEDED}x"}
    elif best is None:
        out["c"] = {"pass": True, "detail": f"no lower precision keeps the task at >= {SPEEDUP_NEEDED}x", "best": None}
    else:
        same_artifact = best == f"edgeopt:{recommended}"
        share = 1.0 if same_artifact else (pick_speed / eligible[best] if pick_speed is not None else None)
        decided = share is not None and (share < SHARE_OF_BEST or not unspeeded)
        out["c"] = {"pass": share >= SHARE_OF_BEST if decided else UNKNOWN, "best": best, "best_speedup": eligible[best],
                    "pick_speedup": pick_speed, "share": share,
                    "detail": f"fastest keeping INT8 {best} {eligible[best]:.2f}x; pick "
                              + ("is that artifact" if same_artifact else
                                 f"{pick_speed:.2f}x = {share:.2f} of it" if share is not None else "has no speed")
                              + (f"; no speed for {', '.join(unspeeded)}" if unspeeded else "")}

    notes, verdicts = [], []
    for name in DEFAULT_INT8:
        row = rows.get(name)
        if not _ran(row):
            notes.append(f"{name} did not run")
            continue
        if not _kept(row):
            notes.append(f"{name} {'loses the task' if 'task_kept' in row else 'task not judged'}")
            continue
        theirs = _speed(row, predicted)
        if predicted:
            ok = None if theirs is None or pick_speed is None else pick_speed >= PREDICTED_SLACK * theirs
            notes.append(f"{name} keeps, {_x(theirs)} predicted vs pick {_x(pick_speed)}" + ("" if ok is None else f" ({'ok' if ok else 'behind'})"))
        else:
            pick_interval = FP32_SPEED if fp32_pick else (measured_speedup(pick_row) if _ran(pick_row) else None)
            ok = None if theirs is None or pick_interval is None else pick_interval.high >= theirs
            notes.append(f"{name} keeps, {_x(theirs)} vs pick's upper end {_x(pick_interval.high if pick_interval else None)}"
                         + ("" if ok is None else f" ({'ok' if ok else 'behind'})"))
        verdicts.append(ok)
    decided = [v for v in verdicts if v is not None]
    out["d"] = {"pass": (False if not all(decided) else UNKNOWN if None in verdicts else True) if verdicts else None,
                "detail": "; ".join(notes)}

    kinds = edgeopt.get("kinds")
    if kinds is None:
        out["e"] = {"pass": UNKNOWN, "detail": "these results carry no per-output kinds (a bench from before done_when)"}
    elif not kinds:
        out["e"] = {"pass": False, "detail": "the manifest records no per-output kinds"}
    else:
        outputs = [o for judged in kinds.values() for o in judged]
        missing = [o.get("name") for o in outputs if not o.get("kind") or not o.get("kind_why")]
        out["e"] = {"pass": bool(outputs) and not missing,
                    "detail": (f"no evidence for {sorted(set(map(str, missing)))}; " if missing else "")
                    + _kinds_line(kinds, recommended)}
    out["f"] = _failures_listed(edgeopt)
    keeping_int8 = sorted(name for name in rows if _is_int8(name) and _ran(rows[name]) and _kept(rows[name]))
    out["g"] = _search_ran(edgeopt, keeping_int8)
    out["h"] = _pick_share(rows, keeping_int8, pick_speed, recommended, predicted)
    return out


def _is_int8(name: str) -> bool:
    return name in DEFAULT_INT8 or name.startswith("edgeopt:")


def _failures_listed(edgeopt: dict) -> dict:
    """(f): each precision asked for was built or is listed as failed."""
    artifacts = edgeopt.get("artifacts")
    if artifacts is None:
        return {"pass": UNKNOWN, "detail": "these results do not list the manifest's artifacts"}
    failed = [f for f in edgeopt.get("failed_artifacts") or [] if isinstance(f, dict)]
    unaccounted = [p for p in REQUESTED_PRECISIONS if not any(a.get("precision") == p for a in artifacts + failed)]
    listed = ", ".join(f"{f.get('key')} ({str(f.get('cause'))[:60]})" for f in failed) or "no failure"
    return {"pass": not unaccounted, "unaccounted": unaccounted,
            "detail": (f"{', '.join(unaccounted)} neither built nor listed as failed; " if unaccounted else "")
            + f"{len(artifacts)} built, listed: {listed}"}


def _search_ran(edgeopt: dict, keeping_int8: List[str]) -> dict:
    """(g): where an INT8 keeps the task, edgeopt's INT8 passed its verdict or its repair search ran."""
    if not keeping_int8:
        return {"pass": None, "detail": "no INT8 keeps the task"}
    int8 = edgeopt.get("int8") or {}
    passed = [key for key, info in int8.items() if info.get("verdict") == "ok"]
    tried = {key: len(info.get("tries") or []) for key, info in int8.items()}
    why = f"{', '.join(keeping_int8)} keep the task; "
    if passed:
        return {"pass": True, "detail": why + f"edgeopt's {', '.join(passed)} passed its verdict"}
    ran = {key: n for key, n in tried.items() if n}
    stopped = "; ".join(f"{key}: {str(info.get('mixed'))[:100]}" for key, info in int8.items() if info.get("mixed"))
    return {"pass": bool(ran), "detail": why + (f"search ran ({', '.join(f'{k} {n} attempts' for k, n in ran.items())})"
                                                  if ran else "no INT8 of edgeopt's passed and its search made no attempt")
            + (f"; {stopped}" if stopped else "")}


def _pick_share(rows: Dict[str, dict], keeping_int8: List[str], pick_speed: Optional[float], recommended: str,
                predicted: bool) -> dict:
    """(h): where an INT8 keeps the task, the pick reaches SHARE_OF_BEST of the fastest artifact keeping it."""
    if not keeping_int8:
        return {"pass": None, "detail": "no INT8 keeps the task"}
    speeds = {name: (1.0 if name == "fp32" else _speed(row, predicted)) for name, row in rows.items()
              if name != "edgeopt" and not name.startswith("_") and _ran(row) and (name == "fp32" or _kept(row))}
    unspeeded = sorted(name for name, v in speeds.items() if v is None)
    timed = {name: v for name, v in speeds.items() if v is not None}
    best = max(timed, key=timed.get)
    if pick_speed is None:
        return {"pass": UNKNOWN, "best": best, "detail": f"the pick {recommended} has no speed"}
    is_pick = best == f"edgeopt:{recommended}" or (best == "fp32" and recommended == "onnx-fp32")
    share = 1.0 if is_pick else pick_speed / timed[best]
    decided = share < SHARE_OF_BEST or not unspeeded
    return {"pass": share >= SHARE_OF_BEST if decided else UNKNOWN, "best": best, "best_speedup": timed[best],
            "share": share, "detail": f"fastest keeping the task {best} {timed[best]:.2f}x; pick {recommended} "
                                      f"{pick_speed:.2f}x = {share:.2f} of it"
            + (f"; no speed for {', '.join(unspeeded)}" if unspeeded else "")}


def done_when(results: Dict[str, Dict[str, dict]], device: str, predicted: Optional[bool] = None) -> dict:
    """Every model's criteria and the run's overall result, for `device`; `predicted`: speed is the
    board's roofline prediction (a device of another architecture), not this host's measurement
    (by default: whether any row carries a prediction)."""
    if predicted is None:
        predicted = any("predicted" in row for rows in results.values() if isinstance(rows, dict)
                        for row in rows.values() if isinstance(row, dict))
    models = {name: model_summary(rows, predicted) for name, rows in results.items() if not name.startswith("_")}
    counts = {c: {mark: sum(_mark(m[c]["pass"]) == mark for m in models.values()) for mark in ("PASS", "FAIL", "UNKNOWN", "n/a")}
              for c in CRITERIA}
    overall = {issue: _overall(models, counts, letters) for issue, letters in CRITERIA_OF.items()}
    return {"device": device, "speed": "predicted (roofline)" if predicted else "measured on this host",
            "models": models, "counts": counts, "overall": overall["issue 26"], "overall_by_issue": overall}


def _overall(models: Dict[str, dict], counts: Dict[str, dict], letters) -> str:
    judged = any(m[c]["pass"] is not None for m in models.values() for c in letters[1:])
    return ("n/a (edgeopt not run)" if not judged else "FAIL" if any(counts[c]["FAIL"] for c in letters)
            else "UNKNOWN" if any(counts[c]["UNKNOWN"] for c in letters) else "PASS")


def _mark(verdict) -> str:
    return "UNKNOWN" if verdict == UNKNOWN else {True: "PASS", False: "FAIL", None: "n/a"}[verdict]


def done_when_lines(summary: dict) -> List[str]:
    """One line per model, then an overall line per issue (issue 26's first)."""
    lines = [f"Done-when on {summary['device']}, speed {summary['speed']}:"]
    for name, criteria in summary["models"].items():
        lines.append(f"{name}: " + " | ".join(f"({c}) {_mark(criteria[c]['pass'])} {criteria[c]['detail']}"
                                              for c in CRITERIA if c in criteria))
    counts = summary["counts"]
    for issue, overall in summary.get("overall_by_issue", {"issue 26": summary["overall"]}).items():
        lines.append(f"overall {overall} ({issue}): " + ", ".join(
            f"({c}) " + " ".join(f"{n} {mark}" for mark, n in counts[c].items() if n) for c in CRITERIA_OF[issue]))
    return lines
