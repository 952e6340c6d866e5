"""Artifacts converted on x86, run on aarch64, compared: the figures scripts/verify_arm.sh records.

    arm_compare.py convert --out DIR --profiles rpi4 rpi5 ...     (host: convert, x86 outputs, references)
    arm_compare.py run --out DIR/<profile> --cpu cortex-a72         (aarch64: the agent's runners and engine)
    arm_compare.py judge --out DIR --arm ARMDIR --profiles ...      (host: compare, print a Markdown table)

`run` imports only the agent package (what a board has); the other two need the convert extra.
Per artifact (ONNX, TFLite, ncnn, ExecuTorch): cosine, max absolute error, argmax agreement and
bit-identity of its outputs on the same 16 inputs, and whether the agent's own benchmark (child
process, reference check) said valid. An artifact whose runtime cannot run on the board's userland
(ExecuTorch on Python 3.11: executorch-numpy-runtime needs 3.12+) is listed with that reason, not run.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

SAMPLES = 16
SEED = 7
MODEL = "example:digits-cnn"
COMPARED_FORMATS = ("onnx", "tflite", "ncnn", "pte")


def _artifacts(folder: Path):
    from edgeopt_converters.manifest import read as read_manifest

    manifest = read_manifest(folder).data
    return [a for a in manifest["artifacts"] if a["format"] in COMPARED_FORMATS], manifest


def _inputs(folder: Path):
    with np.load(folder / "inputs.npz") as data:
        return [data[f"s{i}"] for i in range(SAMPLES)]


def _outputs(path: Path, samples, threads: int = 2):
    """The first output for each sample, and what the runner said it used (runtime, version, FP16)."""
    from edgeopt_agent.runners import open_runner

    with open_runner(str(path), threads=threads) as runner:
        name = runner.inputs()[0].name
        outputs = [np.asarray(runner.infer({name: x})[runner.outputs()[0].name]) for x in samples]
        return np.stack(outputs), runner.describe()


def _unavailable_reason(entry) -> str:
    """Why this machine cannot run the artifact's runtime, or "" when it can."""
    from edgeopt_agent import runtimes
    from edgeopt_agent.runners.availability import unavailable_reason

    runtime = (entry.get("board") or {}).get("runtime") or runtimes.FORMAT_RUNTIMES[entry["format"]][0]
    return unavailable_reason(runtime) or ""


def convert(out: Path, profiles) -> None:
    import edgeopt
    from edgeopt_converters.accuracy.board_reference import build_reference
    from edgeopt_converters.manifest import bench_inputs

    for profile in profiles:
        folder = out / profile
        manifest = edgeopt.convert(MODEL, device=profile, output_dir=folder, time_on_host=False)
        artifacts, _ = _artifacts(folder)
        first = artifacts[0]
        shape = [1] + [int(d) for d in first["inputs"][0]["shape"][1:]]
        rng = np.random.default_rng(SEED)
        samples = [rng.random(shape, dtype=np.float32) for _ in range(SAMPLES)]
        np.savez(folder / "inputs.npz", **{f"s{i}": x for i, x in enumerate(samples)})
        x86, references = {}, {}
        for entry in artifacts:
            x86[entry["key"]], _ = _outputs(folder / entry["path"], samples)
            references[entry["key"]] = {"inputs": bench_inputs(entry),
                                        "reference": build_reference(folder, manifest, entry, bench_inputs(entry))}
        np.savez(folder / "x86_outputs.npz", **x86)
        (folder / "references.json").write_text(json.dumps(references))
        print(profile, [a["key"] for a in artifacts])


