"""Each output kind judged on synthetic outputs whose right answer is known."""
import math

import numpy as np
import pytest

from edgeopt_agent.errors import UserError
from edgeopt_converters.accuracy import compare, ctc, decide_kinds
from edgeopt_converters.accuracy.detections import SCORE_BAND, SCORE_THRESHOLD, match
from edgeopt_converters.accuracy.intervals import paired_difference, samples_needed, wilson
from edgeopt_converters.accuracy.judges import Tolerances, sqnr_db
from edgeopt_converters.accuracy.kinds import infer_kind, parse_output_kinds
from edgeopt_converters.accuracy.streaming import find_state_pairs, stream
from edgeopt_converters.accuracy.user_metric import load_metric
from edgeopt_converters.source.tensors import Dataset

RNG = np.random.default_rng(0)


def noisy(array, scale):
    return (array + RNG.standard_normal(array.shape) * scale).astype(np.float32)


# --- statistics -------------------------------------------------------------------------------

def test_wilson_bounds_match_the_closed_form():
    bounds = wilson(2, 32)
    z = 1.6449
    p, n = 2 / 32, 32
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    assert bounds.low == pytest.approx(centre - half) and bounds.high == pytest.approx(centre + half)
    assert wilson(0, 32).low == 0.0 and wilson(0, 32).high == pytest.approx(z * z / (32 + z * z))
    assert (wilson(0, 0).low, wilson(0, 0).high) == (0.0, 1.0)


def test_paired_difference_is_centred_on_net_loss():
    bounds = paired_difference(lost=6, gained=2, trials=200)
    assert bounds.estimate == pytest.approx(0.02)
    assert bounds.low < 0.02 < bounds.high


def test_samples_needed_decides_at_that_count():
    needed = samples_needed(0.0, 0.01)
    assert wilson(0, needed).high <= 0.01 < wilson(0, needed - 1).high
    assert samples_needed(0.01, 0.01) is None  # on the budget: nothing decides it
    assert samples_needed(0.10, 0.01) < samples_needed(0.02, 0.01)  # far from the budget: few samples


# --- kinds ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,shape,values,kind", [
    ("logits", (8, 10), "normal", "classes"),
    ("output_0", (8, 1000), "normal", "tensor"),  # no evidence: the old shape guess said classes
    ("sentence_embedding", (8, 384), "normal", "embedding"),
    ("output_0", (8, 384), "unit", "embedding"),
    ("last_hidden_state", (8, 12, 384), "normal", "embedding"),
    ("output0", (8, 84, 400), "boxes", "detection"),
    ("output0", (8, 400, 85), "boxes_last", "detection"),
    ("speech_prob", (8, 1), "probability", "probability"),
    ("y", (8, 3), "normal", "tensor"),  # no evidence: the old shape guess said classes
    ("ctc", (8, 40, 97), "softmax", "sequence"),
    ("softmax_2.tmp_0", (2, 40, 6625), "softmax", "sequence"),  # PP-OCR's recognizer: not a detection head
    ("logits", (8, 40, 97), "normal", "sequence"),
    ("mask", (8, 1, 32, 32), "probability", "mask"),
    ("value", (8, 1), "normal", "tensor"),  # no evidence: the old shape guess said regression
])
def test_kind_is_inferred_from_name_shape_and_values(name, shape, values, kind):
    if values == "unit":
        array = RNG.standard_normal(shape)
        array /= np.linalg.norm(array, axis=1, keepdims=True)
    elif values in ("boxes", "boxes_last"):
        array = RNG.random(shape)  # scores in [0, 1] after a sigmoid
        boxes = (slice(None), slice(0, 4)) if values == "boxes" else (slice(None), slice(None), slice(0, 4))
        array[boxes] *= 640
    elif values == "probability":
        array = RNG.random(shape)
    elif values == "softmax":
        logits = RNG.standard_normal(shape)
        array = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    else:
        array = RNG.standard_normal(shape)
    inferred = infer_kind(name, array.astype(np.float32))
    assert inferred.kind == kind, inferred
    assert not inferred.given and inferred.why


