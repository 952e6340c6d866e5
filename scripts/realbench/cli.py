"""`scripts/bench_real_models.py`: benchmark the corpus's models (all, or those --models names) and print
and save the results."""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Dict

from realbench import results as results_file
from realbench.cases import CASES, GROUPS, selected
from realbench.done_when import done_when, done_when_lines
from realbench.report import host_line, markdown
from realbench.run import bench


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="all",
                        help=f"comma-separated models or groups; models: {', '.join(CASES)}; groups: "
                             + "; ".join(f"{g} ({', '.join(m)})" for g, m in GROUPS.items() if g != "all"))
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument("--device", default="x86-64",
                        help="the device profile edgeopt converts for: a name or a profile .toml (default x86-64)")
    parser.add_argument("--convert-timeout", type=float, default=900,
                        help="stop an edgeopt conversion after this many seconds (default 900) and record that")
    parser.add_argument("--no-edgeopt", action="store_true",
                        help="only the baselines, on the model's own FP32 ONNX (a PyTorch source's own export)")
    args = parser.parse_args(argv)
    results: Dict[str, Dict[str, dict]] = {}
    load_before = os.getloadavg()
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    for name in selected(args.models):
        with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as tmp:
            work = Path(tmp)
            try:
                case = CASES[name](work)
                results[name] = bench(case, work, args.device, args.convert_timeout, not args.no_edgeopt)
            except Exception as exc:
                results[name] = {"edgeopt": {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"}}
            for row in results[name].values():
                row.pop("path", None)
        print(f"== {name}", json.dumps(results[name], indent=1, default=str), flush=True)
    load_after = os.getloadavg()
    print(host_line())
    print("Load average (1, 5, 15 min) before: {:.2f} {:.2f} {:.2f}; after: {:.2f} {:.2f} {:.2f}".format(*load_before, *load_after))
    print(markdown(results))
    from edgeopt_agent.profiles import load_profile

    predicted = not load_profile(args.device).matches_host()
    summary = done_when(results, args.device, predicted=predicted)
    print()
    print("\n".join(done_when_lines(summary)))
    if args.json:
        run = {"device": args.device, "speed": summary["speed"], "host": host_line().removeprefix("Host: ").rstrip("."),
               "load_before": " ".join(f"{v:.2f}" for v in load_before),
               "load_after": " ".join(f"{v:.2f}" for v in load_after), "started": started,
               "finished": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "convert_timeout_s": args.convert_timeout,
               "edgeopt": not args.no_edgeopt, "commit": _commit()}
        results_file.save(args.json, run, results, summary)
    return 0


def _commit() -> str:
    """The checkout's commit, where it is a git checkout ('' elsewhere)."""
    import subprocess

    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False,
                              cwd=Path(__file__).resolve().parent)
    except OSError:
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""
