"""Judges of the original kinds (kind_registry.py picks one per output): FP32 and candidate outputs in, a verdict out.

Verdicts: "ok", "unresolved" (the evaluation data cannot decide; `samples_needed` says how much
more would) and "failed". Counted decisions (top-1, flipped probabilities, per-step argmax,
symbols of decoded CTC strings, detections missed and added) are judged by a one-sided 95 % bound against
the budget in percentage points; continuous figures (cosine, SQNR, IoU) by fixed floors.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Dict, Optional, Tuple

import numpy as np

from . import ctc, intervals
from .detections import SCORE_THRESHOLD, DetectionMatch, match, split_head, systematic_drop
from .output_kind import OutputKind

OK, UNRESOLVED, FAILED = "ok", "unresolved", "failed"
SEVERITY = {OK: 0, UNRESOLVED: 1, FAILED: 2}


@dataclass(frozen=True)
class Tolerances:
    budget_points: float = 1.0  # decisions an artifact may change, in percentage points
    # Embeddings: mean per-sample cosine to FP32, and the worst sample's. Calibrated on retrieval
    # (scripts/calibrate_embedding_limits.py, 2026-11-26; docs/BENCHMARKS.md): 12 all-MiniLM-L6-v2 artifacts
    # against FP32, 800 stdlib-docstring queries. Every artifact measurably worse than FP32 there (recall@1
    # lower, 95 % paired bootstrap) has a mean cosine of at most 0.977 on the benchmark's 32 sentences; none
    # at 0.981 or more is (drops of -0.2 to 1.2 points, intervals up to 2.6). The worst-sample limit decided
    # none of them (it catches a few broken samples a good mean hides); resemblyzer's artifacts sit at >= 0.998
    # or <= 0.69. A nearest-neighbour-kept figure separates no better and would need ~1000 samples.
    min_embedding_cosine: float = 0.98
    min_worst_embedding_cosine: float = 0.90
    min_cosine: float = 0.99  # state outputs, and regression outputs larger than a small head
    min_sqnr_db: float = 20.0  # outputs too small per sample for a cosine to mean anything, and tensors
    # A tensor's worst samples: 95th percentile of per-sample |error| / |FP32| (L2). 20 dB SQNR is a
    # relative error of 0.1 on the whole output; single samples may reach twice that.
    max_relative_error: float = 0.2
    # Coordinates: |error| over FP32's spread (each coordinate's standard deviation over samples), mean and
    # 95th percentile. 20 dB SQNR on the spread is an RMS error of 0.1 of it; a normal error's 95th
    # percentile is about twice its RMS.
    # Calibrated on the corpus's facenet heads (scripts/bench_real_models.py, 2026-11-26): R-Net's and
    # O-Net's INT8 keep every face decision with boxes 0.07 px and landmarks 0.11 px off at 0.25 and 0.21
    # of the spread (p95); P-Net's INT8, which loses 8 % of FP32's detections, is at 0.128 (mean) and 0.34.
    max_coordinate_error: float = 0.1
    max_coordinate_error_p95: float = 0.3
    # Values with no calibrated limit of their own (regression heads, time series): |error| over FP32's spread,
    # mean and 95th percentile, by the rule above before any calibration: 20 dB on what varies is an RMS error
    # of 0.1 of it, whose normal tail reaches 0.2 at the 95th percentile (1.96 RMS). The coordinates' 0.3 is
    # what facenet's kept faces showed; nothing calibrates it for scores: at 0.3 a DNSMOS INT8 passed with
    # 0.249 of the spread (0.205 MOS) at the 95th percentile, twice what its users read as a change.
    # A regression's samples must also keep their order (Spearman, worst column): noise at the mean
    # limit gives about 0.99, so this binds only where errors reorder close samples.
    max_spread_error: float = 0.1
    max_spread_error_p95: float = 0.2
    min_rank_correlation: float = 0.95
    max_bin_shift: float = 1.0  # ordinal bins: a decoded value may move less than one bin, the argmax's own step
    # A bin head whose decoded values move this little (95th percentile, in bins) with no row moved or
    # flipped is excellent: the value it encodes is kept to a quarter bin (CREPE: 5 cents).
    excellent_bin_shift: float = 0.25
    max_probability_error: float = 0.1  # 99th percentile of |error| for probabilities
    min_mask_iou: float = 0.9
    min_box_iou: float = 0.8  # mean IoU of FP32 detections the candidate still finds
    broken_cosine: float = 0.8  # any output below this is broken, whatever its kind
    excellent_cosine: float = 0.999
    excellent_sqnr_db: float = 30.0
    numerically_equal_sqnr_db: float = 60.0  # float round-off only: no decision can move but exact ties


@dataclass(frozen=True)
class Judgement:
    name: str
    kind: OutputKind
    verdict: str
    reason: str
    figures: Dict[str, Optional[float]] = field(default_factory=dict)
    loss_points: Optional[intervals.Bounds] = None  # decisions changed, in percentage points
    samples_needed: Optional[int] = None
    trials: Optional[int] = None  # the decisions its loss is counted over (samples, frames, detections)
    parts: Tuple[str, ...] = ()  # semantic parts its kind has (a head's boxes and scores), each with figures
    # Where the kind has a task figure finer than its decisions (a bin head's decoded value): whether that
    # figure is excellent, which then decides `excellent` instead of whole-tensor cosine and SQNR.
    task_excellent: Optional[bool] = None

    @property
    def cosine(self) -> float:
        return float(self.figures["cosine_similarity"])

    def excellent(self, tol: Tolerances) -> bool:
        """Cosine and SQNR excellent for the whole output and, where its kind has parts (a head's boxes,
        objectness and scores), for every part: boxes in pixels must not hide crushed scores, and a head
        whose parts were not measured is never excellent on whole-tensor figures."""
        if self.task_excellent is not None:
            return self.task_excellent
        pairs = [("cosine_similarity", "sqnr_db")] + [(f"{part}_cosine", f"{part}_sqnr_db") for part in self.parts]
        part_cosine, part_sqnr = self.figures.get("worst_part_cosine"), self.figures.get("worst_part_sqnr_db")
        return (all(self._excellent_pair(cosine, sqnr, tol) for cosine, sqnr in pairs)
                and (part_cosine is None or part_cosine >= tol.excellent_cosine)
                and (part_sqnr is None or part_sqnr >= tol.excellent_sqnr_db))

    def _excellent_pair(self, cosine_key: str, sqnr_key: str, tol: Tolerances) -> bool:
        """A cosine and an SQNR (None: exact) both measured and both excellent."""
        if cosine_key not in self.figures or sqnr_key not in self.figures:
            return False
        cosine, sqnr = self.figures[cosine_key], self.figures[sqnr_key]
        return cosine is not None and cosine >= tol.excellent_cosine and (sqnr is None or sqnr >= tol.excellent_sqnr_db)

    def to_dict(self) -> dict:
        out = {"name": self.name, "kind": self.kind.kind, "kind_source": "given" if self.kind.given else "inferred",
               "kind_why": self.kind.why, "verdict": self.verdict, "reason": self.reason,
               **{k: _round(v) for k, v in self.figures.items()}}
        if self.loss_points is not None:
            out["loss_points"] = _round(self.loss_points.estimate * 100)
            out["loss_points_interval"] = [_round(self.loss_points.low * 100), _round(self.loss_points.high * 100)]
        if self.samples_needed is not None:
            out["samples_needed"] = self.samples_needed
        return out


def _round(value):
    return None if value is None else round(float(value), 6)


def _per_sample(array: np.ndarray) -> np.ndarray:
    return array.reshape(len(array), -1).astype(np.float64)


def cosines(ref: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """Per-sample cosine similarity; two all-zero samples agree, one all-zero sample does not."""
    r, c = _per_sample(ref), _per_sample(cand)
    nr, nc = np.linalg.norm(r, axis=1), np.linalg.norm(c, axis=1)
    both = nr * nc
    return np.where(both > 0, (r * c).sum(axis=1) / np.where(both > 0, both, 1.0),
                    np.where((nr == 0) & (nc == 0), 1.0, 0.0))


def sqnr_db(ref: np.ndarray, cand: np.ndarray) -> Optional[float]:
    """Signal-to-quantization-noise ratio in dB; None for an exact match (infinite)."""
    signal = float(np.sum(ref.astype(np.float64) ** 2))
    noise = float(np.sum((ref.astype(np.float64) - cand.astype(np.float64)) ** 2))
    if noise == 0:
        return None
    if signal == 0:
        return float("-inf")
    return float(10.0 * np.log10(signal / noise))


def common_figures(ref: np.ndarray, cand: np.ndarray) -> Dict[str, Optional[float]]:
    diff = np.abs(ref.astype(np.float64) - cand.astype(np.float64))
    per = cosines(ref, cand) if len(ref) else np.ones(1)
    return {"max_abs_error": float(diff.max()) if diff.size else 0.0,
            "mean_abs_error": float(diff.mean()) if diff.size else 0.0,
            "cosine_similarity": float(per.mean()), "worst_cosine": float(per.min()),
            "sqnr_db": sqnr_db(ref, cand)}


def part_figures(parts: Dict[str, int], ref_parts, cand_parts) -> Dict[str, Optional[float]]:
    """Cosine and SQNR of each semantic part of an output ({part name: index into the split
    arrays}), and the worst of them (`worst_part_cosine`, `worst_part_sqnr_db`)."""
    figures: Dict[str, Optional[float]] = {}
    for part, index in parts.items():
        ref_part, cand_part = ref_parts[index], cand_parts[index]
        figures[f"{part}_cosine"] = float(cosines(ref_part, cand_part).mean()) if len(ref_part) else 1.0
        figures[f"{part}_sqnr_db"] = sqnr_db(ref_part, cand_part)
    figures["worst_part_cosine"] = min(figures[f"{p}_cosine"] for p in parts)
    sqnrs = [figures[f"{p}_sqnr_db"] for p in parts if figures[f"{p}_sqnr_db"] is not None]
    figures["worst_part_sqnr_db"] = min(sqnrs) if sqnrs else None
    return figures


def counted(name, kind, figures, changed: int, trials: int, what: str, tol: Tolerances) -> Judgement:
    """Verdict for `changed` decisions out of `trials` against the budget in points."""
    bounds = intervals.wilson(changed, trials)
    if changed == 0 and _numerically_equal(figures, tol):
        return Judgement(name, kind, OK, f"{what}: none of {trials}, and the values match FP32 to round-off "
                         f"(SQNR >= {tol.numerically_equal_sqnr_db:g} dB), so no decision can move", figures, bounds)
    return _against_budget(name, kind, figures, bounds, trials, what, tol)


def _numerically_equal(figures, tol: Tolerances) -> bool:
    sqnr = figures.get("sqnr_db")
    return sqnr is None or sqnr >= tol.numerically_equal_sqnr_db


def _against_budget(name, kind, figures, bounds: intervals.Bounds, trials: int, what: str, tol: Tolerances) -> Judgement:
    budget = tol.budget_points / 100.0
    shown = (f"{what} {bounds.estimate * 100:.2f} points (95% bound {bounds.low * 100:.2f}-{bounds.high * 100:.2f}) "
             f"on {trials}")
    if bounds.high <= budget + 1e-12:
        return Judgement(name, kind, OK, f"{shown}, within {tol.budget_points:g}", figures, bounds, trials=trials)
    if bounds.low > budget:
        return Judgement(name, kind, FAILED, f"{shown}, over {tol.budget_points:g}", figures, bounds, trials=trials)
    needed = intervals.samples_needed(max(bounds.estimate, 0.0), budget)
    more = f"about {needed} would decide it" if needed else "no sample count decides it (the loss sits on the budget)"
    return Judgement(name, kind, UNRESOLVED, f"{shown} cannot resolve a {tol.budget_points:g}-point budget; {more}",
                     figures, bounds, needed, trials=trials)


def judge_classes(name, kind, ref, cand, labels, tol: Tolerances) -> Judgement:
    figures = common_figures(ref, cand)
    ref_top, cand_top = ref.reshape(len(ref), -1).argmax(-1), cand.reshape(len(cand), -1).argmax(-1)
    figures["top1_agreement"] = float((ref_top == cand_top).mean() * 100) if len(ref) else None
    if labels is not None and labels.ndim == 1 and len(labels) == len(ref):
        ref_right, cand_right = ref_top == labels, cand_top == labels
        figures["top1_accuracy"] = float(cand_right.mean() * 100)
        figures["reference_top1_accuracy"] = float(ref_right.mean() * 100)
        bounds = intervals.paired_difference(int((ref_right & ~cand_right).sum()), int((~ref_right & cand_right).sum()), len(ref))
        if (ref_top == cand_top).all() and _numerically_equal(figures, tol):
            return _sqnr_beside(counted(name, kind, figures, 0, len(ref), "top-1 changed", tol))
        return _sqnr_beside(_against_budget(name, kind, figures, bounds, len(ref), "top-1 accuracy lost", tol))
    changed = int((ref_top != cand_top).sum())
    if changed == 0:
        return _sqnr_beside(counted(name, kind, figures, changed, len(ref), "top-1 changed", tol))
    return _sqnr_beside(_expected_accuracy_lost(name, kind, figures, ref, ref_top, cand_top, tol))


def _expected_accuracy_lost(name, kind, figures, ref, ref_top, cand_top, tol: Tolerances) -> Judgement:
    """Without labels, the top-1 accuracy an artifact is expected to lose by FP32's own probabilities: a
    sample counts p(FP32's class) - p(the artifact's class) under FP32's softmax, so a flip between two
    classes FP32 could not tell apart costs nearly nothing and a flip away from a confident answer nearly a
    whole sample. It is what the accuracy would lose were FP32's probabilities right, and never more than the
    share of changed answers. Its 95 % bound (one-sided, as every verdict's) comes from the spread of the
    per-sample losses (intervals.mean_bounds); with fewer than MIN_SPREAD_SAMPLES changed answers there is no
    spread to trust and it is Wilson's, as for a count (a [0, 1] variable of that mean varies at most as much);
    never below what no change at all would get on this many samples (Wilson's bound for 0 of N)."""
    probs = _as_probabilities(ref.reshape(len(ref), -1).astype(np.float64))
    rows = np.arange(len(ref))
    lost = np.clip(probs[rows, ref_top] - probs[rows, cand_top], 0.0, 1.0)
    changed = int((ref_top != cand_top).sum())
    figures["top1_changed_pct"] = changed / len(ref) * 100
    figures["expected_top1_lost_pct"] = float(lost.mean() * 100)
    bounds = intervals.mean_bounds(lost) if changed >= MIN_SPREAD_SAMPLES else intervals.wilson(float(lost.sum()), len(ref))
    # Never surer than no change at all on this many samples would be: the same floor a count has, so fewer
    # changes never judge worse than more (and the search can tell when the data alone keeps a verdict open).
    floor = intervals.wilson(0, len(ref)).high
    bounds = intervals.Bounds(bounds.estimate, bounds.low, max(bounds.high, floor))
    judged = _against_budget(name, kind, figures, bounds, len(ref), "expected top-1 accuracy lost", tol)
    return replace(judged, reason=f"{judged.reason}; top-1 changed on {changed} of {len(ref)} samples, weighed by "
                                  f"FP32's own probabilities (no labels)")


MIN_SPREAD_SAMPLES = 10  # changed answers needed before their spread decides the expected loss's bound


def _as_probabilities(scores: np.ndarray) -> np.ndarray:
    """Rows that are already a distribution as they are; logits through a softmax."""
    if scores.min() >= 0 and np.allclose(scores.sum(1), 1.0, atol=1e-3):
        return scores
    shifted = np.exp(scores - scores.max(1, keepdims=True))
    return shifted / shifted.sum(1, keepdims=True)


def _sqnr_beside(judged: Judgement) -> Judgement:
    """The scores' SQNR in the reason too: not what decides, but what a tensor judge would have said."""
    sqnr = judged.figures.get("sqnr_db")
    return replace(judged, reason=f"{judged.reason} (SQNR {'exact' if sqnr is None else f'{sqnr:.1f} dB'})")


def judge_probability(name, kind, ref, cand, tol: Tolerances) -> Judgement:
    figures = common_figures(ref, cand)
    error = np.abs(ref.astype(np.float64) - cand.astype(np.float64)).ravel()
    figures["p99_abs_error"] = float(np.percentile(error, 99)) if error.size else 0.0
    flipped = (ref >= 0.5) != (cand >= 0.5)
    figures["flipped_pct"] = float(flipped.mean() * 100) if flipped.size else 0.0
    judged = counted(name, kind, figures, int(flipped.sum()), int(flipped.size), "decisions at 0.5 flipped", tol)
    if figures["p99_abs_error"] > tol.max_probability_error and judged.verdict != FAILED:
        return Judgement(name, kind, FAILED, f"probabilities moved by up to {figures['p99_abs_error']:.3f} "
                         f"(99th percentile; limit {tol.max_probability_error:g}); {judged.reason}", figures, judged.loss_points)
    return judged


def judge_values(name, kind, ref, cand, tol: Tolerances) -> Judgement:
    """Regression and state outputs: cosine where a sample has enough values for one, else SQNR."""
    figures = common_figures(ref, cand)
    per_sample = int(np.prod(ref.shape[1:])) if ref.ndim > 1 else 1
    sqnr = figures["sqnr_db"]
    if per_sample >= 4:
        ok = figures["cosine_similarity"] >= tol.min_cosine
        shown = f"cosine {figures['cosine_similarity']:.5f} (limit {tol.min_cosine:g})"
    else:
        ok = sqnr is None or sqnr >= tol.min_sqnr_db
        shown = f"SQNR {'exact' if sqnr is None else f'{sqnr:.1f} dB'} (limit {tol.min_sqnr_db:g} dB)"
    return Judgement(name, kind, OK if ok else FAILED, shown, figures)


def judge_embedding(name, kind, ref, cand, tol: Tolerances) -> Judgement:
    figures = common_figures(ref, cand)
    mean, worst = figures["cosine_similarity"], figures["worst_cosine"]
    ok = mean >= tol.min_embedding_cosine and worst >= tol.min_worst_embedding_cosine
    shown = (f"per-sample cosine mean {mean:.4f}, worst {worst:.4f} "
             f"(limits {tol.min_embedding_cosine:g} / {tol.min_worst_embedding_cosine:g})")
    return Judgement(name, kind, OK if ok else FAILED, shown, figures)


def _step_figures(ref, cand):
    """Common figures with the per-step argmax agreement, and each side's per-step argmax."""
    figures = common_figures(ref, cand)
    ref_steps, cand_steps = ref.argmax(-1), cand.argmax(-1)
    figures["step_agreement"] = float((ref_steps == cand_steps).mean() * 100) if ref_steps.size else None
    return figures, ref_steps, cand_steps


def judge_sequence(name, kind, ref, cand, tol: Tolerances) -> Judgement:
    figures, ref_steps, cand_steps = _step_figures(ref, cand)
    return counted(name, kind, figures, int((ref_steps != cand_steps).sum()), int(ref_steps.size),
                    "steps whose argmax changed", tol)


def judge_ctc(name, kind, ref, cand, labels, tol: Tolerances) -> Judgement:
    """Greedy-decoded strings against FP32's: symbols inserted, deleted or substituted, per symbol read.
    With the true strings (`labels` [N, L], class indices padded with -1): per sample, the artifact's
    edit distance to the truth against FP32's (more is lost, less is gained), the net over all true
    symbols held to the budget as top-1 accuracy lost is."""
    figures, ref_steps, cand_steps = _step_figures(ref, cand)
    blank = ctc.likely_blank(ctc.class_shares(ref_steps, ref.shape[-1]))
    edits = trials = same = symbols = 0
    reads = []
    for ref_row, cand_row in zip(ref_steps, cand_steps):
        read, got = ctc.collapse(ref_row, blank), ctc.collapse(cand_row, blank)
        reads.append((read, got))
        edits += ctc.edit_distance(read, got)
        trials += max(len(read), len(got))
        same += read == got
        symbols += len(read)
    figures.update(blank_index=blank, reference_symbols=symbols, symbol_edits=edits,
                   strings_same_pct=same / len(ref) * 100 if len(ref) else None)
    if labels is not None and labels.ndim == 2 and len(labels) == len(ref):
        return _ctc_against_truth(name, kind, figures, reads, labels, same, tol)
    if trials == 0:
        return Judgement(name, kind, UNRESOLVED, f"neither FP32 nor the artifact reads any symbol (blank is class "
                         f"{blank}), so nothing shows whether the artifact reads as FP32; give --eval-data with "
                         f"text or speech in it", figures)
    return counted(name, kind, figures, edits, trials,
                    f"symbols edited against FP32's decoded strings ({same}/{len(ref)} strings the same)", tol)


def _ctc_against_truth(name, kind, figures, reads, labels, same: int, tol: Tolerances) -> Judgement:
    lost = gained = truth_symbols = ref_errors = cand_errors = 0
    for (read, got), row in zip(reads, labels):
        truth = [int(c) for c in row if c >= 0]
        ref_wrong, cand_wrong = ctc.edit_distance(truth, read), ctc.edit_distance(truth, got)
        lost += max(cand_wrong - ref_wrong, 0)
        gained += max(ref_wrong - cand_wrong, 0)
        truth_symbols += len(truth)
        ref_errors += ref_wrong
        cand_errors += cand_wrong
    figures.update(true_symbols=truth_symbols, symbol_errors=cand_errors, reference_symbol_errors=ref_errors)
    if truth_symbols == 0:
        return Judgement(name, kind, UNRESOLVED, "the labels hold no symbol (each row: class indices, padded with "
                         "-1), so nothing shows whether the artifact reads the text", figures)
    what = (f"true symbols lost ({cand_errors} errors against FP32's {ref_errors}; {same}/{len(reads)} strings "
            f"the same as FP32's)")
    if cand_errors == ref_errors and same == len(reads) and _numerically_equal(figures, tol):
        return counted(name, kind, figures, 0, truth_symbols, what, tol)
    bounds = intervals.paired_difference(lost, gained, truth_symbols)
    return _against_budget(name, kind, figures, bounds, truth_symbols, what, tol)


def judge_mask(name, kind, ref, cand, tol: Tolerances) -> Judgement:
    figures = common_figures(ref, cand)
    if ref.shape[1] == 1:
        threshold = 0.5 if float(ref.min()) >= 0 and float(ref.max()) <= 1 else 0.0
        ref_maps, cand_maps, classes = ref[:, 0] >= threshold, cand[:, 0] >= threshold, [True]
    else:
        ref_maps, cand_maps = ref.argmax(1), cand.argmax(1)
        classes = sorted(set(np.unique(ref_maps).tolist()))
    ious = []
    for value in classes:
        r, c = ref_maps == value, cand_maps == value
        union = np.logical_or(r, c).reshape(len(ref), -1).sum(1)
        inter = np.logical_and(r, c).reshape(len(ref), -1).sum(1)
        ious.extend(np.where(union > 0, inter / np.maximum(union, 1), 1.0).tolist())
    figures["mean_iou"] = float(np.mean(ious)) if ious else 1.0
    ok = figures["mean_iou"] >= tol.min_mask_iou
    return Judgement(name, kind, OK if ok else FAILED,
                     f"mask IoU {figures['mean_iou']:.4f} (limit {tol.min_mask_iou:g})", figures)


def judge_detection(name, kind, ref, cand, tol: Tolerances) -> Judgement:
    figures = common_figures(ref, cand)
    figures.update(part_figures({"boxes": 0, "scores": 1}, split_head(ref), split_head(cand)))
    return judge_found(name, kind, figures, match(ref, cand), tol)


def judge_found(name, kind, figures, found: DetectionMatch, tol: Tolerances, things: str = "detections") -> Judgement:
    """A head's verdict from the FP32 detections the candidate misses and the ones it adds (any head,
    once decoded; `things`: what a detection is called, as a heat map's peaks). Missed and added are
    counted together over the detections either side has: an artifact that keeps FP32's detections
    and invents as many again has changed half of what it reports."""
    dropped, p = systematic_drop(found)
    missed, added = found.reference - found.found + dropped, found.spurious
    figures.update(reference_detections=found.reference, found_detections=found.found,
                   found_at_threshold=found.strict_found, missed_detections=missed, added_detections=added,
                   spurious_detections=found.spurious, mean_box_iou=found.mean_iou,
                   score_max_abs_error=found.score_max_abs_error, box_max_abs_error=found.box_max_abs_error,
                   recall_pct=(found.found - dropped) / found.reference * 100 if found.reference else None,
                   added_pct=added / found.reference * 100 if found.reference else None)
    if found.reference == 0 and added == 0:
        return Judgement(name, kind, UNRESOLVED, f"FP32 finds no {things} above score {SCORE_THRESHOLD} in the "
                         f"evaluation data, so nothing shows whether the artifact would; give --eval-data with "
                         f"objects in it", figures)
    figures.update(crossed_down=found.crossed_down, crossed_up=found.crossed_up, systematic_drop=dropped)
    what = f"FP32 {things} missed ({missed} of {found.reference}) or {things} added ({added})"
    if dropped:
        what += (f"; {dropped} missed scored just under the threshold: {found.crossed_down} fell below it against "
                 f"{found.crossed_up} that rose above it, sign test p={p:.3f}, a systematic score drop")
    judged = counted(name, kind, figures, missed + added, found.reference + added, what, tol)
    if judged.verdict != FAILED and found.found and found.mean_iou < tol.min_box_iou:
        moved = "boxes" if things == "detections" else things
        return Judgement(name, kind, FAILED, f"{moved} moved: mean IoU {found.mean_iou:.3f} with FP32's "
                         f"(limit {tol.min_box_iou:g}); {judged.reason}", figures, judged.loss_points)
    return judged
