#!/usr/bin/env python3
"""Benchmark-engine overhead: `run_benchmark`'s p50 against a bare timing loop on the same file.

For a small CNN exported to ONNX (torch.onnx) and to TFLite (litert-torch), each repeat runs
(a) a bare loop `t = perf_counter(); <runtime call>; perf_counter() - t` in a fresh process and
(b) `run_benchmark` with the same threads, warm-up count and run count, interleaved (a, b, then
b, a on the next repeat) so machine drift hits both alike. The target: p50 ratio within 5%.
Prints a markdown table and, with --write-docs, puts it into docs/BENCHMARKS.md between the
"bench_agent:engine" markers (section "Agent benchmark engine").

    .venv/bin/python scripts/bench_agent.py --write-docs
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from edgeopt_agent.bench import BenchmarkSpec, run_benchmark
from hostinfo import cpu_model

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "BENCHMARKS.md"
SECTION = "## Agent benchmark engine"
BEGIN, END = "<!-- bench_agent:engine:begin -->", "<!-- bench_agent:engine:end -->"
INPUT_SHAPE = (1, 3, 96, 96)

# The bare loop: only the runtime's own call between the clock reads, the same seeded input
# as the engine's (uniform [0, 1) float32 from numpy's default_rng(seed)).
BARE_LOOP = r"""
import json, math, sys, time
import numpy as np
path, runtime, threads, warmup, runs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
rng = np.random.default_rng(0)
if runtime == "onnxruntime":
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"])
    feeds = {i.name: rng.random(tuple(i.shape), dtype=np.float32) for i in session.get_inputs()}
    def call():
        return session.run(None, feeds)
else:
    from ai_edge_litert.interpreter import Interpreter
    interpreter = Interpreter(model_path=path, num_threads=threads)
    interpreter.allocate_tensors()
    (inp,), outs = interpreter.get_input_details(), interpreter.get_output_details()
    x = rng.random(tuple(inp["shape"]), dtype=np.float32)
    def call():
        interpreter.set_tensor(inp["index"], x)
        interpreter.invoke()
        return [interpreter.get_tensor(o["index"]) for o in outs]
for _ in range(warmup):
    call()
durations = []
for _ in range(runs):
    t = time.perf_counter()
    call()
    durations.append(time.perf_counter() - t)
durations.sort()
print(json.dumps({"p50_ms": durations[math.ceil(len(durations) / 2) - 1] * 1000}))
"""


def build_models(folder: Path):
    """A small CNN (9 M multiply-adds at 96x96) as ONNX and as TFLite, both FP32."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, 2, 1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, 2, 1), nn.ReLU(),
        nn.Conv2d(32, 64, 3, 2, 1), nn.ReLU(),
        nn.Conv2d(64, 128, 3, 2, 1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10),
    ).eval()
    example = (torch.rand(*INPUT_SHAPE),)
    onnx_path = folder / "small_cnn.onnx"
    torch.onnx.export(model, example, str(onnx_path), input_names=["image"], output_names=["logits"], dynamo=True)
    import litert_torch

    tflite_path = folder / "small_cnn.tflite"
    litert_torch.convert(model, example).export(str(tflite_path))
    return {"onnxruntime": onnx_path, "tflite": tflite_path}


def bare_p50(path: Path, runtime: str, threads: int, warmup: int, runs: int) -> float:
    done = subprocess.run(
        [sys.executable, "-c", BARE_LOOP, str(path), runtime, str(threads), str(warmup), str(runs)],
        capture_output=True, text=True, check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])["p50_ms"]


def engine_p50(path: Path, threads: int, warmup: int, runs: int):
    spec = BenchmarkSpec(
        artifact=str(path), runs=runs, duration_s=0, warmup_runs=warmup, warmup_s=0, threads=threads, idle_s=0
    )
    start = time.perf_counter()
    result = run_benchmark(spec)
    wall = time.perf_counter() - start
    if not result["ok"]:
        raise SystemExit(f"run_benchmark failed on {path.name}: {result['error']}")
    return result["latency_ms"]["p50"], wall, result


