"""Speech and music models on the corpus's speech clips and tones made here: Silero VAD, resemblyzer's
speaker encoder, DNSMOS quality scores and basic-pitch's note transcription."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from realbench import sources
from realbench.case import EVAL_SEED, FACTORIES, Case, TaskResult, export_fp32, loaded_module, not_worse
from realbench.cases.pitch import SAMPLE_RATE
from realbench.corpus import SPEECH_CLIPS, corpus_file, corpus_source
from realbench.inputs import read_float_wav


# ---------------------------------------------------------------- voice activity: Silero VAD


VAD_KEEPS = "speech/no-speech decisions (probability > 0.5) the same as FP32's on >= 98 % of frames (no truth: agreement only)"


def vad(work: Path) -> Case:
    frames = []
    for clip in ("counting", "fox", "jishu"):
        audio = read_float_wav(corpus_file("audioeval", clip))
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


# ---------------------------------------------------------------- speaker embedding: resemblyzer


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

    path = export_fp32(loaded_module("voice_encoder"), (torch.from_numpy(mels[:1]),), work / "voice_encoder.onnx", ["mels"],
                   ["embedding"])
    return Case("speaker", f"resemblyzer VoiceEncoder (PyTorch, 3-layer LSTM), {len(mels)} partials of 19 clips",
                path, ["1,160,40"], [], {"mels": mels[::3]}, {"mels": mels}, "embedding", task,
                source=f"{FACTORIES}:voice_encoder")


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
    dnsmos_class = sources.definitions(source, ["DNSMOS"], ["numpy", "os"])["DNSMOS"]
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