def test_output_kind_overrides_and_bad_names():
    assert parse_output_kinds(["emb=embedding"]) == {"emb": "embedding"}
    with pytest.raises(UserError, match="KIND one of"):
        parse_output_kinds(["emb=vector"])
    kinds = decide_kinds(["a", "b"], [np.zeros((2, 10)), np.zeros((2, 10))], {"b": "embedding"})
    assert [k.kind for k in kinds] == ["tensor", "embedding"] and kinds[1].given  # "a" has no evidence


# --- judges -----------------------------------------------------------------------------------

def test_classes_with_too_few_samples_are_unresolved_and_say_how_many_more():
    ref = RNG.standard_normal((32, 10)).astype(np.float32)
    accuracy = compare([ref], [noisy(ref, 1e-3)], names=["logits"])
    judged = accuracy.outputs[0]
    assert judged.verdict == "unresolved"
    assert judged.samples_needed and judged.samples_needed > 32
    assert "cannot resolve a 1-point budget" in judged.reason


def _confident(count, classes=10):
    """Logits whose top class FP32 is sure of (about 0.9 of the probability)."""
    ref = RNG.standard_normal((count, classes)).astype(np.float32)
    ref[np.arange(count), RNG.integers(0, classes, count)] += 5
    return ref


def test_classes_decided_both_ways_on_enough_samples():
    ref = _confident(2000)
    assert compare([ref], [noisy(ref, 1e-4)], names=["logits"]).verdict == "ok"
    shuffled = ref.copy()
    shuffled[:200] = RNG.standard_normal((200, 10))  # ~9 % of decisions move
    failed = compare([ref], [shuffled], names=["logits"])
    assert failed.verdict == "failed" and failed.drop_points > 5


def test_labels_judge_accuracy_lost_not_agreement():
    labels = RNG.integers(0, 10, 3000)
    ref = RNG.standard_normal((3000, 10)).astype(np.float32)
    ref[np.arange(3000), labels] += 3  # FP32 is mostly right
    cand = ref.copy()
    wrong = np.flatnonzero(ref.argmax(1) != labels)[:50]
    cand[wrong] = ref[wrong]  # the candidate keeps FP32's mistakes ...
    right = np.flatnonzero(ref.argmax(1) == labels)[:3]
    cand[right, labels[right]] -= 10  # ... and loses three right answers
    judged = compare([ref], [cand], labels).outputs[0]
    assert judged.figures["top1_accuracy"] == pytest.approx(judged.figures["reference_top1_accuracy"] - 0.1)
    assert judged.verdict == "ok" and judged.loss_points.estimate == pytest.approx(0.001)


def test_detection_scores_rounded_to_zero_fail_although_cosine_is_high():
    """The YOLO-style head: boxes dominate the values, so zeroed scores barely move the cosine."""
    samples, classes, anchors = 40, 3, 200
    head = np.zeros((samples, 4 + classes, anchors), np.float32)
    head[:, 0] = RNG.random((samples, anchors)) * 600 + 20
    head[:, 1] = RNG.random((samples, anchors)) * 600 + 20
    head[:, 2:4] = RNG.random((samples, 2, anchors)) * 40 + 10
    head[:, 4:] = RNG.random((samples, classes, anchors)) * 0.1
    for i in range(samples):  # ten well-separated objects a sample
        for k in range(10):
            head[i, 0:4, k] = [40 + 60 * k, 300, 30, 30]
            head[i, 4 + k % classes, k] = 0.6 + 0.03 * k
    zeroed = head.copy()
    zeroed[:, 4:] = 0
    accuracy = compare([head], [zeroed], names=["output0"])
    judged = accuracy.outputs[0]
    assert judged.kind.kind == "detection"
    assert judged.cosine > 0.999, "the headline figure would have passed it"
    assert judged.verdict == "failed" and judged.figures["found_detections"] == 0
    assert judged.figures["reference_detections"] == 400
    kept = compare([head], [noisy(head, 1e-3)], names=["output0"]).outputs[0]
    assert kept.verdict == "ok" and kept.figures["recall_pct"] == 100.0 and kept.figures["mean_box_iou"] > 0.99


