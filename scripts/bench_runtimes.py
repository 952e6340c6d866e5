"""Every runtime of a board profile on three corpus models: `edgeopt convert --device rpi5`, then
`edgeopt bench` on the ncnn and ExecuTorch artifacts (docs/BENCHMARKS.md, "Runtimes on the corpus").

    .venv/bin/python scripts/bench_runtimes.py WORK [--device rpi5] [--cases onet,detector,transformer]
        [--time-budget 300]

  onet         MTCNN ONet (facenet-pytorch's nn.Module and onet.pt: a PyTorch source), LFW crops
  detector     nudenet YOLOv8n 320 (an ONNX source: ExecuTorch export needs PyTorch, so its .pte fails)
  transformer  all-MiniLM-L6-v2 + mean pooling (a PyTorch source: `minilm` below), 32 tokens

WORK/<case>/ gets the calibration and evaluation data, the conversion's output folder (out/),
the conversion's summary (convert.txt) and `edgeopt bench out --json`'s answer (bench.json; its
exit status and messages in bench.txt). Then every artifact is timed against ORT FP32 in one
interleaved run (the converter's `time_interleaved`, batch 1, 2 threads: ratio of p50s with its
95 % interval; the conversion itself compares each artifact with FP32 of its own format only), and
one Markdown row per artifact is printed: verdict or why it failed, speed-ups, `edgeopt bench` p50.
Needs the convert, ncnn, executorch and bench extras and `scripts/corpus.py fetch --all`.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import List

HERE = Path(__file__).resolve().parent
EDGEOPT = Path(sys.executable).with_name("edgeopt")
SEQ = 32


def minilm():
    """all-MiniLM-L6-v2 + mean pooling: the transformer case of scripts/bench_real_models.py as an nn.Module."""
    from realbench.sources import minilm as module

    return module()


def _data(case: str):
    """(model, extra convert arguments, calibration arrays, evaluation arrays) for a case."""
    import numpy as np

    from realbench.corpus import corpus_file
    from realbench.inputs import face_grid_tiles

    if case == "onet":
        import torch

        crops = np.load(corpus_file("scikit-image", "lfw"))
        images = torch.from_numpy(np.repeat(crops[:, None].astype(np.float32), 3, axis=1))
        x = torch.nn.functional.interpolate(images, size=(48, 48), mode="area").numpy()
        x = ((x * 255 - 127.5) * 0.0078125).astype(np.float32)  # MTCNN's input scaling
        model = f"{HERE / 'realbench' / 'sources.py'}:mtcnn_onet"
        return model, ["--weights", str(corpus_file("facenet-pytorch", "onet"))], {"x": x[::4]}, {"x": x}
    if case == "detector":
        faces = np.load(corpus_file("scikit-image", "lfw"))
        return (str(corpus_file("nudenet", "detector")), ["--output-kind", "output0=detection"],
                {"images": face_grid_tiles(faces, 0, 16)}, {"images": face_grid_tiles(faces, 1000, 48)})
    if case == "transformer":
        from tokenizers import Tokenizer

        from realbench.inputs import SENTENCES

        tok = Tokenizer.from_file(str(corpus_file("minilm", "tokenizer")))
        tok.enable_truncation(SEQ)
        tok.enable_padding(pad_id=0, pad_token="[PAD]", length=SEQ)
        enc = tok.encode_batch(SENTENCES)
        arrays = {"input_ids": np.array([e.ids for e in enc], np.int64),
                  "attention_mask": np.array([e.attention_mask for e in enc], np.int64),
                  "token_type_ids": np.array([e.type_ids for e in enc], np.int64)}
        shapes = [arg for name in arrays for arg in ("--input-shape", f"{name}=1,{SEQ}")]
        return (f"{Path(__file__).resolve()}:minilm", shapes + ["--input-dtype", "int64"],
                {k: v[::2] for k, v in arrays.items()}, arrays)
    raise SystemExit(f"unknown case {case}; known: onet, detector, transformer")


def run_case(case: str, work: Path, device: str, budget: float) -> None:
    import numpy as np

    folder = work / case
    folder.mkdir(parents=True, exist_ok=True)
    model, extra, calibration, evaluation = _data(case)
    np.savez(folder / "calibration.npz", **calibration)
    np.savez(folder / "eval.npz", **evaluation)
    out = folder / "out"
    command = [str(EDGEOPT), "convert", model, "--device", device, "-o", str(out), "--time-budget", str(budget),
               "--calibration", str(folder / "calibration.npz"), "--eval-data", str(folder / "eval.npz")] + extra
    print("$", " ".join(command), flush=True)
    with open(folder / "convert.txt", "w") as log:  # a realbench factory imports realbench: scripts/ on its path
        subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=False,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))})
    if not (out / "manifest.json").is_file():
        print(f"{case}: no manifest; see {folder / 'convert.txt'}")
        return
    bench = [str(EDGEOPT), "bench", str(out), "--json"]
    print("$", " ".join(bench), flush=True)
    done = subprocess.run(bench, capture_output=True, text=True, check=False)
    (folder / "bench.json").write_text(done.stdout)
    (folder / "bench.txt").write_text(f"exit status {done.returncode}\n{done.stderr}")


def time_against_ort(folder: Path, threads: int = 2) -> dict:
    """{artifact key: HostTiming} of every artifact in the conversion's folder, onnx-fp32 the baseline."""
    import numpy as np

    from edgeopt_converters.cost.host_timing import ORT_SIDE_BY_SIDE, time_interleaved
    from edgeopt_converters.runtime import open_predictor

    manifest = json.loads((folder / "out" / "manifest.json").read_text())
    with np.load(folder / "eval.npz") as data:
        feeds = {name: data[name][:1] for name in data.files}
    predictors, runs = [], {}
    try:
        for entry in manifest["artifacts"]:
            predictor = open_predictor(folder / "out" / entry["path"], threads,
                                       ORT_SIDE_BY_SIDE if entry["format"] == "onnx" else None)
            predictors.append(predictor)
            runs[entry["key"]] = predictor.bound_call(feeds)
        return time_interleaved(runs, {key: "onnx-fp32" for key in runs}, max_rounds=30, max_seconds=90)
    finally:
        for predictor in predictors:
            predictor.close()


