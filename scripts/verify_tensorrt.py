#!/usr/bin/env python3
"""Check edgeopt's TensorRT path end to end on a machine with TensorRT and an NVIDIA GPU.

    python scripts/verify_tensorrt.py                       # a Jetson with JetPack, or a workstation

For a small CNN and a ResNet-18-like net (plain torch, random weights, batch-norm statistics
settled on random data) it:
  1. converts them with edgeopt for a Jetson profile (ONNX FP32, FP16 and the INT8 QDQ ONNX laid
     out for TensorRT, calibrated on seeded data), exactly as `edgeopt convert` does;
  2. builds an FP16 and an INT8 engine with the agent's TensorRT runner (engine cache, timing
     cache), and compares their outputs with the FP32 ONNX run in onnxruntime (cosine >= 0.99);
  3. benchmarks each engine with the agent's benchmark engine, which must reuse the cached engine,
     and prints build time, GPU compute and end-to-end p50/p99, and the INT8-over-FP16 speed-up;
  4. runs the same benchmark with the job option `"profile": true`: TensorRT's IProfiler must report
     layers whose times add up to the engine's GPU compute time within LAYER_COVERAGE (the check
     `edgeopt profile` passes on onnxruntime), and the slowest layers are printed.

A board without torch: run `--convert-only --out DIR` on a host, copy DIR over, then
`--from DIR` on the board. Exit status: 0 every check passed; 1 a check failed; 2 this machine
cannot run the checks (no TensorRT, cuda-python or GPU; no torch/onnx for the conversion).
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

COSINE_FLOOR = 0.99
LAYER_COVERAGE = (0.85, 1.15)  # sum of layer times / GPU compute time of the profiled runs
NETS = {"small-cnn": (1, 3, 128, 128), "resnet18-like": (1, 3, 224, 224)}


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    if not args.convert_only:
        reason = tensorrt_unavailable()
        if reason is not None:
            return cannot_run(
                f"TensorRT cannot run here: {reason}. Run this on a machine with TensorRT and an NVIDIA GPU "
                "(a Jetson with JetPack, or a workstation); on a host without them, --convert-only --out DIR "
                "prepares the models to copy to the board"
            )
    folder = Path(args.source or args.out)
    if args.source is None:
        missing = conversion_unavailable()
        if missing is not None:
            return cannot_run(
                f"converting the test nets needs {missing} (pip install 'edgeopt[convert]'); or convert on a host "
                "with --convert-only --out DIR and run --from DIR here"
            )
        for name in args.nets:
            print(f"converting {name} for {args.device} ...", flush=True)
            convert_net(name, folder / name, args)
        if args.convert_only:
            print(f"converted into {folder}; on the board: python scripts/verify_tensorrt.py --from {folder}")
            return 0
    rows: List[Row] = []
    for name in args.nets:
        rows.extend(check_net(name, folder / name, folder / "engines", args))
    print_report(rows)
    return 0 if all(row.ok for row in rows) else 1


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="verify-tensorrt-out", help="folder for models and engines (default: %(default)s)")
    parser.add_argument("--from", dest="source", help="use models converted earlier with --convert-only into this folder")
    parser.add_argument("--convert-only", action="store_true", help="convert the nets and stop (no TensorRT needed)")
    parser.add_argument("--device", default="jetson-orin-nano", help="device profile to convert for (default: %(default)s)")
    parser.add_argument("--nets", nargs="+", choices=sorted(NETS), default=list(NETS), help="nets to check (default: both)")
    parser.add_argument("--runs", type=int, default=200, help="measured runs per engine (default: %(default)s)")
    parser.add_argument("--samples", type=int, default=16, help="inputs compared against FP32 (default: %(default)s)")
    parser.add_argument("--calibration", type=int, default=32, help="calibration inputs for INT8 (default: %(default)s)")
    return parser.parse_args(argv)


def cannot_run(message: str) -> int:
    print(f"verify_tensorrt: {message}", file=sys.stderr)
    return 2


def tensorrt_unavailable() -> Optional[str]:
    from edgeopt_agent.runners.availability import unavailable_reason

    return unavailable_reason("tensorrt")


def conversion_unavailable() -> Optional[str]:
    import importlib.util

    missing = [name for name in ("torch", "onnx") if importlib.util.find_spec(name) is None]
    return " and ".join(missing) if missing else None


# -- the nets (plain torch) -----------------------------------------------------------------------


def build_net(name: str):
    import torch
    from torch import nn

    def conv_bn(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

    class BasicBlock(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int):
            super().__init__()
            self.body = nn.Sequential(conv_bn(cin, cout, stride), nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
            self.skip = nn.Identity() if stride == 1 and cin == cout else nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            self.relu = nn.ReLU(inplace=True)

        def forward(self, x):
            return self.relu(self.body(x) + self.skip(x))

    torch.manual_seed(0)
    if name == "small-cnn":
        return nn.Sequential(conv_bn(3, 32, 2), conv_bn(32, 64, 2), conv_bn(64, 128, 2), nn.AdaptiveAvgPool2d(1),
                             nn.Flatten(), nn.Linear(128, 10))
    stages, cin = [], 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        stages += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
        cin = cout
    return nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
                         nn.MaxPool2d(3, 2, 1), *stages, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000))


def convert_net(name: str, folder: Path, args: argparse.Namespace) -> None:
    import numpy as np
    import torch

    import edgeopt

    shape = NETS[name]
    model = build_net(name)
    rng = np.random.default_rng(0)
    model.train()  # settle batch-norm statistics so activations have a sane range, as a trained net's do
    with torch.no_grad():
        for _ in range(8):
            model(torch.from_numpy(rng.standard_normal((8,) + shape[1:]).astype(np.float32)))
    model.eval()
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "calibration.npy", rng.standard_normal((args.calibration,) + shape[1:]).astype(np.float32))
    inputs = rng.standard_normal((args.samples,) + shape[1:]).astype(np.float32)
    with torch.no_grad():  # the FP32 net's own classes: the evidence that its output is class scores
        labels = model(torch.from_numpy(inputs)).argmax(1).numpy()
    np.savez(folder / "eval.npz", input=inputs, labels=labels)
    edgeopt.convert(model, device=args.device, output_dir=folder, input_shape=shape, formats=("onnx",),
                    calibration=folder / "calibration.npy", eval_data=folder / "eval.npz", time_on_host=False)


# -- the checks -------------------------------------------------------------------------------------


@dataclass
class Row:
    net: str
    precision: str
    artifact: str = ""
    build_s: Optional[float] = None
    cosine: Optional[float] = None
    gpu_compute: Dict[str, float] = field(default_factory=dict)
    end_to_end: Dict[str, float] = field(default_factory=dict)
    enqueue: Dict[str, float] = field(default_factory=dict)
    engine_reused: Optional[bool] = None
    layers: Dict[str, object] = field(default_factory=dict)
    notes: List[str] = field(default_factory=list)
    problems: List[str] = field(default_factory=list)
    skipped: Optional[str] = None

    @property
    def ok(self) -> bool:
        return not self.problems


def check_net(name: str, folder: Path, engines: Path, args: argparse.Namespace) -> List[Row]:
    import numpy as np

    from edgeopt_converters.manifest import read as read_manifest

    manifest = read_manifest(folder).data
    artifacts = {entry["key"]: entry for entry in manifest["artifacts"]}
    fp32 = artifacts["onnx-fp32"]
    inputs = np.load(folder / "eval.npz")["input"][: args.samples]
    input_name, output_name = fp32["inputs"][0]["name"], fp32["outputs"][0]["name"]
    reference = reference_outputs(folder / fp32["path"], input_name, inputs)
    plan = [("fp16", artifacts.get("onnx-fp16", fp32)), ("int8", artifacts.get("onnx-int8"))]
    rows = []
    for precision, entry in plan:
        row = Row(name, precision)
        if entry is None:
            row.skipped = f"the {args.device} profile makes no INT8 artifact"
        else:
            row.artifact = entry["path"]
            measure(row, folder / entry["path"], input_name, output_name, inputs, reference, engines, args)
        rows.append(row)
        print(f"  {name} {precision}: {'skipped: ' + row.skipped if row.skipped else 'ok' if row.ok else '; '.join(row.problems)}",
              flush=True)
    return rows


def reference_outputs(path: Path, input_name: str, inputs):
    import numpy as np
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.concatenate([session.run(None, {input_name: inputs[i:i + 1]})[0] for i in range(len(inputs))])


def measure(row: Row, onnx: Path, input_name: str, output_name: str, inputs, reference, engines: Path,
            args: argparse.Namespace) -> None:
    import numpy as np

    from edgeopt_agent.bench import BenchmarkSpec, run_benchmark
    from edgeopt_agent.errors import UserError
    from edgeopt_agent.runners import open_runner
    from edgeopt_agent.runners.tensorrt.cuda_runtime import CudaError

    try:
        with open_runner(onnx, runtime="tensorrt", precision=row.precision, cache_dir=engines) as runner:
            row.build_s = runner.describe()["engine"]["build_s"]
            row.notes = list(runner.notes)
            outputs = np.concatenate([runner.infer({input_name: inputs[i:i + 1]})[output_name] for i in range(len(inputs))])
    except (UserError, CudaError, MemoryError, RuntimeError) as exc:
        cannot = ("no fast INT8 path", "strongly typed")  # the GPU or the TensorRT version, not a fault
        if any(reason in str(exc) for reason in cannot):
            row.skipped = str(exc)
        else:
            row.problems.append(f"engine: {type(exc).__name__}: {exc}")
        return
    row.cosine = cosine(outputs, reference)
    if row.cosine < COSINE_FLOOR:
        row.problems.append(f"cosine {row.cosine:.4f} against FP32 is below {COSINE_FLOOR}")

    spec = BenchmarkSpec(artifact=str(onnx), runtime="tensorrt", precision=row.precision, engine_cache_dir=str(engines),
                         runs=args.runs, duration_s=1.0, warmup_runs=20, idle_s=0, timeout_s=600)
    started = time.perf_counter()
    result = run_benchmark(spec)
    if not result["ok"]:
        row.problems.append(f"benchmark: {result['error']['kind']}: {result['error']['message']}")
        return
    row.engine_reused = bool(result["engine"]["cached"])
    if not row.engine_reused:
        row.problems.append("the benchmark rebuilt the engine instead of reusing the cached one")
    row.gpu_compute = result.get("gpu_compute_ms") or {}
    row.enqueue = result.get("enqueue_ms") or {}
    row.end_to_end = result["latency_ms"]
    if not row.gpu_compute:
        row.problems.append("no GPU compute time was measured")
    elif row.gpu_compute["p50"] > row.end_to_end["p50"]:
        row.problems.append("GPU compute p50 exceeds the end-to-end p50")
    print(f"    benchmarked in {time.perf_counter() - started:.1f} s", flush=True)
    check_layer_profile(row, spec)


def check_layer_profile(row: Row, spec) -> None:
    from dataclasses import replace

    from edgeopt_agent.bench import run_benchmark

    result = run_benchmark(replace(spec, runs=20, profile=True))
    profile = result.get("op_profile") if result["ok"] else None
    if not profile or profile.get("profiler") != "tensorrt" or profile.get("error"):
        row.problems.append(f"layer profile: {(profile or {}).get('error') or profile or result.get('error')}")
        return
    row.layers = profile
    coverage = profile.get("node_coverage")
    if not profile.get("node_count") or coverage is None:
        row.problems.append("layer profile: TensorRT's IProfiler reported no layer time")
    elif not LAYER_COVERAGE[0] <= coverage <= LAYER_COVERAGE[1]:
        row.problems.append(f"layer profile: layer times add up to {coverage:.2f}x the GPU compute time, "
                            f"outside {LAYER_COVERAGE[0]}-{LAYER_COVERAGE[1]}")


def cosine(a, b) -> float:
    """Whole-tensor cosine similarity, as the converter's judges compute it."""
    import numpy as np

    from edgeopt_converters.accuracy.judges import cosines

    return float(cosines(np.asarray(a).reshape(1, -1), np.asarray(b).reshape(1, -1))[0])