def test_detection_matching_counts_missed_and_spurious():
    head = np.zeros((1, 6, 100), np.float32)
    head[0, :4, 0] = [100, 100, 20, 20]
    head[0, 4, 0] = 0.9
    head[0, :4, 1] = [300, 300, 20, 20]
    head[0, 5, 1] = 0.8
    cand = head.copy()
    cand[0, 5, 1] = 0.1  # the second object is lost
    cand[0, :4, 2] = [500, 500, 20, 20]
    cand[0, 4, 2] = 0.7  # and something FP32 did not see appears
    found = match(head, cand)
    assert (found.reference, found.found, found.spurious) == (2, 1, 1)


def test_a_detection_that_only_crosses_the_score_threshold_is_kept_but_counted_apart():
    head = np.zeros((1, 6, 100), np.float32)
    for anchor, (x, score) in enumerate([(100, 0.27), (300, 0.27), (500, 0.22)]):
        head[0, :4, anchor] = [x, 100, 20, 20]
        head[0, 4, anchor] = score
    cand = head.copy()
    cand[0, 4, 0] = SCORE_THRESHOLD - SCORE_BAND / 2  # just across the line: the same detection
    cand[0, 4, 1] = SCORE_THRESHOLD - 2 * SCORE_BAND  # far below it: lost
    cand[0, 4, 2] = 0.27  # FP32 had it just under the line: not spurious
    found = match(head, cand)
    assert (found.reference, found.found, found.strict_found, found.spurious) == (2, 1, 0, 0)
    strict = match(head, cand, band=0.0)
    assert (strict.found, strict.spurious) == (0, 1)


def _near_threshold_head(rng, objects=400):
    """One object per sample, FP32 scores spread over [0.20, 0.32]: many sit near the 0.25 line."""
    head = np.zeros((objects, 6, 100), np.float32)
    head[:, :4, 0] = [100, 100, 20, 20]
    head[:, 4, 0] = rng.uniform(0.20, 0.32, objects)
    return head


def test_a_systematic_score_drop_below_the_threshold_counts_as_missed():
    """An INT8 that lowers every score by 0.03: the band keeps each such box 'found', but a fixed threshold
    loses all that cross it, and none rise to make up: the surplus is a loss (rpi4's S8S8 detector lost 8
    of 505 faces this way)."""
    head = _near_threshold_head(np.random.default_rng(3))
    lowered = head.copy()
    lowered[:, 4, 0] -= 0.03
    found = match(head, lowered)
    assert found.found == found.reference and found.crossed_down > 40 and found.crossed_up == 0
    judged = compare([head], [lowered], names=["output0"]).outputs[0]
    assert judged.verdict == "failed" and judged.figures["systematic_drop"] == found.crossed_down
    assert "a systematic score drop" in judged.reason


def test_scores_jittered_both_ways_across_the_threshold_are_noise_not_loss():
    rng = np.random.default_rng(4)
    head = _near_threshold_head(rng)
    jittered = head.copy()
    jittered[:, 4, 0] += rng.normal(0, 0.004, len(head)).astype(np.float32)
    found = match(head, jittered)
    assert found.crossed_down > 0 and found.crossed_up > 0
    judged = compare([head], [jittered], names=["output0"]).outputs[0]
    assert judged.figures["systematic_drop"] == 0 and judged.verdict == "ok"


def test_detection_without_objects_in_the_data_is_unresolved():
    head = np.zeros((4, 6, 100), np.float32)
    judged = compare([head], [head], names=["output0"], kinds=decide_kinds(["output0"], [head], {"output0": "detection"})).outputs[0]
    assert judged.verdict == "unresolved" and "no detection" in judged.reason


def test_embeddings_are_judged_by_cosine_never_argmax():
    ref = RNG.standard_normal((64, 384)).astype(np.float32)
    bad = (0.4 * ref + RNG.standard_normal(ref.shape)).astype(np.float32)  # cosine ~0.37
    judged = compare([ref], [bad], names=["sentence_embedding"]).outputs[0]
    assert judged.kind.kind == "embedding" and judged.verdict == "failed"
    assert "top1_agreement" not in judged.figures
    assert judged.figures["cosine_similarity"] == pytest.approx(0.37, abs=0.05)
    good = compare([ref], [noisy(ref, 0.05)], names=["sentence_embedding"]).outputs[0]
    assert good.verdict == "ok" and good.figures["worst_cosine"] > 0.99


