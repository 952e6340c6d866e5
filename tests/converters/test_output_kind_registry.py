"""Kinds claimed only on positive evidence, and the kinds real heads need: bins, coordinates, raw YOLO grids."""
import numpy as np
import pytest

from edgeopt_converters.accuracy import KINDS, compare, decide_kinds, graph_evidence
from edgeopt_converters.accuracy.bins import decode
from edgeopt_converters.accuracy.grids import split_grid
from edgeopt_converters.accuracy.kind_registry import REGISTRY
from edgeopt_converters.accuracy.kinds import infer_kind, parse_output_kinds

RNG = np.random.default_rng(7)
TENSOR_WHY = "no task evidence: judged as a tensor"


def kind_of(name, array, **hints):
    return infer_kind(name, np.asarray(array, np.float32), **hints)


# --- the registry ----------------------------------------------------------------------------------

def test_kinds_come_from_the_registry_and_every_kind_can_be_given():
    assert list(KINDS) == [kind.name for kind in REGISTRY]
    assert {"tensor", "coordinates", "bins", "yolo-grid"} <= set(KINDS)
    assert all(KINDS[kind.name] == kind.description and kind.description for kind in REGISTRY)
    assert parse_output_kinds(["pitch=bins", "grid=yolo-grid"]) == {"pitch": "bins", "grid": "yolo-grid"}


def test_an_output_without_evidence_is_a_tensor_judged_by_sqnr_and_relative_error():
    ref = RNG.standard_normal((64, 1280)).astype(np.float32)  # a re-id feature, unnormalised, unnamed
    kind = kind_of("output_3", ref)
    assert kind.kind == "tensor" and kind.why.startswith(TENSOR_WHY) and "--output-kind output_3=KIND" in kind.why
    good = compare([ref], [ref + RNG.normal(0, 0.02, ref.shape).astype(np.float32)], names=["output_3"]).outputs[0]
    assert good.verdict == "ok" and good.figures["relative_error_p95"] < 0.05 and "SQNR" in good.reason
    bad = compare([ref], [ref + RNG.normal(0, 0.3, ref.shape).astype(np.float32)], names=["output_3"]).outputs[0]
    assert bad.verdict == "failed" and bad.figures["sqnr_db"] < 20


# --- value, graph and label evidence --------------------------------------------------------------

def softmax(logits, axis=-1):
    e = np.exp(logits - logits.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def test_value_evidence_claims_classes_probabilities_embeddings_and_masks():
    logits = RNG.standard_normal((32, 10))
    assert kind_of("out", softmax(logits)).kind == "classes"
    assert kind_of("out", np.log(softmax(logits))).kind == "classes"  # log-softmax
    assert kind_of("out", logits).kind == "tensor"
    sigmoid = 1 / (1 + np.exp(-8 * RNG.standard_normal((32, 20))))
    assert kind_of("out", sigmoid).kind == "probability"
    assert kind_of("out", RNG.uniform(0.3, 0.7, (32, 20))).kind == "tensor"  # in [0, 1], not a sigmoid's spread
    unit = RNG.standard_normal((32, 128))
    assert kind_of("out", unit / np.linalg.norm(unit, axis=1, keepdims=True)).kind == "embedding"
    assert kind_of("out", unit).kind == "tensor"
    assert kind_of("out", RNG.standard_normal((4, 12, 384))).kind == "tensor"  # the old guess: per-token vectors
    maps = softmax(RNG.standard_normal((4, 5, 16, 16)) * 3, axis=1)
    assert kind_of("out", maps).kind == "mask"
    assert kind_of("out", RNG.standard_normal((4, 5, 16, 16))).kind == "tensor"


def test_graph_evidence_names_the_producing_op_and_tolerates_missing_models(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 10])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 10]) for n in ("scores", "gate", "copy")]
    nodes = [helper.make_node("Softmax", ["x"], ["s"]), helper.make_node("Flatten", ["s"], ["scores"]),
             helper.make_node("Sigmoid", ["x"], ["gate"]), helper.make_node("Identity", ["x"], ["copy"])]
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(helper.make_graph(nodes, "g", [x], outs)), str(path))
    producers = graph_evidence(path)
    # Through Flatten; "copy" is the input itself.
    assert {name: g.op for name, g in producers.items()} == {"scores": "Softmax", "gate": "Sigmoid"}
    assert graph_evidence(tmp_path / "missing.onnx") == {}
    (tmp_path / "junk.onnx").write_bytes(b"not a model")
    assert graph_evidence(tmp_path / "junk.onnx") == {}

    logits = RNG.standard_normal((16, 10)).astype(np.float32)
    kinds = decide_kinds(["scores", "gate", "copy"], [logits, 1 / (1 + np.exp(-logits)), logits], {},
                         producers=producers)
    assert [k.kind for k in kinds] == ["classes", "probability", "tensor"]
    assert kinds[0].why == "produced by Softmax" and kinds[1].why == "produced by Sigmoid"


