"""Board truth without a board: edgeopt's latency predictions against published board measurements.

    python scripts/bench_published.py                   # report: errors per board and runtime, runtime order
    python scripts/bench_published.py --write           # and store the fitted priors in device_profiles/*.toml
    python scripts/bench_published.py --json out.json   # every row's prediction
    python scripts/bench_published.py --profile ./mybox.toml --measurements mine.csv --write   # a board of one's own

Every row of device_profiles/published/measurements.csv (and of each --measurements CSV) names an
architecture `arch_zoo` rebuilds; it is exported as `edgeopt convert` exports a PyTorch model (and,
for FP16 / INT8 rows, converted by edgeopt's own FP16 and TensorRT-layout INT8 steps, calibrated on
random data: latency does not depend on the values), costed by `graph_cost.analyze_onnx` and timed by
the roofline of the processor the runtime runs on (`cost/priors.py`). Priors per (board, runtime,
precision) are fitted on the rows of the "train" split only (`roofline_fit.fit`); the "heldout" rows,
fixed by `published.split_of` before any fit, give the errors reported after priors. For every pair
of rows that share a board, model, input and precision, the report says whether the predictions
order the two runtimes as the measurements do.

INT8: every INT8 row is also predicted as if its runtime had no INT8 priors, transferred from its FP32
priors by the speed-up other runtimes on the same processor show (`priors.transferred`), the estimate
the recommendation falls back on; the report gives both errors, and for every pair of rows published at
FP32 and INT8 (same board, runtime, model, input, threads and source) the INT8 speed-up predicted
against the published one. `--write` stores each board's transfer check as [[transfers]].
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MARK_BEGIN = "# --- [[priors]]: written by scripts/bench_published.py from device_profiles/published/; do not edit by hand ---"
MARK_END = "# --- end of [[priors]] ---"
POOL_CPU_KINDS = True  # see fit_groups (chosen by --cv on the train split: 15 % median error against 15 % unpooled, rpi4 14 % against 27 %)
KINDS_MIN_ROWS = 0  # fit per kernel kind in every group (roofline_fit.fit's ridge keeps a small group near its whole factor)


def graph_for(model: str, shape: Tuple[int, ...], precision: str, runtime: str, board: str, cache: Path) -> Path:
    """The ONNX graph edgeopt costs a row's artifact by (`priors.costed_graph`): FP32 export, then its FP16 or
    INT8 step where the artifact's graph is of its own precision. INT8 is laid out as edgeopt lays it out for
    the runtime's processor: TensorRT's explicit Q/DQ for a GPU runtime, the board CPU's scheme
    (`recipe.cpu_int8_options`: S8S8 on Arm) for a CPU runtime."""
    import arch_zoo
    from edgeopt_converters.cost.priors import costed_precision, on_gpu

    fp32 = arch_zoo.export(model, shape, cache)
    precision = costed_precision(runtime, precision)
    if precision == "fp32":
        return fp32
    layout = "" if precision == "fp16" or on_gpu(runtime) else "-" + cpu_int8_layout(board)[0]
    out = fp32.with_name(fp32.stem + f".{precision}{layout}.onnx")
    if out.is_file():
        return out
    from edgeopt_converters.passes.base import StepContext
    from edgeopt_converters.passes.fp16_onnx import ConvertOnnxFp16
    from edgeopt_converters.passes.quantize_onnx import OnnxInt8Options, QuantizeOnnxStatic
    from edgeopt_converters.source.tensors import Dataset

    partial = out.with_name(out.stem + ".partial.onnx")
    if precision == "fp16":
        ConvertOnnxFp16().run(StepContext(None, ()), fp32, partial)
    else:
        options = cpu_int8_layout(board)[1] if layout else OnnxInt8Options.for_tensorrt()
        data = Dataset({"input": np.random.default_rng(0).random((2,) + shape[1:], dtype=np.float32)}, None, "random")
        ctx = StepContext(None, (), calibration=data, calibration_cache=out.with_name(out.stem + ".calibration.json"))
        QuantizeOnnxStatic(options).run(ctx, fp32, partial)
    partial.replace(out)
    return out


def cpu_int8_layout(board: str):
    """(file tag, OnnxInt8Options) of the INT8 graph edgeopt builds for the board's CPU runtimes."""
    from edgeopt_converters.recipe import cpu_int8_options

    options = cpu_int8_options(profile_of(board))
    short = {"uint8": "u8", "int8": "s8"}
    return short[options.activation_type] + short[options.weight_type] + ("r" if options.reduce_range else ""), options