def summary(case: str, folder: Path) -> List[str]:
    """Markdown rows: each artifact's verdict, its speed-ups and `edgeopt bench`'s p50; each failure's cause."""
    manifest = json.loads((folder / "out" / "manifest.json").read_text())
    timings = time_against_ort(folder)
    bench = {}
    if (folder / "bench.json").is_file() and (folder / "bench.json").read_text().strip():
        bench = {a["manifest_entry"]["key"]: a for a in json.loads((folder / "bench.json").read_text())["artifacts"]}
    rows = []
    for entry in manifest["artifacts"]:
        key, own = entry["key"], (entry.get("host_timing") or {}).get("speedup")
        ort = timings[key].speedup
        result = bench.get(key) or {}
        rows.append(f"| {case} | {key} | {entry['accuracy']['verdict']} | "
                    + (f"{own['estimate']:.2f}x [{own['interval'][0]:.2f}, {own['interval'][1]:.2f}] vs {own['baseline']}"
                       if own else "-") + " | "
                    + (f"{ort.estimate:.2f}x [{ort.low:.2f}, {ort.high:.2f}]" if ort else "1.00x") + " | "
                    + (f"{result['latency_ms']['p50']:.3f} ms, {'valid' if result.get('valid') else 'INVALID'}"
                       if result.get("ok") else f"{result.get('error') or '-'}") + " |")
    failed = [(f["key"], f["cause"]) for f in manifest["failed_artifacts"]]
    failed += [tuple(w.split(" not built: ", 1)) for w in manifest["warnings"] if " not built: " in w]
    failed += [("(skipped)", n) for n in manifest["notes"] if " skipped: " in n]
    rows += [f"| {case} | {key} | failed: {cause} | | | |" for key, cause in failed]
    load = next(iter(timings.values())).load
    rows.append(f"| {case} | (timing load average {load[0]:.2f} -> {load[1]:.2f}) | | | | |" if load else "")
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("work", type=Path)
    parser.add_argument("--device", default="rpi5")
    parser.add_argument("--cases", default="onet,detector,transformer")
    parser.add_argument("--time-budget", type=float, default=300.0)
    parser.add_argument("--summary-only", action="store_true", help="time and print what WORK already holds")
    args = parser.parse_args(argv)
    rows = []
    for case in args.cases.split(","):
        if not args.summary_only:
            run_case(case, args.work, args.device, args.time_budget)
        if (args.work / case / "out" / "manifest.json").is_file():
            rows += summary(case, args.work / case)
    print("| model | artifact | verdict | conversion's speed-up [95 %] | vs ORT FP32 [95 %], one interleaved run | "
          "`edgeopt bench` p50 |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