def test_eval_labels_claim_class_scores():
    ref = RNG.standard_normal((200, 10)).astype(np.float32)
    labels = RNG.integers(0, 10, 200)
    assert kind_of("output_0", ref, labels=labels).kind == "classes"
    assert kind_of("output_0", ref, labels=labels + 10).kind == "tensor"  # not indices into these scores
    assert kind_of("output_0", ref, labels=labels[:50]).kind == "tensor"  # not one per sample
    judged = compare([ref], [ref.copy()], labels).outputs[0]
    assert judged.kind.kind == "classes" and "top1_accuracy" in judged.figures


# --- ordinal bins ---------------------------------------------------------------------------------

def salience(pitch_bins, bins=360, width=1.25, noise=0.0, rng=RNG):
    """CREPE-like: a Gaussian bump of width ~25 cents at each frame's pitch, sigmoid range."""
    index = np.arange(bins)[None, :]
    s = 0.9 * np.exp(-0.5 * ((index - np.asarray(pitch_bins)[:, None]) / width) ** 2)
    return np.clip(s + rng.normal(0, noise, s.shape), 0, 1).astype(np.float32) if noise else s.astype(np.float32)


def test_smooth_salience_is_bins_by_its_values_and_by_its_name():
    ref = salience(RNG.uniform(40, 320, 540))
    kind = kind_of("output_0", ref)
    assert kind.kind == "bins" and "fall off smoothly" in kind.why
    assert kind_of("pitch", RNG.standard_normal((16, 360))).kind == "bins"  # the name says so
    assert kind_of("logits", RNG.standard_normal((16, 360))).kind == "classes"  # unrelated neighbours
    one_hot = softmax(RNG.standard_normal((64, 360)) * 8)
    assert kind_of("output_0", one_hot).kind == "classes"  # peaky softmax: rows sum to 1, no smooth neighbours


def test_a_saturated_ordinal_softmax_is_bins_by_where_its_runner_up_sits():
    """PESTO: a softmax over 384 pitch bins so confident that its rows are near one-hot (and of unit
    length): no visible fall-off, but the runner-up is the peak's neighbour; a confident classifier's
    runner-up is not, and neither is taken for an embedding."""
    pitch = RNG.integers(20, 360, 128) + RNG.uniform(-0.2, 0.2, 128)
    index = np.arange(384)[None, :]
    ordinal = softmax(-12.0 * np.abs(index - pitch[:, None]))
    assert np.allclose(np.linalg.norm(ordinal, axis=1), 1.0, atol=0.05)
    kind = kind_of("activations", ordinal, producer="Softmax")
    assert kind.kind == "bins" and "runner-up is within 2 bins of the peak" in kind.why
    confident = softmax(RNG.standard_normal((128, 384)) * 30)
    assert kind_of("activations", confident, producer="Softmax").kind == "classes"
    assert kind_of("activations", confident).kind == "classes"


def test_a_map_one_activation_made_is_not_a_detection_head():
    """PicoDet's per-class score maps [N, anchors, 10]: every channel a sigmoid, none of them a box."""
    scores = 1 / (1 + np.exp(-RNG.standard_normal((4, 1900, 10)) * 3 + 4))
    assert kind_of("transpose_0.tmp_0", scores, producer="Sigmoid").kind == "probability"
    assert kind_of("transpose_0.tmp_0", scores).kind == "detection"  # without the graph, the layout reads as one


