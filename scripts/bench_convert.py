#!/usr/bin/env python3
"""Conversion benchmark: ResNet-18-like and MobileNetV2-like nets (224x224), in one run.

Both nets are trained for a few minutes on scikit-learn's digits upsampled to 224x224 first, so
the accuracy columns are a real classifier's (labels held out from training and calibration).

For each net: the x86-64 recipe's conversion wall time, then median latency at batch 1 and 8 of
PyTorch eager FP32, ORT FP32 and every artifact, timed interleaved (variant after variant, round
after round) so machine drift hits all of them alike; and the rpi4 recipe's full wall time
(ONNX FP32+INT8, TFLite FP32+INT8, validation). Writes a markdown table to stdout and, with
--write-docs, into docs/BENCHMARKS.md between the "bench_convert" markers.

    .venv/bin/python scripts/bench_convert.py --write-docs
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

import edgeopt
from edgeopt_converters.cost.host_timing import time_interleaved
from hostinfo import cpu_model
from edgeopt_converters.source.examples import digits_splits
from edgeopt_agent.runners import open_runner

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "BENCHMARKS.md"
BEGIN, END = "<!-- bench_convert:begin -->", "<!-- bench_convert:end -->"


# --- models (plain torch.nn: torchvision is not available here) -------------------------------
class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.down is None else self.down(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + identity)


class ResNet18(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
                                  nn.MaxPool2d(3, 2, 1))
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        self.use_res = stride == 1 and cin == cout
        layers = []
        if expand != 1:
            layers += [nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(inplace=True)]
        layers += [nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False), nn.BatchNorm2d(hidden),
                   nn.ReLU6(inplace=True), nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.block(x) if self.use_res else self.block(x)


class MobileNetV2(nn.Module):
    SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))

    def __init__(self, classes=1000):
        super().__init__()
        layers = [nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU6(inplace=True)]
        cin = 32
        for t, c, n, s in self.SETTINGS:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers += [nn.Conv2d(cin, 1280, 1, bias=False), nn.BatchNorm2d(1280), nn.ReLU6(inplace=True)]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(1280, classes)

    def forward(self, x):
        return self.classifier(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


def digits_at_224(images):
    """scikit-learn's 8x8 digits, upsampled to 3x224x224: a real classification task that ships
    with a package, at the input size these nets are built for."""
    x = torch.from_numpy(images).repeat(1, 3, 1, 1)
    return nn.functional.interpolate(x, size=224, mode="bilinear", align_corners=False).numpy()


def train_on_digits(cls, images, labels, epochs, seed=0):
    """Train the net for a few minutes, so accuracy figures are those of a real classifier: an
    untrained net's near-equal logits flip their argmax on any rounding and say nothing."""
    torch.manual_seed(seed)
    model = cls(classes=10)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    for epoch in range(epochs):
        order = np.random.default_rng(seed + epoch).permutation(len(images))
        for start in range(0, len(images), 32):
            idx = order[start:start + 32]
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(torch.from_numpy(digits_at_224(images[idx]))),
                                               torch.from_numpy(labels[idx]))
            loss.backward()
            optimizer.step()
    return model.eval()


def runner_call(path, feed, threads):
    runner = open_runner(path, threads=threads).load()
    name = runner.inputs()[0].name
    try:
        return runner.bind(runner.prepare({name: feed})), runner
    except Exception as exc:  # e.g. a TFLite model with a fixed batch of 1
        runner.close()
        return None, "n/a (fixed batch 1)" if "fixed size" in str(exc) else f"n/a ({str(exc).splitlines()[0][:60]})"


def bench_model(name, cls, threads, rounds, epochs, out_root):
    splits = digits_splits()
    t0 = time.perf_counter()
    model = train_on_digits(cls, *splits["train"], epochs=epochs)
    train_s = time.perf_counter() - t0
    calib, evaluation = out_root / f"{name}-calib.npz", out_root / f"{name}-eval.npz"
    np.savez(calib, input=digits_at_224(splits["calibration"][0][:64]))
    np.savez(evaluation, input=digits_at_224(splits["eval"][0][:128]), labels=splits["eval"][1][:128])
    t0 = time.perf_counter()
    manifest = edgeopt.convert(model, device="x86-64", output_dir=out_root / name, input_shape=(1, 3, 224, 224),
                               calibration=calib, eval_data=evaluation, threads=threads)
    convert_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    edgeopt.convert(model, device="rpi4", output_dir=out_root / f"{name}-rpi4", input_shape=(1, 3, 224, 224),
                    calibration=calib, eval_data=evaluation, time_on_host=False)
    rpi4_s = time.perf_counter() - t0

    torch.set_num_threads(threads)
    rows = {}
    for batch in (1, 8):
        x = digits_at_224(splits["eval"][0][:batch])
        xt = torch.from_numpy(x)
        calls, notes, keep = {}, {}, []

        def eager(xt=xt):
            with torch.no_grad():
                model(xt)

        calls["pytorch-eager-fp32"] = eager
        for artifact in manifest["artifacts"]:
            call, runner = runner_call(out_root / name / artifact["path"], x, threads)
            if call is None:
                notes[artifact["key"]] = runner
            else:
                calls[artifact["key"]] = call
                keep.append(runner)
        timings = time_interleaved(calls, rounds=rounds, min_round_s=0.3, warmup=2)
        medians = {key: t.p50_ms for key, t in timings.items()}
        for r in keep:
            r.close()
        rows[batch] = (medians, notes)
    return manifest, convert_s, rpi4_s, train_s, rows


