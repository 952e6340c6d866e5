"""How long `edgeopt` commands that convert nothing take to start and finish, and what they import.

    .venv/bin/python scripts/bench_cli_startup.py [--repeat 5]

Each command runs in a fresh process (`python -m edgeopt.cli.main ...`, as the console script does) in a
scratch folder with an empty fleet database and a small manifest; the best of N wall times is printed with
the heavy packages (torch, onnx, the runtimes) the command imported, from `python -X importtime`.
Figures: docs/BENCHMARKS.md ("Command start-up").
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HEAVY = ("torch", "onnx", "onnxruntime", "tensorflow", "litert_torch", "ai_edge_litert", "executorch", "sklearn", "scipy")
COMMANDS = (["--help"], ["devices"], ["devices", "rpi4"], ["fleet", "results", "--db", "sqlite:///fleet.db"],
            ["fleet", "devices", "--db", "sqlite:///fleet.db"], ["report", "out", "-o", "report.html"],
            ["deploy", "out", "--all", "--broker", "127.0.0.1:9"], ["convert", "--help"])


def scratch(folder: Path) -> None:
    from edgeopt.fleet.store import open_store

    open_store(f"sqlite:///{folder / 'fleet.db'}").close()
    out = folder / "out"
    out.mkdir()
    (out / "model.onnx").write_bytes(b"model")
    (out / "manifest.json").write_text(json.dumps({
        "schema": "edgeopt.manifest/1", "model": {"source": "m.py:build", "sha256": "a" * 64}, "recommended": "onnx-fp32",
        "artifacts": [{"key": "onnx-fp32", "path": "model.onnx", "format": "onnx", "precision": "fp32",
                       "sha256": hashlib.sha256(b"model").hexdigest(), "size_bytes": 5}]}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as folder:
        scratch(Path(folder))
        for command in COMMANDS:
            times = []
            for _ in range(args.repeat):
                started = time.perf_counter()
                subprocess.run([sys.executable, "-m", "edgeopt.cli.main", *command], cwd=folder, capture_output=True)
                times.append(time.perf_counter() - started)
            traced = subprocess.run([sys.executable, "-X", "importtime", "-m", "edgeopt.cli.main", *command],
                                    cwd=folder, capture_output=True, text=True)
            imported = {line.rsplit("|", 1)[-1].strip() for line in traced.stderr.splitlines() if "|" in line}
            heavy = sorted(name for name in HEAVY if name in imported)
            print(f"{' '.join(command[:2]):24s} best {min(times):.2f} s, worst {max(times):.2f} s; "
                  f"heavy imports: {', '.join(heavy) or 'none'}")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