def print_report(rows: List[Row]) -> None:
    import tensorrt

    print(f"\nTensorRT {tensorrt.__version__}; cosine floor {COSINE_FLOOR}")
    header = f"{'net':<14} {'precision':<9} {'build s':>8} {'cosine':>8} {'GPU p50':>9} {'GPU p99':>9} {'e2e p50':>9} {'e2e p99':>9}  status"
    print(header)
    print("-" * len(header))
    for row in rows:
        status = "skipped: " + row.skipped if row.skipped else "ok" if row.ok else "FAILED: " + "; ".join(row.problems)
        print(f"{row.net:<14} {row.precision:<9} {_num(row.build_s):>8} {_num(row.cosine, 4):>8} "
              f"{_num(row.gpu_compute.get('p50')):>9} {_num(row.gpu_compute.get('p99')):>9} "
              f"{_num(row.end_to_end.get('p50')):>9} {_num(row.end_to_end.get('p99')):>9}  {status}")
    print("(times in ms; GPU = engine compute between CUDA events; e2e = host clock, copies to and from the GPU included)")
    for row in rows:
        for note in row.notes:
            print(f"note, {row.net} {row.precision}: {note}")
        if row.layers:
            slowest = ", ".join(f"{n['name']} {n['ms']:.3f} ms" for n in row.layers.get("nodes", [])[:3])
            print(f"layers, {row.net} {row.precision}: {row.layers['node_count']} layers add up to "
                  f"{row.layers['node_coverage']:.2f}x GPU compute ({row.layers['run_ms']:.3f} ms); slowest: {slowest}")
        if row.enqueue and row.gpu_compute and row.enqueue["p50"] >= 0.5 * row.gpu_compute["p50"]:
            print(f"note, {row.net} {row.precision}: enqueueing takes the host {row.enqueue['p50']:.3f} ms (p50), at least "
                  "half the GPU compute time, so that time may include part of it")
    for net in dict.fromkeys(row.net for row in rows):
        by = {row.precision: row for row in rows if row.net == net}
        fp16, int8 = by.get("fp16"), by.get("int8")
        if fp16 and int8 and fp16.gpu_compute and int8.gpu_compute:
            gpu = fp16.gpu_compute["p50"] / int8.gpu_compute["p50"]
            e2e = fp16.end_to_end["p50"] / int8.end_to_end["p50"]
            verdict = "" if gpu > 1.0 else "  (INT8 is not faster than FP16 here: do not ship it on this GPU)"
            print(f"{net}: INT8 over FP16 speed-up {gpu:.2f}x GPU compute, {e2e:.2f}x end to end{verdict}")
    failed = [row for row in rows if not row.ok]
    print(f"\n{'FAILED' if failed else 'PASSED'}: {len(rows) - len(failed)} of {len(rows)} checks passed")


def _num(value: Optional[float], digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


if __name__ == "__main__":
    sys.exit(main())
