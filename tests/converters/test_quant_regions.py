"""Mixed precision's structural stages: the post-processing tail and the input-side prefix, found from the graph."""
import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from edgeopt_converters.precision.graph_regions import mac_shares, node_macs, post_processing_tail
from edgeopt_converters.precision.mixed_precision import PREFIX_STEPS, _badness, _prefix_stage
from edgeopt_converters.passes.quantize_onnx import CALIBRATION_METHODS, OnnxInt8Options
from edgeopt_converters.passes.base import StepCall
from edgeopt_converters.recipe import PlannedArtifact, with_exclusions


def yolo_like_head(dfl_taps: int = 4, batch=1):
    """Backbone convs -> box conv and score conv (heavy), then a decode tail: a tiny 'DFL' conv on the
    boxes, pixel scaling, a sigmoid on the scores, and one Concat of both (YOLOv8's output layout)."""
    rng = np.random.default_rng(0)
    w = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    inits = [nh.from_array(w(32, 3, 3, 3), "w_backbone"), nh.from_array(w(64, 32, 3, 3), "w_neck"), nh.from_array(w(4 * dfl_taps, 64, 1, 1), "w_box"),
             nh.from_array(w(2, 64, 1, 1), "w_score"), nh.from_array(np.arange(dfl_taps, dtype=np.float32)
                                                                     .reshape(1, dfl_taps, 1, 1), "w_dfl"),
             nh.from_array(np.array([4, dfl_taps, -1], np.int64), "dfl_shape"),
             nh.from_array(np.array([1, 1, -1], np.int64), "flat1"), nh.from_array(np.array([1, 4, -1], np.int64), "flat4"),
             nh.from_array(np.array([1, 2, -1], np.int64), "flat2"), nh.from_array(np.array(8.0, np.float32), "stride")]
    nodes = [h.make_node("Conv", ["x", "w_backbone"], ["f"], pads=[1, 1, 1, 1], name="backbone"),
             h.make_node("Relu", ["f"], ["fb"], name="backbone_act"),
             h.make_node("Conv", ["fb", "w_neck"], ["fr"], pads=[1, 1, 1, 1], name="neck"),
             h.make_node("Conv", ["fr", "w_box"], ["box_logits"], name="box_conv"),
             h.make_node("Conv", ["fr", "w_score"], ["score_logits"], name="score_conv"),
             h.make_node("Reshape", ["box_logits", "dfl_shape"], ["dfl_in"], name="dfl_reshape"),
             h.make_node("Softmax", ["dfl_in"], ["dfl_p"], axis=1, name="dfl_softmax"),
             h.make_node("Unsqueeze", ["dfl_p", "zero"], ["dfl_p4"], name="dfl_unsqueeze"),
             h.make_node("Conv", ["dfl_p4", "w_dfl"], ["dfl_out"], name="dfl_conv"),
             h.make_node("Reshape", ["dfl_out", "flat4"], ["boxes_raw"], name="boxes_flat"),
             h.make_node("Mul", ["boxes_raw", "stride"], ["boxes"], name="to_pixels"),
             h.make_node("Sigmoid", ["score_logits"], ["scores4"], name="scores_sigmoid"),
             h.make_node("Reshape", ["scores4", "flat2"], ["scores"], name="scores_flat"),
             h.make_node("Concat", ["boxes", "scores"], ["y"], axis=1, name="head_concat")]
    inits.append(nh.from_array(np.array([0], np.int64), "zero"))
    graph = h.make_graph(nodes, "head", [h.make_tensor_value_info("x", T.FLOAT, [batch, 3, 16, 16])],
                         [h.make_tensor_value_info("y", T.FLOAT, [batch, 6, 256])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_the_tail_is_everything_after_the_last_heavy_compute_on_the_way_to_the_output():
    model = yolo_like_head()
    onnx.checker.check_model(model)
    tail = post_processing_tail(model)
    assert tail == ["dfl_reshape", "dfl_softmax", "dfl_unsqueeze", "dfl_conv", "boxes_flat", "to_pixels",
                    "scores_sigmoid", "scores_flat", "head_concat"]
    assert not {"backbone", "backbone_act", "neck", "box_conv", "score_conv"} & set(tail), "compute stays INT8"


def test_macs_of_convolutions_and_matrix_products():
    model = yolo_like_head()
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in inferred.graph.value_info}
    shapes.update({i.name: list(i.dims) for i in model.graph.initializer})
    nodes = {n.name: n for n in model.graph.node}
    assert node_macs(nodes["backbone"], shapes) == 32 * 16 * 16 * 3 * 3 * 3
    assert node_macs(nodes["box_conv"], shapes) == 16 * 16 * 16 * 64
    assert node_macs(nodes["to_pixels"], shapes) == 0
    matmul = h.make_node("MatMul", ["a", "b"], ["c"])
    assert node_macs(matmul, {"a": [1, 6, 8], "b": [8, 5], "c": [1, 6, 5]}) == 6 * 5 * 8
    assert node_macs(matmul, {"b": [8, 5]}) is None


def test_a_heavy_dfl_or_an_unknown_shape_keeps_compute_out_of_the_tail():
    # With many taps the 'DFL' conv does a real share of the work: it is no longer post-processing.
    heavy = post_processing_tail(yolo_like_head(dfl_taps=4096))
    assert "dfl_conv" not in heavy and "head_concat" in heavy
    # A symbolic batch counts as 1; where a shape stays unknown, MAC nodes count as heavy and the light
    # nodes still form the tail.
    assert post_processing_tail(yolo_like_head(batch="n")) == post_processing_tail(yolo_like_head())
    model = yolo_like_head()
    dims = model.graph.input[0].type.tensor_type.shape.dim
    dims[2].Clear()
    dims[2].dim_param = "height"
    unknown = post_processing_tail(model)
    assert "dfl_conv" not in unknown and {"to_pixels", "head_concat", "scores_sigmoid"} <= set(unknown)


def test_nodes_that_feed_no_output_are_not_tail():
    model = yolo_like_head()
    model.graph.node.append(h.make_node("Relu", ["boxes"], ["unused"], name="dangling"))
    assert "dangling" not in post_processing_tail(model)


def test_an_attempt_carries_its_calibrator_and_float_nodes():
    item = PlannedArtifact("onnx", "int8", "test", steps=(StepCall("quantize-onnx-static", OnnxInt8Options()),))
    attempt = with_exclusions(item, ["a", "b"], "percentile")
    assert attempt.int8.nodes_to_exclude == ("a", "b") and attempt.int8.calibrate_method == "percentile"
    assert with_exclusions(attempt, ["c"]).int8.calibrate_method == "percentile"
    assert attempt.int8.scheme.endswith("2 nodes float") and "percentile" in attempt.int8.scheme


def test_attempts_are_ranked_by_verdict_then_decisions_lost_then_cosine():
    class A:
        def __init__(self, verdict, drop, cosine):
            self.verdict, self.drop_points, self.min_cosine = verdict, drop, cosine

    order = sorted([A("failed", 10.0, 0.99), A("unresolved", 0.5, 0.9), A("failed", 5.0, 0.95), A("ok", None, 0.999)],
                   key=_badness)
    assert [(a.verdict, a.drop_points) for a in order] == [("ok", None), ("unresolved", 0.5), ("failed", 5.0),
                                                           ("failed", 10.0)]


class _FakeSearch:
    """Stands in for mixed precision's search: an attempt passes when it keeps every node of `needed` in float."""

    method = "minmax"

    def __init__(self, prepared, needed):
        self.prepared, self.needed = prepared, set(needed)
        self.best_floats, self.tried, self.last_passed = [], [], False

    @property
    def floats(self):
        return list(self.best_floats)

    @property
    def failed(self):
        return not self.needed <= set(self.best_floats)

    def attempt(self, nodes, stage, method=None, fewer_floats=False):
        self.tried.append((stage, list(nodes)))
        self.last_passed = self.needed <= set(nodes)
        if self.last_passed and (self.failed or len(nodes) < len(self.best_floats)):
            self.best_floats = list(nodes)
            return True
        return False


def test_the_input_side_prefix_is_bisected_to_the_smallest_share_that_passes(tmp_path):
    path = tmp_path / "head.onnx"
    onnx.save(yolo_like_head(), str(path))
    ordered = mac_shares(onnx.load(str(path)))
    shares = dict(ordered)
    assert shares["backbone"] < shares["neck"] < shares["box_conv"] < shares["head_concat"] == 1.0
    candidates = {n.name for n in yolo_like_head().graph.node}
    search = _FakeSearch(path, ["backbone"])  # only the first convolution needs float
    report = {}
    _prefix_stage(search, ordered, candidates, report)
    assert len(search.tried) == PREFIX_STEPS and search.tried[0][0] == "input-side prefix (50% of MACs)"
    assert search.floats == ["backbone", "backbone_act"], "the smallest passing prefix is kept"
    kept_stage = next(stage for stage, nodes in search.tried if nodes == search.floats)
    assert f"({report['prefix_share']:.0%} of MACs)" in kept_stage
    # When half of the MACs in float still fails with every calibrator, the stage stops there.
    hopeless = _FakeSearch(path, ["score_conv"])
    _prefix_stage(hopeless, ordered, candidates, {})
    assert len(hopeless.tried) == len(CALIBRATION_METHODS) and hopeless.failed