def test_bins_accept_a_wobble_that_changes_top1_but_not_the_decoded_pitch():
    """The pitch tracker refused for "top-1 changed 2.67 points": frames half-way between two bins flip
    their argmax under INT8 noise, while the decoded pitch moves a small fraction of a bin."""
    pitch = np.floor(RNG.uniform(40, 320, 540)) + 0.5  # every frame between two bins
    ref = salience(pitch)
    cand = salience(pitch, noise=0.004, rng=np.random.default_rng(1))
    shift = np.abs(decode(ref)[0] - decode(cand)[0])
    assert shift.max() < 0.2
    as_classes = compare([ref], [cand], names=["output_0"],
                         kinds=decide_kinds(["output_0"], [ref], {"output_0": "classes"})).outputs[0]
    assert as_classes.figures["top1_agreement"] < 90, "most frames flip their argmax"
    assert as_classes.figures["expected_top1_lost_pct"] < 1, "between bins FP32 itself could not tell apart"
    judged = compare([ref], [cand], names=["output_0"]).outputs[0]
    assert judged.kind.kind == "bins" and judged.verdict == "ok", judged.reason
    assert judged.figures["rows_moved"] == 0 and judged.figures["decoded_shift_max_bins"] < 0.2


def test_bins_refuse_a_moved_pitch_and_a_zeroed_head():
    pitch = RNG.uniform(40, 320, 540)
    ref = salience(pitch)
    moved = salience(pitch + np.where(np.arange(540) < 60, 3.0, 0.0))  # 60 frames 60 cents off
    judged = compare([ref], [moved], names=["output_0"]).outputs[0]
    assert judged.verdict == "failed" and judged.figures["rows_moved"] == 60
    zeroed = compare([ref], [np.zeros_like(ref)], names=["output_0"]).outputs[0]
    assert zeroed.verdict == "failed" and zeroed.figures["confidence_flipped"] == 540
    quiet = salience(pitch) * 0.3  # no confident frame: nothing decides
    assert compare([quiet], [quiet.copy()], names=["pitch"]).outputs[0].verdict == "unresolved"


# --- coordinates ----------------------------------------------------------------------------------

def landmarks(samples=300):
    """Five (x, y) face landmarks in pixels of a 112x112 crop: a mean face plus per-face variation."""
    mean = np.array([38, 52, 56, 41, 70, 52, 52, 72, 92, 92], np.float64)
    return (mean + RNG.normal(0, 6, (samples, 10))).astype(np.float32)


def test_landmarks_and_box_offsets_are_coordinates_by_name_else_tensors():
    ref = landmarks()
    assert kind_of("landmarks", ref).kind == "coordinates"
    assert kind_of("bbox_reg", RNG.normal(0, 0.1, (300, 4))).kind == "coordinates"
    kind = kind_of("conv6-3", ref)
    assert kind.kind == "tensor" and kind.why.startswith(TENSOR_WHY)


def test_coordinates_are_judged_in_their_own_units_against_fp32s_spread():
    ref = landmarks()
    near = ref + RNG.normal(0, 0.3, ref.shape).astype(np.float32)  # a third of a pixel
    judged = compare([ref], [near], names=["landmarks"]).outputs[0]
    assert judged.kind.kind == "coordinates" and judged.verdict == "ok", judged.reason
    assert judged.figures["coordinate_error_mean"] == pytest.approx(0.3 * 0.8 / 6, rel=0.2)
    shifted = ref + 3.0  # every landmark 3 pixels off: half the spread
    failed = compare([ref], [shifted], names=["landmarks"]).outputs[0]
    assert failed.verdict == "failed" and failed.figures["coordinate_error_mean"] == pytest.approx(0.5, rel=0.15)


# --- raw YOLO grids -------------------------------------------------------------------------------