_ANALYSED: Dict[Path, object] = {}  # GraphCost by graph file, each graph analysed once per run


def cost_of(graph: Path, note: str = ""):
    from edgeopt_converters.cost.graph_cost import analyze_onnx

    if graph not in _ANALYSED:
        print(f"  {note}{graph.name}", file=sys.stderr, flush=True)
        _ANALYSED[graph] = analyze_onnx(graph)
    return _ANALYSED[graph]


def graph_costs(rows, cache: Path) -> list:
    """The GraphCost of each row's costed ONNX graph, in row order."""
    return [cost_of(graph_for(row.model, row.input, row.precision, row.runtime, row.board, cache), f"[{i + 1}/{len(rows)}] ")
            for i, row in enumerate(rows)]


PROFILES: Dict[str, object] = {}  # custom profiles (--profile) by name; the bundled ones load by name


def profile_of(board: str):
    from edgeopt_agent.profiles import load_profile

    return PROFILES.get(board) or load_profile(board)


PARALLEL_GRID = (1.0, 0.98, 0.95, 0.9, 0.85, 0.8, 0.75, 0.7, 0.6, 0.5)


def predict_rows(rows, costs, parallel: Optional[Dict[Tuple[str, str, str], float]] = None) -> List[dict]:
    """Each row's uncalibrated prediction on its runtime's processor, threads scaled by the group's parallel share."""
    from edgeopt_converters.cost.priors import fit_kind_ms, uncalibrated

    found = []
    for row, cost in zip(rows, costs):
        p = (parallel or {}).get((row.board, row.runtime, row.precision))
        prediction = uncalibrated(cost, profile_of(row.board), row.runtime, row.threads, row.clock_mhz, p)
        found.append({"row": row, "predicted_ms": prediction.roofline_ms, "measured_ms": row.latency_ms,
                      "kind_ms": fit_kind_ms(prediction), "precision": row.precision})
    return found


def key_of(row) -> Tuple[str, str, str]:
    return row.board, row.runtime, row.precision


def fit_one(members: List[dict], ridge: float, kinds_min_rows: int):
    """A Fit on rows (dicts of predicted_ms, measured_ms, kind_ms): per kernel kind where there are enough rows."""
    from edgeopt_converters.cost.priors import fit_prior
    from edgeopt_converters.cost.roofline_fit import Fit, whole_graph_factor

    if len(members) < kinds_min_rows:
        return Fit(whole_graph_factor(members), len(members))
    return fit_prior(members, ridge)


def log_loss(found, members: List[dict]) -> float:
    return sum(math.log(found.predicted(m["kind_ms"]) / m["measured_ms"]) ** 2 for m in members)


