"""Calibrate the embedding judge's limits (accuracy/judges.py `Tolerances.min_embedding_cosine` and
`min_worst_embedding_cosine`) on a retrieval task with ground truth, for all-MiniLM-L6-v2.

Task (realbench.retrieval): Python standard-library docstrings (shipped with the interpreter;
nothing is downloaded), query = a docstring's summary paragraph, document = the rest, the first --pairs
by SHA-1 of the qualified name. Every query is searched against all documents by cosine; the truth is
its own docstring's body. Texts are tokenized to 32 tokens, the shape the ONNX export and edgeopt's
artifacts have.

Artifacts (each run by onnxruntime on this CPU): FP32 ONNX, FP16 (onnxruntime's converter, I/O FP32),
onnxruntime quantize_dynamic (defaults; per-channel; the first one or two encoder layers' MatMuls left
float, which land between the others), quantize_static (defaults; calibrated on the case's 16
sentences), weight-only INT8 and INT4 (MatMulNBits, blocks of 32), and every INT8 artifact
`edgeopt.convert(device=...)` writes for each --devices entry (with the case's own calibration and
evaluation sentences, as the benchmark runs it).

Figures per artifact: recall@1, recall@10 and MRR on the ground truth; FP32's top-1 and top-10 documents
kept; per-text cosine to FP32 (mean, worst, 5th percentile) over all queries and documents; the judge's
own figures on the case's 32 evaluation sentences (what edgeopt sees); and a paired bootstrap over queries
of the recall@1, recall@10 and MRR drop against FP32 (95 % interval): an artifact is measurably worse when
the interval's low end is above 0.

    .venv/bin/python scripts/calibrate_embedding_limits.py [--work DIR] [--devices x86-64,rpi4]
        [--pairs 800] [--json out.json]
    .venv/bin/python scripts/calibrate_embedding_limits.py --case speaker [--work DIR] [--devices ...]

An existing DIR/<device>/edgeopt/manifest.json is reused (conversions take minutes each).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np

from realbench import quantizers
from realbench.case import Case
from realbench.cases.text import transformer
from realbench.report import host_line
from realbench.retrieval import docstring_pairs, nearest_neighbours, tokenize
from realbench.run import ort_session, run_edgeopt, run_outputs

BOOTSTRAP_ROUNDS = 2000


def embed(path: Path, case: Case, arrays: Dict[str, np.ndarray]) -> np.ndarray:
    """One text at a time (edgeopt's artifacts have a batch of 1), L2-normalised."""
    session = ort_session(path)
    names = {i.name for i in session.get_inputs()}
    rows = [session.run(None, {k: v for k, v in case.feed(arrays, i).items() if k in names})[0]
            for i in range(len(arrays["input_ids"]))]
    out = np.concatenate(rows).astype(np.float64)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


# ---------------------------------------------------------------- figures

def ranks(queries: np.ndarray, documents: np.ndarray) -> np.ndarray:
    """Per query, document indices by decreasing cosine."""
    return np.argsort(-(queries @ documents.T), axis=1, kind="stable")


def per_query(order: np.ndarray, fp32_order: np.ndarray) -> Dict[str, np.ndarray]:
    truth = np.arange(len(order))
    position = np.argmax(order == truth[:, None], axis=1)  # 0-based rank of the true document
    return {"r1": (position == 0).astype(float), "r10": (position < 10).astype(float), "mrr": 1.0 / (position + 1),
            "fp32_top1_kept": (order[:, 0] == fp32_order[:, 0]).astype(float),
            "fp32_top10_kept": np.array([len(set(a[:10]) & set(b[:10])) / 10 for a, b in zip(order, fp32_order)])}


def bootstrap_drop(fp32: np.ndarray, cand: np.ndarray, seed: int = 0) -> Tuple[float, float, float]:
    """FP32 minus candidate, mean and 95 % percentile interval, resampling queries (paired)."""
    rng = np.random.default_rng(seed)
    diff = fp32 - cand
    draws = rng.integers(0, len(diff), size=(BOOTSTRAP_ROUNDS, len(diff)))
    means = diff[draws].mean(axis=1)
    return float(diff.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def cosines(reference: np.ndarray, got: np.ndarray) -> np.ndarray:
    return (reference * got).sum(1)


def figures(fp32: Dict[str, np.ndarray], got: Dict[str, np.ndarray], sentences: Tuple[np.ndarray, np.ndarray]) -> dict:
    fp32_q = per_query(ranks(fp32["q"], fp32["d"]), ranks(fp32["q"], fp32["d"]))
    got_q = per_query(ranks(got["q"], got["d"]), ranks(fp32["q"], fp32["d"]))
    cos = cosines(np.concatenate([fp32["q"], fp32["d"]]), np.concatenate([got["q"], got["d"]]))
    ref_s, got_s = sentences
    sentence_cos = cosines(ref_s, got_s)
    nn_ref, nn_got = (nearest_neighbours(x)[0] for x in (ref_s, got_s))
    row = {name: float(values.mean()) for name, values in got_q.items()}
    row.update(cos_mean=float(cos.mean()), cos_worst=float(cos.min()), cos_p5=float(np.percentile(cos, 5)),
               case_cos_mean=float(sentence_cos.mean()), case_cos_worst=float(sentence_cos.min()),
               case_nn_kept=int((nn_ref == nn_got).sum()))
    for name in ("r1", "r10", "mrr"):
        row[f"{name}_drop"] = bootstrap_drop(fp32_q[name], got_q[name])
    return row


# ---------------------------------------------------------------- artifacts

def fp16(fp32: Path, out: Path) -> Path:
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    onnx.save(convert_float_to_float16(onnx.load(str(fp32)), keep_io_types=True), str(out))
    return out


def dynamic_per_channel(fp32: Path, out: Path) -> Path:
    from onnxruntime.quantization import quantize_dynamic

    quantize_dynamic(str(fp32), str(out), per_channel=True)
    return out


def dynamic_layers_float(fp32: Path, out: Path, layers: int) -> Path:
    """quantize_dynamic with the MatMuls of the first `layers` encoder layers left float: artifacts between
    whole-graph dynamic INT8 and FP32, as a mixed-precision search makes them."""
    import onnx
    from onnxruntime.quantization import quantize_dynamic

    prefixes = tuple(f"/model/encoder/layer.{i}/" for i in range(layers))
    kept = [n.name for n in onnx.load(str(fp32)).graph.node if n.op_type == "MatMul" and n.name.startswith(prefixes)]
    quantize_dynamic(str(fp32), str(out), nodes_to_exclude=kept)
    return out


def edgeopt_int8(case: Case, work: Path, device: str, timeout_s: float) -> Dict[str, Path]:
    """Every INT8 artifact `edgeopt.convert(device=...)` writes (`recommended` marked), converting once."""
    manifest_path = work / "edgeopt" / "manifest.json"
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
    else:
        np.savez(work / "calib.npz", **case.calibration)
        np.savez(work / "eval.npz", **case.evaluation)
        manifest = run_edgeopt(case, work, device, timeout_s)
    found = {}
    for artifact in manifest["artifacts"]:
        if artifact["precision"] == "int8":
            mark = " (recommended)" if artifact["key"] == manifest["recommended"] else ""
            found[f"edgeopt {device} {artifact['key']}{mark}"] = work / "edgeopt" / artifact["path"]
    print(f"edgeopt {device}: recommended {manifest['recommended']}", file=sys.stderr)
    return found


def artifacts(work: Path, devices: List[str], timeout_s: float) -> Tuple[Case, Dict[str, Path]]:
    case = transformer(work)
    fp32 = case.onnx
    found: Dict[str, Path] = {"fp32": fp32, "fp16 (ORT converter)": fp16(fp32, work / "fp16.onnx"),
                              "ort quantize_dynamic": quantizers.ort_dynamic(case, fp32, work / "ort_dynamic.onnx"),
                              "ort quantize_static": quantizers.ort_static(case, fp32, work / "ort_static.onnx"),
                              "ort quantize_dynamic per-channel": dynamic_per_channel(fp32, work / "ort_dynamic_pc.onnx"),
                              "ort quantize_dynamic, layer 0 float": dynamic_layers_float(fp32, work / "ort_dyn_l0.onnx", 1),
                              "ort quantize_dynamic, layers 0-1 float": dynamic_layers_float(fp32, work / "ort_dyn_l01.onnx", 2),
                              "ort weight-only int8": quantizers.ort_weight_only(case, fp32, work / "ort_wo8.onnx", 8),
                              "ort weight-only int4": quantizers.ort_weight_only(case, fp32, work / "ort_wo4.onnx", 4)}
    for device in devices:
        (work / device).mkdir(exist_ok=True)
        found.update(edgeopt_int8(case, work / device, device, timeout_s))
    return case, found


def other_case(name: str, work: Path, devices: List[str], timeout_s: float) -> str:
    """A second embedding model of the benchmark's cases (e.g. "speaker"): too little data there for a
    retrieval task, so per-sample cosine to FP32 next to the case's own task figure, per artifact."""
    from realbench.cases import CASES

    case = CASES[name](work)
    found: Dict[str, Path] = {"fp32": case.onnx}
    for label, make in (("ort quantize_dynamic", quantizers.ort_dynamic), ("ort quantize_static", quantizers.ort_static)):
        try:
            found[label] = make(case, case.onnx, work / f"{label.split()[-1]}.onnx")
        except Exception as exc:  # a baseline that does not build is a row too
            print(f"{label}: {type(exc).__name__}: {exc}", file=sys.stderr)
    for device in devices:
        (work / device).mkdir(exist_ok=True)
        found.update(edgeopt_int8(case, work / device, device, timeout_s))
    reference = run_outputs(case.onnx, case)
    lines = [f"{case.what}", "| artifact | cos mean | cos p5 | cos worst | task |", "|---|---|---|---|---|"]
    for label, path in found.items():
        got = run_outputs(path, case)
        a, b = (x / np.linalg.norm(x, axis=1, keepdims=True) for x in (reference[0], got[0]))
        cos = cosines(a.astype(np.float64), b.astype(np.float64))
        lines.append(f"| {label} | {cos.mean():.4f} | {np.percentile(cos, 5):.4f} | {cos.min():.4f} | "
                     f"{case.task(reference, got)} |")
    return "\n".join(lines)


# ---------------------------------------------------------------- report

def _drop(value: Tuple[float, float, float]) -> str:
    mean, low, high = (100 * v for v in value)
    return f"{mean:+.1f} [{low:+.1f}, {high:+.1f}]{' *' if low > 0 else ''}"


def markdown(rows: Dict[str, dict], pairs: int) -> str:
    lines = ["| artifact | R@1 | R@10 | MRR | R@1 drop pts (95 %) | MRR drop pts (95 %) | FP32 top-1 kept | "
             "FP32 top-10 kept | cos mean | cos p5 | cos worst | 32 sentences: cos mean / worst, NN kept |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in rows.items():
        lines.append(f"| {name} | {r['r1']:.3f} | {r['r10']:.3f} | {r['mrr']:.3f} | {_drop(r['r1_drop'])} | "
                     f"{_drop(r['mrr_drop'])} | {r['fp32_top1_kept']:.3f} | {r['fp32_top10_kept']:.3f} | "
                     f"{r['cos_mean']:.4f} | {r['cos_p5']:.4f} | {r['cos_worst']:.4f} | "
                     f"{r['case_cos_mean']:.4f} / {r['case_cos_worst']:.4f}, {r['case_nn_kept']}/32 |")
    lines.append(f"\n{pairs} queries against {pairs} documents; * : measurably worse than FP32 (interval above 0).")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, help="folder for artifacts (default: a temporary one)")
    parser.add_argument("--devices", default="x86-64,rpi4", help="edgeopt device profiles to convert for")
    parser.add_argument("--pairs", type=int, default=800)
    parser.add_argument("--convert-timeout", type=float, default=1800)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--case", help="instead: cosine and task figure of another embedding case (e.g. speaker)")
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="calibrate-embedding-"))
    work.mkdir(parents=True, exist_ok=True)
    devices = [d for d in args.devices.split(",") if d]
    if args.case:
        print(host_line())
        print(other_case(args.case, work, devices, args.convert_timeout))
        return 0
    pairs = docstring_pairs(args.pairs)
    queries, documents = tokenize([p[1] for p in pairs]), tokenize([p[2] for p in pairs])
    case, found = artifacts(work, devices, args.convert_timeout)
    sentences = {name: embed(path, case, case.evaluation) for name, path in found.items()}
    fp32 = {"q": embed(found["fp32"], case, queries), "d": embed(found["fp32"], case, documents)}
    rows = {}
    for name, path in found.items():
        got = fp32 if name == "fp32" else {"q": embed(path, case, queries), "d": embed(path, case, documents)}
        rows[name] = figures(fp32, got, (sentences["fp32"], sentences[name]))
        print(f"{name}: R@1 {rows[name]['r1']:.3f} cos mean {rows[name]['cos_mean']:.4f}", file=sys.stderr)
    print(host_line())
    print(markdown(rows, len(pairs)))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