def render(results, threads, rounds):
    lines = [
        f"Machine: {cpu_model()} ({platform.machine()}), {os.cpu_count()} CPUs; "
        f"torch {torch.__version__}, {threads} threads, {rounds} interleaved rounds per variant; median ms.",
        "",
    ]
    for name, (manifest, convert_s, rpi4_s, train_s, rows) in results.items():
        ort = rows[1][0]["onnx-fp32"]
        lines.append(f"### {name}")
        lines.append("")
        lines.append("| variant | batch 1 (ms) | batch 8 (ms) | speed-up vs ORT FP32 (batch 1) | top-1 accuracy % | agreement with FP32 % | cosine | recommended |")
        lines.append("|---|---|---|---|---|---|---|---|")
        accuracy = {a["key"]: a for a in manifest["artifacts"]}
        order = ["pytorch-eager-fp32"] + [a["key"] for a in manifest["artifacts"]]
        for key in order:
            b1 = rows[1][0].get(key)
            b8 = rows[8][0].get(key)
            cell1 = f"{b1:.2f}" if b1 is not None else rows[1][1].get(key, "-")
            cell8 = f"{b8:.2f}" if b8 is not None else rows[8][1].get(key, "-")
            speed = f"{ort / b1:.2f}x" if b1 else "-"
            a = accuracy.get(key)
            top1 = f"{a['accuracy']['top1_accuracy']:.1f}" if a else "-"
            agree = f"{a['accuracy']['top1_agreement']:.1f}" if a else "-"
            cos = f"{a['accuracy']['cosine_similarity']:.4f}" if a else "-"
            rec = "yes" if a and a["recommended"] else ""
            lines.append(f"| {key} | {cell1} | {cell8} | {speed} | {top1} | {agree} | {cos} | {rec} |")
        lines.append("")
        lines.append(f"Trained on 1,200 digits upsampled to 224x224 for {train_s:.0f} s; accuracy on 128 held-out "
                     f"digits, calibration on 64 others.")
        lines.append(f"x86-64 recipe conversion (export, calibration, validation, host timing): {convert_s:.1f} s; "
                     f"full rpi4 recipe (ONNX FP32+INT8, TFLite FP32+INT8, validation): {rpi4_s:.1f} s.")
        lines.append(f"Recommendation: {manifest['recommendation']['key']} — {manifest['recommendation']['reason']}")
        lines.append("")
    return "\n".join(lines)


def write_docs(text):
    DOCS.parent.mkdir(exist_ok=True)
    current = DOCS.read_text() if DOCS.exists() else "# Benchmarks\n"
    block = f"{BEGIN}\n{text}\n{END}"
    if BEGIN in current:
        current = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: block, current, flags=re.S)
    else:
        current = current.rstrip() + "\n\n## Conversion (scripts/bench_convert.py)\n\n" + block + "\n"
    DOCS.write_text(current)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--models", default="resnet18,mobilenetv2")
    parser.add_argument("--epochs", default="resnet18=2,mobilenetv2=4",
                        help="Training epochs over the digits per net (a minute or two each); MobileNetV2 "
                             "learns slower from scratch.")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    nets = {"resnet18": ResNet18, "mobilenetv2": MobileNetV2}
    epochs = {k: int(v) for k, v in (item.split("=") for item in args.epochs.split(","))}
    results = {}
    with tempfile.TemporaryDirectory(prefix="edgeopt-bench-") as tmp:
        for name in args.models.split(","):
            print(f"benchmarking {name} ...", file=sys.stderr)
            results[name] = bench_model(name, nets[name], args.threads, args.rounds, epochs.get(name, 2), Path(tmp))
    text = render(results, args.threads, args.rounds)
    print(text)
    if args.write_docs:
        write_docs(text)


if __name__ == "__main__":
    main()