def measure(models, threads: int, warmup: int, runs: int, repeats: int):
    rows = {}
    for runtime, path in models.items():
        bare, engine, walls = [], [], []
        for repeat in range(repeats):
            order = ("bare", "engine") if repeat % 2 == 0 else ("engine", "bare")
            for which in order:
                if which == "bare":
                    bare.append(bare_p50(path, runtime, threads, warmup, runs))
                else:
                    p50, wall, result = engine_p50(path, threads, warmup, runs)
                    engine.append(p50)
                    walls.append(wall)
            print(f"{runtime} repeat {repeat + 1}/{repeats}: bare {bare[-1]:.4f} ms, engine {engine[-1]:.4f} ms", file=sys.stderr)
        rows[runtime] = {
            "bare": bare,
            "engine": engine,
            "ratios": [e / b for e, b in zip(engine, bare)],
            "wall_s": statistics.median(walls),
            "load_ms": result["load_ms"],
            "peak_rss_mb": result["peak_rss_mb"],
            "version": result.get("runtime_version"),
        }
    return rows




def render(rows, threads: int, warmup: int, runs: int, repeats: int) -> str:
    lines = [
        f"Measured by `scripts/bench_agent.py` on {time.strftime('%Y-%m-%d')}: {cpu_model()}, "
        f"{len(os.sched_getaffinity(0))} CPUs, Python {platform.python_version()}. "
        f"Small FP32 CNN (4 stride-2 convs, 9 M MACs, input {list(INPUT_SHAPE)}), {threads} thread(s), "
        f"{warmup} warm-up + {runs} measured runs, {repeats} interleaved repeats; medians shown.",
        "",
        "| runtime | bare loop p50 ms | run_benchmark p50 ms | ratio (median) | ratios per repeat | run_benchmark wall s | load ms | peak RSS MB |",
        "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |",
    ]
    for runtime, row in rows.items():
        lines.append(
            f"| {runtime} {row['version'] or ''} | {statistics.median(row['bare']):.4f} | "
            f"{statistics.median(row['engine']):.4f} | {statistics.median(row['ratios']):.3f} | "
            f"{', '.join(f'{r:.3f}' for r in row['ratios'])} | {row['wall_s']:.2f} | "
            f"{row['load_ms']:.1f} | {row['peak_rss_mb']:.0f} |"
        )
    lines += [
        "",
        "Ratio = run_benchmark p50 / bare-loop p50 (target: within 0.95-1.05). The wall time includes",
        "starting the child process, importing the runtime, loading, warm-up and measuring.",
    ]
    return "\n".join(lines)


def write_docs(body: str) -> None:
    block = f"{BEGIN}\n{body}\n{END}"
    text = DOCS.read_text(encoding="utf-8") if DOCS.exists() else "# Benchmarks\n"
    if BEGIN in text and END in text:
        text = text[: text.index(BEGIN)] + block + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + f"\n\n{SECTION}\n\n{block}\n"
    DOCS.parent.mkdir(parents=True, exist_ok=True)
    DOCS.write_text(text, encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--write-docs", action="store_true", help=f"update the section in {DOCS.relative_to(ROOT)}")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        models = build_models(Path(folder))
        rows = measure(models, args.threads, args.warmup, args.runs, args.repeats)
    body = render(rows, args.threads, args.warmup, args.runs, args.repeats)
    print(body)
    if args.write_docs:
        write_docs(body)
        print(f"\nwrote {DOCS.relative_to(ROOT)}", file=sys.stderr)
    worst = max(abs(statistics.median(r["ratios"]) - 1) for r in rows.values())
    return 0 if worst <= 0.05 else 1


if __name__ == "__main__":
    sys.exit(main())