def test_one_broken_embedding_fails_the_worst_sample_limit_a_good_mean_hides():
    ref = RNG.standard_normal((64, 384)).astype(np.float32)
    cand = noisy(ref, 0.02)
    cand[7] = RNG.standard_normal(384)  # one sample unrelated to FP32's
    judged = compare([ref], [cand], names=["sentence_embedding"]).outputs[0]
    tol = Tolerances()
    assert judged.figures["cosine_similarity"] >= tol.min_embedding_cosine
    assert judged.figures["worst_cosine"] < tol.min_worst_embedding_cosine
    assert judged.verdict == "failed" and "worst" in judged.reason


def test_probabilities_judge_flipped_decisions_and_error():
    ref = RNG.random((4000, 1)).astype(np.float32)
    moved = np.clip(ref + 0.3, 0, 1)
    judged = compare([ref], [moved], names=["speech_prob"]).outputs[0]
    assert judged.kind.kind == "probability" and judged.verdict == "failed"
    assert judged.figures["flipped_pct"] == pytest.approx(30, abs=3)
    assert compare([ref], [np.clip(ref + 1e-4, 0, 1)], names=["speech_prob"]).verdict == "ok"


def test_sequences_are_judged_per_step():
    probs = RNG.random((20, 50, 30))
    probs /= probs.sum(-1, keepdims=True)
    cand = probs.copy()
    cand[:, :10] = cand[:, :10, ::-1]  # a fifth of the steps now argmax elsewhere
    judged = compare([probs.astype(np.float32)], [cand.astype(np.float32)], names=["ctc"]).outputs[0]
    assert judged.kind.kind == "sequence" and judged.verdict == "failed"
    assert judged.figures["step_agreement"] == pytest.approx(80, abs=1)


def ctc_output(strings, steps=40, classes=30, blank=0, shift=0):
    """Per-step probabilities of a CTC head reading `strings`: each symbol for two steps, then a blank."""
    logits = np.full((len(strings), steps, classes), -4.0)
    logits[:, :, blank] = 4.0
    for row, symbols in enumerate(strings):
        for i, symbol in enumerate(symbols):
            start = 3 * i + shift
            logits[row, start:start + 2, blank] = -4.0
            logits[row, start:start + 2, symbol] = 4.0
    probs = np.exp(logits)
    return (probs / probs.sum(-1, keepdims=True)).astype(np.float32)


def ctc_strings(count=40, length=12, classes=30, blank=0):
    symbols = [c for c in range(classes) if c != blank]
    return [list(RNG.choice(symbols, size=length)) for _ in range(count)]


def test_ctc_decoding_and_edit_distance():
    assert ctc.collapse([0, 5, 5, 0, 5, 7, 7, 0], blank=0) == [5, 5, 7]
    assert ctc.collapse([29, 3, 3, 29], blank=29) == [3]
    assert ctc.edit_distance("kitten", "sitting") == 3
    assert ctc.edit_distance([], [1, 2]) == 2 and ctc.edit_distance([4, 2], [4, 2]) == 0


@pytest.mark.parametrize("blank", [0, 29])
def test_a_blank_dominated_sequence_is_inferred_as_ctc(blank):
    probs = ctc_output(ctc_strings(blank=blank), blank=blank)
    inferred = infer_kind("softmax_11.tmp_0", probs)
    assert inferred.kind == "ctc" and f"class {blank} wins" in inferred.why
    assert ctc.blank_index(ctc.class_shares(probs.argmax(-1), probs.shape[-1])) == blank


def test_ctc_is_judged_on_decoded_strings_not_steps():
    strings = ctc_strings()
    ref = ctc_output(strings)
    shifted = ref.copy()
    shifted[:10] = ctc_output(strings[:10], shift=1)  # a quarter of the strings one step later: no string changes
    judged = compare([ref], [shifted], names=["softmax_11.tmp_0"]).outputs[0]
    assert judged.kind.kind == "ctc" and judged.verdict == "ok", judged.reason
    assert judged.figures["step_agreement"] < 90 and judged.figures["symbol_edits"] == 0
    assert judged.figures["strings_same_pct"] == 100 and judged.figures["reference_symbols"] == 40 * 12
    per_step = decide_kinds(["softmax_11.tmp_0"], [ref], {"softmax_11.tmp_0": "sequence"})
    assert compare([ref], [shifted], names=["softmax_11.tmp_0"], kinds=per_step).verdict == "failed"

    misread = [list(s) for s in strings]
    for symbols in misread:
        symbols[5] = 1 if symbols[5] != 1 else 2  # one symbol per string read wrong
    judged = compare([ref], [ctc_output(misread)], names=["softmax_11.tmp_0"]).outputs[0]
    assert judged.verdict == "failed" and judged.figures["symbol_edits"] == 40
    assert judged.figures["strings_same_pct"] == 0
    assert judged.loss_points.estimate == pytest.approx(40 / 480)


