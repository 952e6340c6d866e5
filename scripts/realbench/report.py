"""What results say, as text, made from their numbers (realbench.results): the host line, the table of
every artifact of a run, and the per-model summary tables of docs/BENCHMARKS.md, which
scripts/bench_report.py writes between a section's markers."""
from __future__ import annotations

import os
import re
from typing import Dict, List, Optional

from realbench.done_when import done_when
from realbench.results import measured_speedup, predicted_speedup


def speed_text(row: dict) -> str:
    """'1.23x [1.10, 1.30]' (FP32: '1.00x'), or '-' where the row was not timed."""
    speed = measured_speedup(row)
    if speed is None:
        return "-"
    return f"{speed.estimate:.2f}x" if speed.low == speed.high == speed.estimate else \
        f"{speed.estimate:.2f}x [{speed.low:.2f}, {speed.high:.2f}]"


def predicted_text(row: dict) -> str:
    """'12.300 ms, 1.23x FP32', or '-' where the row has no prediction."""
    predicted = row.get("predicted")
    if not isinstance(predicted, dict):
        return "-"
    ratio = predicted_speedup(row)
    return f"{predicted['ms']:.3f} ms" + (f", {ratio:.2f}x FP32" if ratio is not None else "")


def host_line() -> str:
    """This machine's CPU and the flags that decide onnxruntime's INT8 kernels."""
    import platform

    from hostinfo import cpu_model, int8_flags

    return f"Host: {platform.machine()}, {cpu_model()}, {os.cpu_count()} CPUs; {int8_flags()}."


def _label(name: str, info: dict) -> str:
    """An edgeopt INT8 row's name with what mixed precision kept in float and which calibrator won."""
    extra = []
    if info.get("float_nodes"):
        extra.append(f"{info['float_nodes']} nodes float")
    if info.get("calibrate_method") and info["calibrate_method"] != "minmax":
        extra.append(f"{info['calibrate_method']} calibration")
    ratio = (info.get("weights") or {}).get("ratio")
    if ratio is not None and info.get("float_nodes"):
        extra.append(f"weights {ratio:.2f}x FP32")
    return f"{name} ({', '.join(extra)})" if extra else name


def markdown(results: Dict[str, Dict[str, dict]]) -> str:
    predicted = any("predicted" in row for rows in results.values() for row in rows.values())
    lines = ["| model | artifact | size MB | verdict | keeps task | task figure | p50 ms | vs FP32 (95%) |"
             + (" board, predicted |" if predicted else ""),
             "|---|---|---|---|---|---|---|---|" + ("---|" if predicted else "")]
    for model, rows in results.items():
        int8 = rows.get("_edgeopt", {}).get("int8", {})
        for name, row in rows.items():
            if name.startswith("_"):
                continue
            if name.startswith("edgeopt:") and name[len("edgeopt:"):] in int8:
                name = _label(name, int8[name[len("edgeopt:"):]])
            if "error" in row and "verdict" not in row:
                lines.append(f"| {model} | {name} | - | - | - | {row['error']} | - | - |" + (" - |" if predicted else ""))
                continue
            keeps = {True: "yes", False: "no"}.get(row.get("task_kept"), "-")
            lines.append(f"| {model} | {name} | {row['size_mb']} | {row['verdict']} | {keeps} | {row['task']} | {row['p50_ms']} | "
                         f"{speed_text(row)} |" + (f" {predicted_text(row)} |" if predicted else ""))
    return "\n".join(lines)