def yolox_grid(samples=6, hw=(320, 320), classes=3, objects=4, rng=RNG):
    """[N, A, 5+C], A the cells of strides 8/16/32: decoded pixel boxes, sigmoid objectness and class
    scores. Each object has neighbouring anchors that hold it too (objectness 0.4) with weak class scores."""
    anchors = sum((hw[0] // s) * (hw[1] // s) for s in (8, 16, 32))
    grid = np.zeros((samples, anchors, 5 + classes), np.float32)
    grid[..., :2] = rng.uniform(0, hw[1], (samples, anchors, 2))
    grid[..., 2:4] = rng.uniform(4, 30, (samples, anchors, 2))
    grid[..., 4] = rng.uniform(0, 0.02, (samples, anchors))
    grid[..., 5:] = rng.uniform(0, 0.05, (samples, anchors, classes))
    for i in range(samples):
        for k in range(objects):
            anchor = 100 + 300 * k
            grid[i, anchor, :5] = [40 + 70 * k, 160, 30, 30, 0.9]
            grid[i, anchor, 5 + k % classes] = 0.8
            for j, dx in enumerate((-20, 20)):  # near the object, apart from it: not suppressed by NMS
                grid[i, anchor + 1 + j, :5] = [40 + 70 * k + dx, 200, 20, 20, 0.4]
                grid[i, anchor + 1 + j, 5:] = 0.2
    return grid


def test_a_yolox_grid_is_claimed_by_its_objectness_and_its_anchor_count():
    grid = yolox_grid()
    kind = kind_of("output", grid, input_hw=(320, 320))
    assert kind.kind == "yolo-grid" and "2100 anchors = 1 per cell" in kind.why and "objectness" in kind.why
    assert kind_of("output", grid).kind == "yolo-grid"  # objectness alone
    yolov8 = grid.copy()  # channel 4 a class that fires on its own: YOLOv8's head, transposed
    yolov8[..., 5:] = RNG.uniform(0, 0.05, yolov8[..., 5:].shape)
    assert kind_of("output", yolov8, input_hw=(320, 320)).kind == "detection"
    assert kind_of("output", RNG.standard_normal(grid.shape)).kind == "tensor"


def test_a_yolox_grid_is_decoded_before_matching_and_refused_when_its_scores_are_zeroed():
    grid = yolox_grid()
    names, hints = ["output"], dict(input_hw=(320, 320))
    kinds = decide_kinds(names, [grid], {}, **hints)
    judged = compare([grid], [grid + RNG.normal(0, 1e-3, grid.shape).astype(np.float32)], names=names,
                     kinds=kinds).outputs[0]
    assert judged.verdict == "ok", judged.reason
    assert judged.figures["reference_detections"] == 6 * 4 and judged.figures["recall_pct"] == 100.0
    as_head = compare([grid], [grid], names=names, kinds=decide_kinds(names, [grid], {"output": "detection"}))
    assert as_head.outputs[0].figures["reference_detections"] == 6 * 4 * 3  # objectness read as a class

    crushed = grid.copy()
    crushed[..., 5:] = 0.0
    refused = compare([grid], [crushed], names=names, kinds=kinds).outputs[0]
    assert refused.verdict == "failed" and refused.figures["found_detections"] == 0
    assert refused.figures["class_scores_cosine"] == 0.0 and refused.figures["boxes_cosine"] == 1.0


def test_a_grid_without_objects_is_unresolved_and_not_excellent_when_its_class_scores_are_crushed():
    grid = yolox_grid(objects=0)
    grid[:, :20, 4] = 0.6  # objectness fires where ...
    grid[:, :20, 5] = 0.35  # ... the class is unsure: 0.21 after decoding, below the score threshold
    kinds = decide_kinds(["output"], [grid], {}, input_hw=(320, 320))
    assert kinds[0].kind == "yolo-grid"
    crushed = grid.copy()
    crushed[..., 5:] = 0.0
    accuracy = compare([grid], [crushed], names=["output"], kinds=kinds)
    assert accuracy.verdict == "unresolved" and accuracy.outputs[0].cosine > 0.999
    assert not accuracy.excellent
    kept = compare([grid], [grid + RNG.normal(0, 1e-5, grid.shape).astype(np.float32)], names=["output"], kinds=kinds)
    assert kept.verdict == "unresolved" and kept.excellent


def test_undecoded_yolox_boxes_are_decoded_with_the_grid():
    grid = yolox_grid(samples=1, objects=0)
    grid[..., :4] = 0.0  # offsets of 0 in each cell, log-size 0: one stride wide
    parts = split_grid(grid, "grid", (320, 320))
    assert parts.boxes[0, 0].tolist() == [0.0, 0.0, 8.0, 8.0]
    assert parts.boxes[0, 41].tolist() == [8.0, 8.0, 8.0, 8.0]  # row 1, column 1 of the stride-8 grid
    assert parts.boxes[0, 1600].tolist() == [0.0, 0.0, 16.0, 16.0]  # first cell of stride 16
    assert kind_of("output", grid, input_hw=(320, 320)).fact("decode") in ("grid", None)


def test_a_detection_head_with_a_broken_part_is_not_excellent_without_part_figures():
    """A head judgement always carries its parts: one whose parts were not measured is not excellent."""
    from dataclasses import replace
    head = np.zeros((4, 7, 100), np.float32)
    head[:, :4] = RNG.uniform(0, 320, (4, 4, 100))
    judged = compare([head], [head.copy()], names=["output0"]).outputs[0]
    assert judged.parts == ("boxes", "scores") and judged.verdict == "unresolved"
    from edgeopt_converters.accuracy import Tolerances
    assert judged.excellent(Tolerances())
    figures = {k: v for k, v in judged.figures.items() if not k.startswith(("scores_", "worst_part"))}
    assert not replace(judged, figures=figures).excellent(Tolerances())


def test_the_image_input_size_is_read_from_nchw_or_nhwc_shapes():
    from edgeopt_converters.accuracy import image_input_hw
    assert image_input_hw([(1, 3, 640, 480)]) == (640, 480)
    assert image_input_hw([(1, 320, 320, 3), (1, 4)]) == (320, 320)
    assert image_input_hw([(1, 3, -1, -1)]) is None and image_input_hw([(1, 16000)]) is None
    assert image_input_hw([(1, 3, 64, 64), (1, 3, 32, 32)]) is None  # two images: nothing says which


def test_a_bin_head_whose_decoded_values_barely_move_is_excellent_whatever_its_sqnr():
    """Unresolved for want of samples, a pitch head that keeps every decoded value within a quarter bin
    is excellent (recommendable) though its whole-tensor SQNR is far below 30 dB; one row moved is not."""
    from edgeopt_converters import accuracy as acc
    from edgeopt_converters.accuracy.kinds import OutputKind
    from edgeopt_converters.accuracy.kind_registry import judge as judge_output

    rng = np.random.default_rng(7)
    bins = np.arange(360)
    centres = rng.uniform(60, 300, 200)
    ref = np.exp(-0.5 * ((bins[None, :] - centres[:, None]) / 2.0) ** 2).astype(np.float32)
    cand = np.clip(ref + rng.normal(0, 0.03, ref.shape), 0, 1).astype(np.float32)  # noise: SQNR far below 30 dB
    kind = OutputKind("bins", True, "given")
    judged = judge_output("salience", kind, ref, cand, None, acc.Tolerances())
    assert judged.figures["sqnr_db"] < 30 and judged.figures["decoded_shift_p95_bins"] <= 0.25
    assert judged.excellent(acc.Tolerances())
    moved = cand.copy()
    moved[0] = np.roll(ref[0], 5)
    assert not judge_output("salience", kind, ref, moved, None, acc.Tolerances()).excellent(acc.Tolerances())


def test_output_kinds_may_name_outputs_by_position():
    from edgeopt_agent.errors import UserError
    from edgeopt_converters.accuracy.kinds import check_output_names

    assert check_output_names({"#1": "coordinates", "prob": "probability"}, ["prob", "linear_2"]) == {
        "linear_2": "coordinates", "prob": "probability"}
    with pytest.raises(UserError, match="#2=classes: the model has 2 outputs"):
        check_output_names({"#2": "classes"}, ["prob", "linear_2"])