def test_ctc_output_where_nothing_is_read_is_unresolved():
    empty = ctc_output([[] for _ in range(8)])
    judged = compare([empty], [empty.copy()], names=["y"], kinds=decide_kinds(["y"], [empty], {"y": "ctc"})).outputs[0]
    assert judged.verdict == "unresolved" and "reads any symbol" in judged.reason


def _padded(strings, width=16):
    return np.array([list(s) + [-1] * (width - len(s)) for s in strings], np.int64)


def test_with_the_true_strings_ctc_is_judged_on_symbols_lost_against_them():
    """As top-1 accuracy with labels: a symbol the artifact misreads where FP32 read it right is lost, one it
    reads right where FP32 misread it is gained; FP32's own errors cost nothing."""
    truth = ctc_strings(count=120, length=12)
    fp32_read = [list(s) for s in truth]
    for symbols in fp32_read[:30]:
        symbols[3] = 1 if symbols[3] != 1 else 2  # FP32 misreads a quarter of the lines
    int8_read = [list(s) for s in fp32_read]
    for row in range(20):
        int8_read[row][3] = truth[row][3]  # the artifact reads 20 of FP32's misreadings right...
    for row in range(40, 60):
        int8_read[row][7] = 1 if truth[row][7] != 1 else 2  # ...and misreads 20 symbols FP32 read right
    ref, cand, labels = ctc_output(fp32_read), ctc_output(int8_read), _padded(truth)

    against_fp32 = compare([ref], [cand], names=["y"]).outputs[0]
    assert against_fp32.verdict == "failed" and against_fp32.figures["symbol_edits"] == 40
    judged = compare([ref], [cand], labels, names=["y"]).outputs[0]
    assert judged.kind.kind == "ctc" and judged.verdict == "ok", judged.reason
    assert judged.figures["reference_symbol_errors"] == 30 and judged.figures["symbol_errors"] == 30
    assert judged.figures["true_symbols"] == 120 * 12 and judged.loss_points.estimate == 0
    assert "true symbols lost" in judged.reason

    worse = [list(s) for s in fp32_read]
    for row in range(40, 100):
        worse[row][7] = 1 if truth[row][7] != 1 else 2  # 60 more errors, none fixed
    judged = compare([ref], [ctc_output(worse)], labels, names=["y"]).outputs[0]
    assert judged.verdict == "failed" and judged.loss_points.estimate == pytest.approx(60 / 1440)


def test_class_labels_leave_a_ctc_output_judged_against_fp32_and_sequence_labels_leave_classes_alone():
    strings = ctc_strings(count=20)
    ref = ctc_output(strings)
    judged = compare([ref], [ref.copy()], np.arange(20), names=["y"]).outputs[0]
    assert judged.kind.kind == "ctc" and "against FP32's decoded strings" in judged.reason
    scores = np.eye(4, dtype=np.float32)[np.arange(20) % 4]
    classes = compare([scores], [scores.copy()], _padded(strings), names=["logits"]).outputs[0]
    assert classes.kind.kind == "classes" and "top1_accuracy" not in classes.figures


def test_masks_are_judged_by_iou():
    ref = np.zeros((4, 1, 32, 32), np.float32)
    ref[:, :, 8:24, 8:24] = 0.9
    half = ref.copy()
    half[:, :, 8:24, 16:24] = 0.1
    judged = compare([ref], [half], names=["mask"]).outputs[0]
    assert judged.kind.kind == "mask" and judged.figures["mean_iou"] == pytest.approx(0.5)
    assert judged.verdict == "failed"