def _x(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _speed(row: dict, predicted: bool) -> Optional[float]:
    if predicted:
        return predicted_speedup(row)
    speed = measured_speedup(row)
    return speed.estimate if speed else None


def _speed_or_interval(row: dict, predicted: bool) -> str:
    return _x(_speed(row, True)) if predicted else speed_text(row)


def _baseline(row: Optional[dict], predicted: bool) -> str:
    if not row:
        return "not run"
    if "verdict" not in row:
        return "fails: " + str(row.get("error", "")).removeprefix("failed: ")[:90]
    return f"{'keeps' if row.get('task_kept') else 'loses'} {_speed_or_interval(row, predicted)}"


def model_lines(data: dict) -> List[str]:
    """One results file as rows of the summary table: per model, edgeopt's pick and its speed, whether its
    INT8 kept the task (with edgeopt's own verdict on it, from its manifest), onnxruntime's default static and
    dynamic INT8, the conversion's time and failures."""
    predicted = data["run"]["speed"].startswith("predicted")
    lines = []
    for model, rows in data["models"].items():
        edgeopt = rows.get("_edgeopt") or {}
        pick = edgeopt.get("recommended")
        if pick is None:
            picked = "no conversion: " + str(edgeopt.get("error") or rows.get("edgeopt", {}).get("error", "-"))[:120]
        else:
            row = rows.get("edgeopt") or rows.get(f"edgeopt:{pick}") or rows.get("fp32", {})
            picked = f"{pick} {_speed_or_interval(row, predicted)}"
        verdicts = {key: info.get("verdict") for key, info in (edgeopt.get("int8") or {}).items()}
        int8 = [f"{name[len('edgeopt:'):]} {'keeps' if row.get('task_kept') else 'loses'} "
                f"({verdicts.get(name[len('edgeopt:'):]) or row.get('verdict')}) {_speed_or_interval(row, predicted)}"
                for name, row in rows.items() if name.startswith("edgeopt:") and "verdict" in row] or ["none built"]
        failed = ", ".join(f.get("key", str(f)) if isinstance(f, dict) else str(f)
                           for f in edgeopt.get("failed_artifacts") or []) or "none"
        unaccounted = ((data.get("done_when") or {}).get("models", {}).get(model, {}).get("f") or {}).get("unaccounted")
        if unaccounted:
            failed += f" (**{', '.join(unaccounted)} neither built nor listed**)"
        lines.append(f"| {model} | {picked} | {'; '.join(int8)} | {_baseline(rows.get('ort-static'), predicted)} | "
                     f"{_baseline(rows.get('ort-dynamic'), predicted)} | {edgeopt.get('convert_s', '-')} s | {failed} |")
    return lines


def summary_table(files: List[dict]) -> str:
    """The BENCHMARKS.md table of one or more results files (one run each: a device), then their done-when."""
    lines = ["| model | edgeopt's pick (speed-up vs FP32) | edgeopt INT8: task (verdict) speed-up | ORT static INT8 | "
             "ORT dynamic INT8 | conversion | failed artifacts listed |", "|---|---|---|---|---|---|---|"]
    notes = []
    for data in files:
        run = data["run"]
        lines.append(f"| **{run['device']}** ({run['speed']}) | | | | | | |")
        lines += model_lines(data)
        summary = data["done_when"]
        overall = summary.get("overall_by_issue") or {"issue 26": summary["overall"]}
        notes.append(f"Done-when on {run['device']}: " + ", ".join(f"{issue} **{mark}**" for issue, mark in overall.items())
                     + "; " + ", ".join(f"({c}) " + " ".join(f"{n} {mark}" for mark, n in counts.items() if n)
                                 for c, counts in summary["counts"].items())
                     + f". Measured {run['started']} to {run['finished']} UTC"
                     + (f" at commit {run['commit']}" if run.get("commit") else "") + f" on {run['host']}; load average "
                     f"{run['load_before']} before, {run['load_after']} after.")
    return "\n".join(lines) + "\n\n" + "\n\n".join(notes)


def replace_section(document: str, name: str, body: str) -> str:
    """`document` with the text between `<!-- realbench:NAME -->` and `<!-- /realbench:NAME -->` replaced
    by `body`; both markers must be there."""
    pattern = re.compile(rf"(<!-- realbench:{re.escape(name)} -->\n).*?(\n<!-- /realbench:{re.escape(name)} -->)", re.S)
    if not pattern.search(document):
        raise ValueError(f"no section '{name}' (<!-- realbench:{name} --> ... <!-- /realbench:{name} -->)")
    return pattern.sub(lambda m: m.group(1) + body.rstrip("\n") + m.group(2), document, count=1)


def by_device(files: List[dict]) -> List[dict]:
    """Results files of one device (runs of a model or a few each) as one, models in the order given: the
    span from the earliest start (and its load) to the latest finish (and its load), the done-when computed
    anew over all."""
    merged: Dict[str, dict] = {}
    for data in files:
        run = data["run"]
        into = merged.setdefault(run["device"], {"run": dict(run), "models": {}})
        into["models"].update(data["models"])
        if run["started"] < into["run"]["started"]:
            into["run"]["started"], into["run"]["load_before"] = run["started"], run["load_before"]
        if run["finished"] > into["run"]["finished"]:
            into["run"]["finished"], into["run"]["load_after"] = run["finished"], run["load_after"]
        if run["speed"] != into["run"]["speed"]:
            raise ValueError(f"{run['device']}: results measured and predicted cannot share a table")
    for data in merged.values():
        data["done_when"] = done_when(data["models"], data["run"]["device"],
                                      predicted=data["run"]["speed"].startswith("predicted"))
    return list(merged.values())