def run(folder: Path, cpu: str) -> None:
    from edgeopt_agent.bench import BenchmarkSpec, run_benchmark

    artifacts, _ = _artifacts(folder)
    samples = _inputs(folder)
    references = json.loads((folder / "references.json").read_text())
    arm, checks = {}, {}
    for entry in artifacts:
        reason = _unavailable_reason(entry)
        if reason:
            checks[entry["key"]] = {"ok": False, "valid": None, "skipped": reason}
            print(folder.name, cpu, entry["key"], "not run here:", reason, flush=True)
            continue
        arm[entry["key"]], described = _outputs(folder / entry["path"], samples)
        job = references[entry["key"]]
        result = run_benchmark(BenchmarkSpec(artifact=str(folder / entry["path"]), runs=5, duration_s=0, warmup_runs=1,
                                             warmup_s=0, idle_s=0, timeout_s=900, inputs=job["inputs"],
                                             reference=job["reference"]))
        checks[entry["key"]] = {"ok": result["ok"], "valid": result.get("valid"),
                                "invalid_reasons": result.get("invalid_reasons"),
                                "output_check": result.get("output_check"), "runtime": result.get("runtime"),
                                "runtime_version": result.get("runtime_version"),
                                "fp16_arithmetic": described.get("fp16_arithmetic"),
                                "error": result.get("error")}
        print(folder.name, cpu, entry["key"], "agent:", "valid" if result.get("valid") else result.get("invalid_reasons")
              or result.get("error"), flush=True)
    np.savez(folder / "arm_outputs.npz", **arm)
    (folder / "arm_checks.json").write_text(json.dumps({"cpu": cpu, "checks": checks}))


def judge(out: Path, arm_root: Path, profiles, label: str) -> int:
    rows, failed = [], 0
    for profile in profiles:
        with np.load(out / profile / "x86_outputs.npz") as x86, np.load(arm_root / profile / "arm_outputs.npz") as arm:
            info = json.loads((arm_root / profile / "arm_checks.json").read_text())
            for key in x86.files:
                check = info["checks"][key]
                if check.get("skipped"):
                    reason = check["skipped"].split(";")[0]
                    rows.append(f"| {profile} | {info['cpu']} | {key} | | | | | not run: {reason} | skipped |")
                    continue
                a, b = x86[key].astype(np.float64), arm[key].astype(np.float64)
                flat_a, flat_b = a.reshape(-1), b.reshape(-1)
                cosine = float(flat_a @ flat_b / (np.linalg.norm(flat_a) * np.linalg.norm(flat_b) or 1.0))
                error = float(np.max(np.abs(a - b)))
                agree = float(np.mean(a.reshape(SAMPLES, -1).argmax(1) == b.reshape(SAMPLES, -1).argmax(1)))
                ok = cosine >= 0.9999 and agree == 1.0 and check["ok"] and check["valid"]
                failed += not ok
                rows.append(f"| {profile} | {info['cpu']} | {key} | {cosine:.6f} | {error:.3g} | "
                            f"{int(agree * SAMPLES)}/{SAMPLES} | {'yes' if np.array_equal(a, b) else 'no'} | "
                            f"{'valid' if check['valid'] else check.get('invalid_reasons') or check.get('error')}"
                            f"{' (FP16 arithmetic)' if check.get('fp16_arithmetic') else ''} | "
                            f"{'ok' if ok else 'FAILED'} |")
    print(f"aarch64 ({label}) against x86, {SAMPLES} inputs, {MODEL}:\n")
    print("| profile | emulated CPU | artifact | cosine | max abs error | argmax agree | bit-identical | agent on the board | |")
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 1 if failed else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=("convert", "run", "judge"))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--arm", type=Path)
    parser.add_argument("--profiles", nargs="*", default=["rpi4", "rpi5", "jetson-orin-nano"])
    parser.add_argument("--cpu", default="")
    parser.add_argument("--label", default="")
    args = parser.parse_args(argv)
    if args.step == "convert":
        convert(args.out, args.profiles)
    elif args.step == "run":
        run(args.out, args.cpu)
    else:
        return judge(args.out, args.arm, args.profiles, args.label)
    return 0


if __name__ == "__main__":
    sys.exit(main())