def fit_groups(rows, costs, split: str = "train", ridge: float = 0.1, kinds_min_rows: int = 0,
               leave_out=None, pool: bool = POOL_CPU_KINDS) -> Dict[Tuple[str, str, str], dict]:
    """Per (board, runtime, precision): the priors fitted on its rows of `split` (less those `leave_out` picks),
    with the parallel share that fits them best where they ran at several thread counts. With `pool`, a CPU
    runtime's per-kind shape is fitted on its rows of every board at once (each board's rows divided by that
    board's whole-graph factor first), then scaled by each board's own factor: a kernel kind's relative
    efficiency is the runtime's code, more than the board's."""
    groups: Dict[Tuple, List[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        if row.split == split and not (leave_out and leave_out(row)):
            groups[key_of(row)].append(i)
    fitted = {}
    for key, indices in sorted(groups.items()):
        threads = {rows[i].threads for i in indices}
        grid = PARALLEL_GRID if len(threads) > 1 and not runtimes_gpu(key[1]) else (None,)
        best = None
        for p in grid:
            members = predict_rows([rows[i] for i in indices], [costs[i] for i in indices], {key: p} if p else None)
            found = fit_one(members, ridge, kinds_min_rows)
            loss = log_loss(found, members)
            if best is None or loss < best[0] - 1e-12:
                best = (loss, p, found, members)
        fitted[key] = {"fit": best[2], "parallel": best[1], "train": best[3]}
    if pool:
        _pool_cpu_kinds(fitted, ridge)
    return fitted


def _pool_cpu_kinds(fitted: Dict[Tuple[str, str, str], dict], ridge: float) -> None:
    from edgeopt_converters.cost.priors import fit_prior
    from edgeopt_converters.cost.roofline_fit import Fit

    by_runtime: Dict[str, List[Tuple]] = defaultdict(list)
    for key in fitted:
        if not runtimes_gpu(key[1]):
            by_runtime[key[1]].append(key)
    for runtime, keys in by_runtime.items():
        pooled = [dict(m, measured_ms=m["measured_ms"] / fitted[k]["fit"].factor) for k in keys for m in fitted[k]["train"]]
        shape = fit_prior(pooled, ridge)
        if not shape.kinds:
            continue
        for k in keys:
            factor = fitted[k]["fit"].factor
            kinds = {kind: factor * g for kind, g in shape.kinds.items()}
            fitted[k]["fit"] = Fit(factor, fitted[k]["fit"].samples, kinds, dict(shape.kind_samples))


def runtimes_gpu(runtime: str) -> bool:
    from edgeopt_converters.cost.priors import on_gpu

    return on_gpu(runtime)


def calibrated(rows, costs, fitted) -> List[dict]:
    """Every row predicted with its group's priors (None where its group has none)."""
    parallel = {k: g["parallel"] for k, g in fitted.items() if g["parallel"]}
    items = predict_rows(rows, costs, parallel)
    for item in items:
        group = fitted.get(key_of(item["row"]))
        item["calibrated_ms"] = group["fit"].predicted(item["kind_ms"]) if group else None
    return items


def cross_validated(rows, costs, ridge: float, kinds_min_rows: int, pool: bool = POOL_CPU_KINDS) -> List[dict]:
    """Train rows only: each (board, model, input) group predicted by priors fitted on the other train groups."""
    items = predict_rows(rows, costs)
    for group in sorted({r.group for r in rows if r.split == "train"}):
        fitted = fit_groups(rows, costs, "train", ridge, kinds_min_rows, leave_out=lambda r, g=group: r.group == g,
                            pool=pool)
        left = [i for i, r in enumerate(rows) if r.group == group and r.split == "train"]
        again = calibrated([rows[i] for i in left], [costs[i] for i in left], fitted)
        for i, item in zip(left, again):
            items[i] = item
    return [i for i in items if i["row"].split == "train"]


def error_pct(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured * 100.0


def stats(errors: List[float]) -> str:
    if not errors:
        return "-"
    return f"{statistics.median(errors):.0f} % / {max(errors):.0f} %"


def report(items: List[dict], fitted: dict, judged: str = "heldout") -> dict:
    from edgeopt_converters.cost.published import runtime_pairs

    lines = ["| board | runtime | precision | rows (train / held-out) | median / worst error, roofline alone "
             f"(all rows) | median / worst error with priors ({judged}) |", "|---|---|---|---|---|---|"]
    by_key: Dict[Tuple, List[dict]] = defaultdict(list)
    for item in items:
        r = item["row"]
        by_key[(r.board, r.runtime, r.precision)].append(item)
    for (board, runtime, precision), members in sorted(by_key.items()):
        train = [m for m in members if m["row"].split == "train"]
        held = [m for m in members if m["row"].split == "heldout"]
        judged_rows = [m for m in members if m["row"].split == judged]
        before = [abs(error_pct(m["predicted_ms"], m["measured_ms"])) for m in members]
        after = [abs(error_pct(m["calibrated_ms"], m["measured_ms"])) for m in judged_rows if m["calibrated_ms"]]
        note = "" if (board, runtime, precision) in fitted else " (no train rows: no priors)"
        lines.append(f"| {board} | {runtime} | {precision} | {len(train)} / {len(held)} | {stats(before)} | "
                     f"{stats(after)}{note} |")
    summary = {"boards": {}, "pairs": {}}
    lines += ["", f"| board | rows (train / held-out) | median / worst error, roofline alone ({judged}) | "
                  f"median / worst error with priors ({judged}) | runtime order right ({judged} pairs) |",
              "|---|---|---|---|---|"]
    by_item = {id(i["row"]): i for i in items}
    pairs = runtime_pairs([i["row"] for i in items])
    for board in sorted({i["row"].board for i in items}):
        members = [i for i in items if i["row"].board == board]
        held = [m for m in members if m["row"].split == judged]
        before = [abs(error_pct(m["predicted_ms"], m["measured_ms"])) for m in held]
        after = [abs(error_pct(m["calibrated_ms"], m["measured_ms"])) for m in held if m["calibrated_ms"]]
        right, total = order_right([(a, b) for a, b in pairs if a.board == board and a.split == judged], by_item)
        summary["boards"][board] = {"rows": len(members), judged: len(held),
                                    "median_before": statistics.median(before) if before else None,
                                    "median_after": statistics.median(after) if after else None,
                                    "predicted_heldout": len(after), "pairs_right": right, "pairs": total}
        lines.append(f"| {board} | {sum(m['row'].split == 'train' for m in members)} / "
                     f"{sum(m['row'].split == 'heldout' for m in members)} | {stats(before)} | {stats(after)} "
                     f"({len(after)} of {len(held)} predicted) | {right} / {total} |")
    for split in ("train", "heldout") if judged == "heldout" else ("train",):
        summary["pairs"][split] = order_right([(a, b) for a, b in pairs if a.split == split], by_item)
    lines.append("")
    for split, (right, total) in summary["pairs"].items():
        lines.append(f"runtime order right in {right} of {total} {split} pairs"
                     + (f" ({right / total * 100:.0f} %)" if total else ""))
    summary["table"] = "\n".join(lines)
    return summary


def ordered_right(a, b, by_item) -> Optional[bool]:
    """Whether the predictions order a pair's two runtimes as the measurements do (None: one is not predicted)."""
    pa, pb = by_item[id(a)]["calibrated_ms"], by_item[id(b)]["calibrated_ms"]
    return None if pa is None or pb is None else (pa < pb) == (a.latency_ms < b.latency_ms)


def order_right(pairs, by_item) -> Tuple[int, int]:
    """(pairs ordered right, pairs predicted)."""
    verdicts = [v for v in (ordered_right(a, b, by_item) for a, b in pairs) if v is not None]
    return sum(verdicts), len(verdicts)


def pair_lines(items: List[dict]) -> List[str]:
    from edgeopt_converters.cost.published import runtime_pairs

    by_item = {id(i["row"]): i for i in items}
    out = []
    for a, b in runtime_pairs([i["row"] for i in items]):
        pa, pb = by_item[id(a)]["calibrated_ms"], by_item[id(b)]["calibrated_ms"]
        verdict = {None: "-", True: "right", False: "WRONG"}[ordered_right(a, b, by_item)]
        out.append(f"{a.split:7s} {a.board:16s} {a.model:20s} {a.precision} {a.runtime} {a.latency_ms:.1f} vs "
                   f"{b.runtime} {b.latency_ms:.1f} ms; predicted {pa or float('nan'):.1f} vs {pb or float('nan'):.1f}: {verdict}")
    return out


def board_profile(board: str, fitted: dict, without: Optional[Tuple[str, str]] = None):
    """The board's profile with the priors of `fitted` (those of (runtime, precision) `without` left out)."""
    from dataclasses import replace

    from edgeopt_agent.profiles import EfficiencyPrior

    priors = tuple(EfficiencyPrior(runtime, precision, g["fit"].factor, len(g["train"]), 0, None, dict(g["fit"].kinds),
                                   (), g["parallel"])
                   for (b, runtime, precision), g in sorted(fitted.items()) if b == board and (runtime, precision) != without)
    return replace(profile_of(board), priors=priors, transfers=())


def transfer_checkable(row, fitted: dict) -> bool:
    """Whether a row's runtime could be predicted at the row's precision by transfer alone: its own priors at
    BASE_PRECISION and another runtime's at both."""
    from edgeopt_converters.cost.priors import BASE_PRECISION, donors

    if row.precision == BASE_PRECISION or (row.board, row.runtime, BASE_PRECISION) not in fitted:
        return False
    return bool(donors(board_profile(row.board, fitted, (row.runtime, row.precision)), row.runtime, row.precision))


def transfer_predictions(rows, fitted: dict, cache: Path, pick=lambda row: True) -> Dict[int, dict]:
    """Each checkable row (and `pick`) predicted as if its runtime had no priors at its precision: `priors.transferred`
    on the board's fitted priors less (runtime, precision), by id() of the row."""
    from edgeopt_converters.cost.priors import BASE_PRECISION, transferred

    found = {}
    for row in rows:
        if not pick(row) or not transfer_checkable(row, fitted):
            continue
        costs = {f"onnx-{p}": cost_of(graph_for(row.model, row.input, p, row.runtime, row.board, cache), "[transfer] ")
                 for p in (BASE_PRECISION, row.precision)}
        profile = board_profile(row.board, fitted, (row.runtime, row.precision))
        est = transferred(profile, row.model, row.runtime, row.precision, costs, row.threads, row.clock_mhz)
        if est.ms is not None:
            found[id(row)] = {"row": row, "transferred_ms": est.ms, "donors": est.evidence.donors, "speedup": est.evidence.speedup}
    return found


def transfer_cross_validated(rows, costs, cache: Path, ridge: float, kinds_min_rows: int) -> Dict[int, dict]:
    """Train rows only, as `cross_validated`: each (board, model, input) group's checkable rows transferred with
    priors fitted on the other train groups."""
    found = {}
    for group in sorted({r.group for r in rows if r.split == "train"}):
        fitted = fit_groups(rows, costs, "train", ridge, kinds_min_rows, leave_out=lambda r, g=group: r.group == g)
        found.update(transfer_predictions(rows, fitted, cache, lambda r, g=group: r.group == g and r.split == "train"))
    return found


def speedup_pairs(rows) -> List[Tuple[int, int]]:
    """(float row, INT8 row) index pairs: the same board, runtime, model, input and threads published at FP32 and INT8."""
    by_key: Dict[Tuple, Dict[str, int]] = defaultdict(dict)
    for i, row in enumerate(rows):
        if row.published_precision in ("fp32", "int8"):
            by_key[row.group + (row.runtime, row.threads, row.source.id)][row.published_precision] = i
    return [(k["fp32"], k["int8"]) for k in by_key.values() if len(k) == 2]


def int8_report(items: List[dict], transfers: Dict[int, dict], judged: str = "heldout") -> dict:
    """INT8 rows: error with the runtime's own INT8 priors and transferred (as if it had none; `transfers` by id()
    of the row), per board and runtime; and the INT8 speed-up over FP32 the priors predict against the published
    one, per pair of rows."""
    transfers = {i: transfers[id(item["row"])] for i, item in enumerate(items) if id(item["row"]) in transfers}
    lines = [f"| board | runtime | INT8 rows (train / held-out) | median / worst error, own INT8 priors ({judged}) | "
             f"median / worst error, transferred from FP32 ({judged}; donors) |", "|---|---|---|---|---|"]
    summary: Dict[str, dict] = {"groups": {}, "speedups": []}
    by_key: Dict[Tuple, List[int]] = defaultdict(list)
    for i, item in enumerate(items):
        if item["row"].precision == "int8":
            by_key[(item["row"].board, item["row"].runtime)].append(i)
    for (board, runtime), indices in sorted(by_key.items()):
        judged_rows = [i for i in indices if items[i]["row"].split == judged]
        own = [abs(error_pct(items[i]["calibrated_ms"], items[i]["measured_ms"])) for i in judged_rows
               if items[i]["calibrated_ms"]]
        moved = [abs(error_pct(transfers[i]["transferred_ms"], items[i]["measured_ms"])) for i in judged_rows if i in transfers]
        givers = sorted({d for i in indices if i in transfers for d in transfers[i]["donors"]})
        train = sum(items[i]["row"].split == "train" for i in indices)
        lines.append(f"| {board} | {runtime} | {train} / {len(indices) - train} | {stats(own)} | {stats(moved)}"
                     + (f" ({', '.join(givers)})" if givers else "") + " |")
        summary["groups"][f"{board} {runtime}"] = {"own": own, "transferred": moved}
    checked = [abs(error_pct(t["transferred_ms"], items[i]["measured_ms"])) for i, t in transfers.items()
               if items[i]["row"].split == judged]
    lines += ["", f"transferred estimates ({judged}): median / worst error {stats(checked)} over {len(checked)} INT8 rows", "",
              f"| board | runtime | model | threads | INT8 speed-up over FP32, published | predicted, own priors | "
              f"predicted, transferred | ({judged} pairs) |", "|---|---|---|---|---|---|---|---|"]
    ratio_errors = []
    for f, q in speedup_pairs([i["row"] for i in items]):
        row = items[q]["row"]
        if row.split != judged or not (items[f]["calibrated_ms"] and items[q]["calibrated_ms"]):
            continue
        published = items[f]["measured_ms"] / items[q]["measured_ms"]
        own = items[f]["calibrated_ms"] / items[q]["calibrated_ms"]
        moved = items[f]["calibrated_ms"] / transfers[q]["transferred_ms"] if q in transfers else None
        ratio_errors.append(abs(error_pct(own, published)))
        summary["speedups"].append({"board": row.board, "runtime": row.runtime, "model": row.model, "threads": row.threads,
                                    "published": published, "own": own, "transferred": moved})
        lines.append(f"| {row.board} | {row.runtime} | {row.model} | {row.threads or '-'} | {published:.2f}x | {own:.2f}x | "
                     + (f"{moved:.2f}x" if moved else "-") + " | |")
    right = sum((s["own"] > 1) == (s["published"] > 1) for s in summary["speedups"])
    lines.append("")
    lines.append(f"INT8 speed-up ({judged} pairs): median / worst error of the predicted ratio {stats(ratio_errors)}; "
                 f"INT8 predicted faster or not as published in {right} of {len(summary['speedups'])} pairs")
    summary["checked"] = checked
    summary["table"] = "\n".join(lines)
    return summary


def write_priors(fitted: dict, items: List[dict], folder: Path, files: Optional[Dict[str, Path]] = None,
                 transfers: Optional[Dict[int, dict]] = None) -> List[Path]:
    """Each board's [[priors]] block, between MARK_BEGIN and MARK_END at the end of its profile (`files`: the
    profile file of a custom board, by name; else folder/NAME.toml), with a [[transfers]] entry per precision
    whose transferred estimates `transfers` checked on the board's published rows."""
    from edgeopt_converters.cost.priors import BASE_PRECISION, median_abs_error_pct, prior_table

    per_board: Dict[str, List[dict]] = defaultdict(list)
    for (board, runtime, precision), group in sorted(fitted.items()):
        held = [(m["calibrated_ms"], m["measured_ms"]) for m in items if key_of(m["row"]) == (board, runtime, precision)
                and m["row"].split == "heldout" and m["calibrated_ms"]]
        per_board[board].append(prior_table(group["fit"], len(group["train"]), len(held), median_abs_error_pct(held),
                                            [m["row"].source.id for m in group["train"]], runtime, precision,
                                            group["parallel"]))
    checks: Dict[Tuple[str, str], List[dict]] = defaultdict(list)
    for check in (transfers or {}).values():
        checks[(check["row"].board, check["row"].precision)].append(check)
    moved: Dict[str, List[dict]] = defaultdict(list)
    for (board, precision), found in sorted(checks.items()):
        held = [(c["transferred_ms"], c["row"].latency_ms) for c in found if c["row"].split == "heldout"]
        entry = {"precision": precision, "base": BASE_PRECISION, "rows": sum(c["row"].split == "train" for c in found),
                 "heldout_rows": len(held), "median_error_pct": median_abs_error_pct(held),
                 "runtimes": sorted({c["row"].runtime for c in found})}
        moved[board].append(entry)
    written = []
    for board, entries in per_board.items():
        path = (files or {}).get(board) or folder / f"{board}.toml"
        text = path.read_text()
        if MARK_BEGIN in text:
            text = text[:text.index(MARK_BEGIN)].rstrip("\n") + "\n"
        block = ["", MARK_BEGIN,
                 "# Efficiency priors per runtime and precision: measured / roofline-predicted latency, fitted on the",
                 "# train split of the published measurements of this board; median_error_pct is on the held-out rows.",
                 "# Roof keys (kinds) are precision/kernel-kind; overhead scales a nominal per-node dispatch cost."]
        for entry in entries:
            block += ["", "[[priors]]"]
            for key in ("runtime", "precision", "factor", "rows", "heldout_rows", "median_error_pct",
                        "parallel_fraction", "sources"):
                if key in entry:
                    block.append(f"{key} = {json.dumps(entry[key])}")
            if entry["kinds"]:
                block.append("[priors.kinds]")
                block += [f"{json.dumps(k)} = {v}" for k, v in entry["kinds"].items()]
        if moved.get(board):
            block += ["", "# How well a runtime's latency at a precision it has no priors for is predicted from its FP32",
                      "# priors and the speed-up other runtimes show here (cost/priors.py, transferred): checked on the",
                      "# published rows of runtimes that have their own, predicted without them; error on the held-out rows."]
        for entry in moved.get(board, []):
            block += ["", "[[transfers]]"]
            block += [f"{key} = {json.dumps(round(v, 1) if isinstance(v, float) else v)}" for key, v in entry.items()
                      if v is not None]
        block.append(MARK_END)
        path.write_text(text + "\n".join(block) + "\n")
        written.append(path)
    return written


def main(argv: Optional[List[str]] = None) -> int:
    from edgeopt_converters.cost.published import load_measurements
    from edgeopt_converters.cost.roofline_fit import RIDGE

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=Path("/tmp/edgeopt-arch-zoo"), help="where exported graphs are kept")
    parser.add_argument("--measurements", type=Path, action="append", default=[], help="more measurements (CSV)")
    parser.add_argument("--profile", type=Path, action="append", default=[],
                        help="a custom board's profile file, whose name rows of --measurements may use")
    parser.add_argument("--only-added", action="store_true", help="fit on the --measurements rows alone")
    parser.add_argument("--cv", action="store_true",
                        help="judge on the train split alone (leave one model out): for choosing how to fit, "
                             "without looking at the held-out rows")
    parser.add_argument("--ridge", type=float, default=RIDGE, help="roofline_fit's pull of kinds to the whole factor")
    parser.add_argument("--kinds-min-rows", type=int, default=KINDS_MIN_ROWS,
                        help="fit per kernel kind only for groups of at least this many train rows")
    parser.add_argument("--write", action="store_true", help="store the fitted priors in device_profiles/*.toml")
    parser.add_argument("--json", type=Path, help="write every row's prediction here")
    parser.add_argument("--pairs", action="store_true", help="print every runtime pair and its verdict")
    args = parser.parse_args(argv)
    from edgeopt_agent.profiles import load_profile_file

    files = {}
    for path in args.profile:
        profile = load_profile_file(path)
        PROFILES[profile.name], files[profile.name] = profile, path
    rows = load_measurements(args.measurements, bundled=not args.only_added, boards=tuple(PROFILES))
    costs = graph_costs(rows, args.cache)
    if args.cv:
        items = cross_validated(rows, costs, args.ridge, args.kinds_min_rows)
        summary = report(items, {key_of(i["row"]): None for i in items}, judged="train")
        print(summary["table"])
        transfers = transfer_cross_validated(rows, costs, args.cache, args.ridge, args.kinds_min_rows)
        print("\n" + int8_report(items, transfers, judged="train")["table"])
        return 0
    fitted = fit_groups(rows, costs, "train", args.ridge, args.kinds_min_rows)
    items = calibrated(rows, costs, fitted)
    summary = report(items, fitted)
    print(summary["table"])
    transfers = transfer_predictions(rows, fitted, args.cache)
    print("\n" + int8_report(items, transfers)["table"])
    if args.pairs:
        print("\n".join(pair_lines(items)))
    if args.write:
        for path in write_priors(fitted, items, ROOT / "device_profiles", files, transfers):
            print(f"wrote priors into {path}")
    if args.json:
        args.json.write_text(json.dumps([{
            "board": i["row"].board, "runtime": i["row"].runtime, "model": i["row"].model, "input": i["row"].shape_text,
            "precision": i["row"].precision, "threads": i["row"].threads, "split": i["row"].split,
            "measured_ms": i["measured_ms"], "roofline_ms": round(i["predicted_ms"], 4),
            "with_priors_ms": None if i["calibrated_ms"] is None else round(i["calibrated_ms"], 4),
            "transferred_ms": round(transfers[id(i["row"])]["transferred_ms"], 4) if id(i["row"]) in transfers else None,
            "source": i["row"].source.id} for i in items], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