def test_a_broken_output_fails_whatever_its_kind():
    """An FP16 text detector with cosine 0.51 was listed like any other artifact."""
    ref = RNG.random((8, 1, 32, 32)).astype(np.float32)
    broken = (0.5 * ref + RNG.random(ref.shape)).astype(np.float32)
    accuracy = compare([ref], [broken], names=["maps"], kinds=decide_kinds(["maps"], [ref], {"maps": "regression"}))
    assert accuracy.verdict == "failed"


def test_the_worst_output_decides_and_every_output_reports_sqnr():
    good = RNG.standard_normal((3000, 10)).astype(np.float32)
    emb = RNG.standard_normal((3000, 64)).astype(np.float32)
    accuracy = compare([good, emb], [good, np.zeros_like(emb)], names=["logits", "embedding"])
    assert [o.verdict for o in accuracy.outputs] == ["ok", "failed"]
    assert accuracy.verdict == "failed" and accuracy.deciding.name == "embedding"
    assert accuracy.outputs[1].figures["sqnr_db"] == pytest.approx(0.0, abs=0.01)
    assert sqnr_db(good, good) is None
    assert sqnr_db(np.ones(4), np.ones(4) * 1.1) == pytest.approx(20.0)


def test_unresolved_but_excellent_is_flagged_for_the_recommendation():
    ref = RNG.standard_normal((32, 10)).astype(np.float32)
    close = compare([ref], [noisy(ref, 3e-3)], names=["logits"])
    assert close.verdict == "unresolved" and close.excellent
    rough = compare([ref], [noisy(ref, 0.05)], names=["logits"])
    assert not rough.excellent


def test_exact_fp32_export_is_ok_on_few_samples():
    ref = RNG.standard_normal((32, 10)).astype(np.float32)
    assert compare([ref], [ref + 1e-7]).verdict == "ok"


def test_budget_comes_from_the_tolerances():
    ref = _confident(1000)
    cand = ref.copy()
    cand[:30] = RNG.standard_normal((30, 10))  # ~2.7 % of confident decisions move
    assert compare([ref], [cand], names=["logits"], tolerances=Tolerances(budget_points=10)).verdict == "ok"
    assert compare([ref], [cand], names=["logits"], tolerances=Tolerances(budget_points=0.5)).verdict == "failed"


# --- streaming --------------------------------------------------------------------------------

def test_state_pairs_are_found_by_name_and_shape():
    feed = {"x": np.zeros((1, 4), np.float32), "state": np.zeros((2, 1, 8), np.float32), "sr": np.array(16000)}
    outputs = {"prob": np.zeros((1, 1), np.float32), "stateN": np.zeros((2, 1, 8), np.float32)}
    assert find_state_pairs(feed, outputs) == {"state": "stateN"}
    assert find_state_pairs({"h": np.zeros((1, 8), np.float32)}, {"h_out": np.zeros((1, 8), np.float32)}) == {"h": "h_out"}


def test_streaming_shows_drift_that_one_step_hides():
    """A recurrence whose candidate weighs its state 10 % too much: from the recorded (zero) state one
    step is exact; fed its own state for 60 steps it drifts and fails."""
    steps = 60
    data = Dataset({"x": RNG.standard_normal((steps, 1, 8)).astype(np.float32),
                    "h": np.zeros((steps, 1, 8), np.float32)}, None, "test")

    def recurrence(gain):
        def predict(feed):
            h = np.tanh(feed["x"] * 0.5 + feed["h"] * gain)
            return [h.sum(-1, keepdims=True), h]
        return predict

    names, pairs = ["score", "h_out"], {"h": "h_out"}
    one_step = [[np.concatenate(o) for o in zip(*(recurrence(g)(f) for f, _ in data.batches(1)))] for g in (1.0, 1.1)]
    assert compare(*one_step, names=names).verdict == "ok"
    ref = stream(recurrence(1.0), data, 1, pairs, names, steps)
    cand = stream(recurrence(1.1), data, 1, pairs, names, steps)
    assert ref[1].shape == (steps, 1, 8)
    assert not np.allclose(ref[1][0], ref[1][1]), "each step fed the state back"
    streamed = compare(ref, cand, names=names, kinds=decide_kinds(names, ref, {}, ["h_out"]))
    assert streamed.outputs[1].kind.kind == "state"
    assert streamed.verdict == "failed"


