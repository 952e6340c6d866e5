"""README's own conversion command on a model nobody tuned edgeopt on: torchvision's pretrained MobileNetV2
(the benchmark's mobilenet-v2 case), its evaluation images without labels, exactly as README shows it:

    edgeopt convert scripts/realbench/sources.py:mobilenet_v2 --weights .corpus/mobilenet-v2/mobilenet_v2-b0353104.pth \\
        --device rpi4 -o OUT --input-shape 1,3,224,224 --calibration calib.npz --eval-data eval.npz --max-accuracy-drop 1

It records the wall time, the exit status and the command's last lines, the manifest's recommendation and
failed artifacts, and whether each ONNX artifact keeps the task by the case's judge (crops classified as
their photograph's ImageNet classes, McNemar against FP32). `--busy` keeps one core busy with another
process while it converts (issue 36: a ~3 M-parameter CNN with 300 samples within 10 minutes on a 2-core
host so loaded).

    .venv/bin/python scripts/bench_readme_command.py [--device rpi4] [--samples 300] [--busy] [--json out.json]
"""
import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from realbench.cases.photos import PHOTO_CLASSES, mobilenet_v2
from realbench.corpus import corpus_file
from realbench.run import run_outputs

HERE = Path(__file__).resolve().parent
EDGEOPT = Path(sys.executable).with_name("edgeopt")


def _spin(stop) -> None:
    while not stop.is_set():
        sum(range(10000))


def convert(work: Path, device: str, timeout_s: float) -> dict:
    """README's command on the case's data; what it said and left."""
    out = work / "out"
    command = [str(EDGEOPT), "convert", f"{HERE / 'realbench' / 'sources.py'}:mobilenet_v2",
               "--weights", str(corpus_file("mobilenet-v2", "imagenet")), "--device", device, "-o", str(out),
               "--input-shape", "1,3,224,224", "--calibration", str(work / "calib.npz"),
               "--eval-data", str(work / "eval.npz"), "--max-accuracy-drop", "1"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
    started = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout_s, check=False)
        status, said = done.returncode, (done.stdout + done.stderr).strip().splitlines()[-12:]
    except subprocess.TimeoutExpired:
        status, said = None, [f"stopped after {timeout_s:.0f} s"]
    result = {"command": " ".join(command), "wall_s": round(time.perf_counter() - started, 1), "exit_status": status,
              "last_lines": said}
    manifest = out / "manifest.json"
    if manifest.is_file():
        data = json.loads(manifest.read_text())
        result.update(recommended=data.get("recommended"), reason=(data.get("recommendation") or {}).get("reason"),
                      failed_artifacts=data.get("failed_artifacts"), warnings=data.get("warnings"),
                      artifacts={a["key"]: {"path": str(out / a["path"]), "format": a.get("format"),
                                            "verdict": (a.get("accuracy") or {}).get("verdict")}
                                 for a in data.get("artifacts", [])})
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="rpi4")
    parser.add_argument("--samples", type=int, default=300, help="evaluation images (default 300)")
    parser.add_argument("--busy", action="store_true", help="keep one core busy with another process meanwhile")
    parser.add_argument("--timeout", type=float, default=3600, help="stop the conversion after this many seconds")
    parser.add_argument("--json", type=Path, help="write the record here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="readme-command-") as tmp:
        work = Path(tmp)
        case = mobilenet_v2(work, crops_per_photo=-(-args.samples // len(PHOTO_CLASSES)))
        np.savez(work / "calib.npz", **case.calibration)
        np.savez(work / "eval.npz", **{k: v[:args.samples] for k, v in case.evaluation.items()})
        stop = multiprocessing.Event()
        spinner = multiprocessing.Process(target=_spin, args=(stop,), daemon=True) if args.busy else None
        if spinner:
            spinner.start()
        load_before = os.getloadavg()
        try:
            record = convert(work, args.device, args.timeout)
        finally:
            stop.set()
            if spinner:
                spinner.join(5)
        record.update(device=args.device, samples=args.samples, busy_core=args.busy,
                      load_before=[round(v, 2) for v in load_before], load_after=[round(v, 2) for v in os.getloadavg()])
        reference = run_outputs(case.onnx, case)
        for key, artifact in (record.get("artifacts") or {}).items():
            if artifact["format"] == "onnx":
                task = case.task(reference, run_outputs(Path(artifact["path"]), case))
                artifact.update(task=task.figure, task_kept=task.kept)
            artifact.pop("path")
    text = json.dumps(record, indent=1, default=str)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
