#!/usr/bin/env python3
"""Measure what the idle `edgeopt-agent` costs: resident memory and CPU, connected to a local broker.

Starts a broker (mosquitto when installed, else the embedded amqtt one, through the test suite's
launcher edgeopt.fleet.broker; or --broker HOST:PORT for one already running), starts the agent
as its own process with the default telemetry interval, lets it settle, then samples it for
--duration seconds. Writes the "Agent daemon idle cost" section of docs/BENCHMARKS.md.

    .venv/bin/python scripts/bench_agent_idle.py --duration 60
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from hostinfo import cpu_model

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "docs" / "BENCHMARKS.md"
SECTION = "## Agent daemon idle cost"
TARGET_RSS_MB = 40.0
TARGET_CPU_PCT = 1.0
# Shared libraries whose presence in the daemon's memory map would mean a runtime was loaded.
HEAVY_LIBRARIES = ("onnxruntime", "numpy", "tensorflow", "tflite", "litert", "torch")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds to measure (default 60)")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds to wait after start-up (default 5)")
    parser.add_argument("--telemetry-interval", type=float, default=None,
                        help="passed to the agent; default: the agent's own default")
    parser.add_argument("--broker", help="HOST:PORT of a running broker (default: start a local one)")
    parser.add_argument("--profile", help="device profile passed to the agent")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/BENCHMARKS.md alone")
    args = parser.parse_args()

    broker = None
    if args.broker:
        address, broker_kind = args.broker, "given"
    else:
        from edgeopt.fleet.broker import start_broker

        broker = start_broker()
        address, broker_kind = broker.address, broker.kind
    data_dir = Path(tempfile.mkdtemp(prefix="edgeopt-idle-"))
    command = [sys.executable, "-m", "edgeopt_agent.daemon", "--broker", address, "--device-id", "idle-bench",
               "--data-dir", str(data_dir), "--log-level", "warning"]
    if args.telemetry_interval is not None:
        command += ["--telemetry-interval", str(args.telemetry_interval)]
    if args.profile:
        command += ["--profile", args.profile]
    agent = subprocess.Popen(command)
    try:
        measurement = measure(psutil.Process(agent.pid), args.settle, args.duration)
        if agent.poll() is not None:
            raise SystemExit(f"the agent exited with status {agent.returncode} during the measurement")
    finally:
        if agent.poll() is None:
            agent.send_signal(signal.SIGTERM)
            agent.wait(20)
        if broker is not None:
            broker.stop()

    from edgeopt_agent.daemon.config import DEFAULT_TELEMETRY_INTERVAL_S

    measurement.update(
        broker=broker_kind,
        interval=args.telemetry_interval or DEFAULT_TELEMETRY_INTERVAL_S,
        duration=args.duration,
    )
    report = render(measurement)
    print(report)
    if not args.no_write:
        write_section(report)
        print(f"updated {BENCHMARKS.relative_to(ROOT)}")
    ok = measurement["rss_max_mb"] <= TARGET_RSS_MB and measurement["cpu_pct"] <= TARGET_CPU_PCT
    return 0 if ok else 1


def measure(process: psutil.Process, settle_s: float, duration_s: float) -> dict:
    time.sleep(settle_s)
    cpu_start = process.cpu_times()
    wall_start = time.monotonic()
    rss_samples = []
    while time.monotonic() - wall_start < duration_s:
        rss_samples.append(process.memory_info().rss)
        time.sleep(1.0)
    cpu_end = process.cpu_times()
    wall = time.monotonic() - wall_start
    cpu_s = (cpu_end.user - cpu_start.user) + (cpu_end.system - cpu_start.system)
    full = process.memory_full_info()
    mapped = {Path(m.path).name for m in process.memory_maps() if m.path}
    heavy = sorted(name for name in mapped if any(h in name.lower() for h in HEAVY_LIBRARIES))
    return {
        "rss_mb": full.rss / 2**20,
        "rss_max_mb": max(rss_samples) / 2**20,
        "uss_mb": full.uss / 2**20,
        "cpu_s": cpu_s,
        "wall_s": wall,
        "cpu_pct": 100.0 * cpu_s / wall,
        "threads": process.num_threads(),
        "heavy": heavy,
    }




def render(m: dict) -> str:
    def verdict(ok: bool) -> str:
        return "within target" if ok else "OVER TARGET"

    today = datetime.date.today().isoformat()
    lines = [
        SECTION,
        "",
        f"Measured by `scripts/bench_agent_idle.py` on {today}: the agent connected to a local {m['broker']} "
        f"broker, telemetry every {m['interval']:g} s, no jobs, sampled for {m['wall_s']:.0f} s after start-up.",
        f"Machine: {cpu_model()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, {platform.system()} "
        f"{platform.machine()}.",
        "",
        "| metric | measured | target |",
        "|---|---|---|",
        f"| resident memory (RSS, peak while sampling) | {m['rss_max_mb']:.1f} MB | <= {TARGET_RSS_MB:.0f} MB "
        f"({verdict(m['rss_max_mb'] <= TARGET_RSS_MB)}) |",
        f"| unique memory (USS, at the end) | {m['uss_mb']:.1f} MB | |",
        f"| CPU, share of one core | {m['cpu_pct']:.2f} % ({m['cpu_s']:.2f} s CPU in {m['wall_s']:.0f} s) | "
        f"<= {TARGET_CPU_PCT:.0f} % ({verdict(m['cpu_pct'] <= TARGET_CPU_PCT)}) |",
        f"| threads | {m['threads']} | |",
        "",
        "Runtime libraries mapped in the idle daemon: "
        + (", ".join(m["heavy"]) if m["heavy"] else "none (onnxruntime, numpy and the TFLite runtime load only "
           "in the benchmark's child process)")
        + ".",
        "The MQTT thread wakes every 0.25 s to hand new outbox rows to paho; that and one telemetry snapshot "
        "per interval are the whole idle load. A board's numbers differ (slower cores, 32-bit/64-bit Python): "
        "run the script there for its own figures.",
        "",
    ]
    return "\n".join(lines)


def write_section(report: str) -> None:
    """Replace this script's section of docs/BENCHMARKS.md (or append it), leaving the rest as it is."""
    text = BENCHMARKS.read_text(encoding="utf-8") if BENCHMARKS.exists() else "# Benchmarks\n"
    pattern = re.compile(rf"^{re.escape(SECTION)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: report + "\n", text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + report
    BENCHMARKS.parent.mkdir(parents=True, exist_ok=True)
    BENCHMARKS.write_text(text.rstrip("\n") + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