# --- user metric ------------------------------------------------------------------------------

def test_user_metric_is_scored_against_fp32(tmp_path):
    plugin = tmp_path / "metric.py"
    plugin.write_text("import numpy as np\n"
                      "def neg_mse(reference, candidate, labels):\n"
                      "    return -float(np.mean((reference['y'] - candidate['y']) ** 2))\n"
                      "def broken(reference, candidate, labels):\n"
                      "    raise KeyError('z')\n")
    ref = RNG.standard_normal((50, 3)).astype(np.float32)
    metric = load_metric(f"{plugin}:neg_mse", max_drop=0.01)
    ok = compare([ref], [ref], names=["y"], metric=metric)
    assert ok.metric.drop == 0.0 and ok.metric.verdict == "ok"
    bad = compare([ref], [ref + 1.0], names=["y"], metric=metric)
    assert bad.metric.drop == pytest.approx(1.0) and bad.verdict == "failed" and "--metric" in bad.reason
    with pytest.raises(UserError, match="raised KeyError"):
        compare([ref], [ref], names=["y"], metric=load_metric(f"{plugin}:broken", None))
    with pytest.raises(UserError, match="file.py:function"):
        load_metric("metric", None)


def _yolo_head(rng, samples=8, classes=3, anchors=400, score_scale=0.2):
    """[N, 4+C, anchors]: pixel boxes (large) and sigmoid scores kept below the detection threshold."""
    boxes = rng.uniform(0, 320, (samples, 4, anchors))
    scores = rng.uniform(0, score_scale, (samples, classes, anchors))
    return np.concatenate([boxes, scores], axis=1).astype(np.float32)


def test_a_detector_whose_scores_are_crushed_is_not_excellent_though_its_boxes_are():
    """The audit's broken YOLOv8 INT8: no FP32 detection in the evaluation data (unresolved), whole-tensor
    cosine >= 0.999 from the pixel boxes, every class score zero. It must not pass as excellent."""
    rng = np.random.default_rng(4)
    ref = _yolo_head(rng)
    crushed = ref.copy()
    crushed[:, 4:] = 0.0

    accuracy = compare([ref], [crushed], names=["output0"])

    [judged] = accuracy.outputs
    assert judged.kind.kind == "detection" and judged.verdict == "unresolved"
    assert judged.figures["cosine_similarity"] > 0.999  # the whole tensor looks fine
    assert judged.figures["scores_cosine"] == 0.0 and judged.figures["worst_part_cosine"] == 0.0
    assert not accuracy.excellent

    kept = ref + rng.normal(0, 1e-4, ref.shape).astype(np.float32)
    assert compare([ref], [kept], names=["output0"]).excellent


def test_without_labels_a_flip_costs_what_fp32_believed_of_the_two_classes():
    """Expected top-1 accuracy lost by FP32's own probabilities: flips between classes FP32 could not tell
    apart cost next to nothing (an INT8 MobileNetV2 changed 13.7 % of the top-1 answers on crops of three
    photographs, most of them between near-tied classes), flips away from confident answers a whole sample."""
    count = 1000
    ref = np.zeros((count, 10), np.float32)
    ref[:, 0], ref[:, 1] = 2.0, 2.0 - 1e-3  # two classes FP32 cannot tell apart
    swapped = ref.copy()
    swapped[:150, 1] += 2e-3  # 15 % of the answers move to the other of the two
    near_ties = compare([ref], [swapped], names=["logits"]).outputs[0]
    assert near_ties.figures["top1_changed_pct"] == pytest.approx(15)
    assert near_ties.verdict == "ok" and near_ties.figures["expected_top1_lost_pct"] < 0.01
    assert "weighed by FP32's own probabilities" in near_ties.reason

    sure = np.zeros((count, 10), np.float32)
    sure[:, 0] = 8.0
    flipped = sure.copy()
    flipped[:150, 3] = 20.0  # 15 % of confident answers replaced
    lost = compare([sure], [flipped], names=["logits"]).outputs[0]
    assert lost.verdict == "failed" and lost.figures["expected_top1_lost_pct"] == pytest.approx(15, abs=0.1)
