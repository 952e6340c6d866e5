"""A board the host cannot stand for: the roofline predicts, and where it ties two runtimes on the same
graph, this host's measured ratio between them settles it instead of the profile's order. On a board of
another CPU architecture only a structural gap (FOREIGN_ARCH_GAP) settles it, and a runtime whose host
timing does not represent that architecture (ncnn, NEON-tuned) is never dropped."""
from types import SimpleNamespace

from edgeopt_agent.profiles import load_profile
from edgeopt_converters.cost.host_timing import HostTiming
from edgeopt_converters.recommend import FOREIGN_ARCH_GAP, TIE, recommend

X86 = "x86_64"  # this host's machine, pinned: rpi4 is aarch64, so the rpi4 cases are another architecture


def _record(fmt, precision, host_ms):
    accuracy = SimpleNamespace(verdict="ok", reason="", excellent=True)
    planned = SimpleNamespace(format=fmt, precision=precision, key=f"{fmt}-{precision}")
    return SimpleNamespace(planned=planned, accuracy=accuracy, host_timing=HostTiming(host_ms, host_ms, 10), info={})


def test_the_host_runtime_ratio_breaks_a_roofline_tie():
    rpi4 = load_profile("rpi4")
    assert rpi4.runtimes[0] == "tflite", "the profile's own order would pick TFLite"
    records = [_record("onnx", "fp32", 4.0), _record("tflite", "fp32", 10.0)]
    rec = recommend(records, rpi4, measured=False, why_predicted="rpi4 is not this machine's architecture",
                    predicted_ms={"onnx-fp32": 7.0}, host_machine=X86)
    assert rec.key == "onnx-fp32" and rec.basis == "predicted"
    assert "tflite-fp32 ran the same graph 2.5x slower than onnx-fp32 on this host" in rec.reason
    assert "settled by this x86_64 host's runtimes although rpi4 is aarch64, since the gap is structural" in rec.reason


def test_runtimes_within_the_tie_keep_the_profile_order():
    rpi4 = load_profile("rpi4")
    records = [_record("onnx", "fp32", 4.0), _record("tflite", "fp32", 4.1)]
    rec = recommend(records, rpi4, measured=False, predicted_ms={"onnx-fp32": 7.0}, host_machine=X86)
    assert rec.key == "tflite-fp32" and "settled by this" not in rec.reason


def test_on_another_architecture_a_gap_short_of_structural_leaves_the_profile_order():
    rpi4 = load_profile("rpi4")
    assert TIE < 1.3 < FOREIGN_ARCH_GAP
    records = [_record("onnx", "fp32", 4.0), _record("tflite", "fp32", 5.2)]
    rec = recommend(records, rpi4, measured=False, predicted_ms={"onnx-fp32": 7.0}, host_machine=X86)
    assert rec.key == "tflite-fp32" and "settled by this" not in rec.reason
    assert ("this x86_64 host's gap between runtimes left to rpi4's order, too small to carry over to aarch64 "
            "(under 1.5x): tflite-fp32 1.30x onnx-fp32's time") in rec.reason


def test_on_the_boards_own_architecture_the_tie_rule_settles_a_small_gap():
    rpi4 = load_profile("rpi4")
    records = [_record("onnx", "fp32", 4.0), _record("tflite", "fp32", 5.2)]
    rec = recommend(records, rpi4, measured=False, predicted_ms={"onnx-fp32": 7.0}, host_machine="aarch64")
    assert rec.key == "onnx-fp32"
    assert "settled by this host's runtimes: tflite-fp32 ran the same graph 1.3x slower than onnx-fp32" in rec.reason


def test_ncnn_timed_on_another_architecture_is_neither_dropped_nor_the_yardstick():
    rpi5 = load_profile("rpi5")
    records = [_record("onnx", "fp32", 4.0), _record("tflite", "fp32", 4.1), _record("ncnn", "fp32", 400.0)]
    rec = recommend(records, rpi5, measured=False, predicted_ms={"onnx-fp32": 7.0}, host_machine=X86)
    assert rec.key == "tflite-fp32"  # the profile's order among the tied; ncnn was not settled away
    assert "ncnn-fp32 ran the same graph" not in rec.reason
    assert "kept without regard to this host's timing, which does not represent aarch64: ncnn-fp32 (ncnn's CPU kernels" in rec.reason

    fast_ncnn = [_record("onnx", "fp32", 9.0), _record("tflite", "fp32", 9.1), _record("ncnn", "fp32", 1.0)]
    rec = recommend(fast_ncnn, rpi5, measured=False, predicted_ms={"onnx-fp32": 7.0}, host_machine=X86)
    assert rec.key == "tflite-fp32", "ncnn's 9x on x86 must not drop the others either"


def test_on_the_boards_own_architecture_ncnn_is_settled_like_any_runtime():
    rpi5 = load_profile("rpi5")
    records = [_record("onnx", "fp32", 4.1), _record("tflite", "fp32", 4.0), _record("ncnn", "fp32", 40.0)]
    rec = recommend(records, rpi5, measured=False, predicted_ms={"onnx-fp32": 7.0}, host_machine="aarch64")
    assert rec.key == "tflite-fp32" and "ncnn-fp32 ran the same graph 10.0x slower than tflite-fp32" in rec.reason
    assert "does not represent" not in rec.reason


def test_a_predicted_int8_that_gains_under_the_minimum_leaves_fp32_recommended():
    """MiniLM on rpi4: no INT8 arithmetic faster than FP32 on a Cortex-A72, so the roofline put its INT8
    artifacts within 1.3 % of FP32 (13.97 / 13.97 / 14.15 ms); the tie must not hand the pick to INT8."""
    rpi4 = load_profile("rpi4")
    dynamic = _record("onnx", "int8", 3.0)
    dynamic.planned.key = "onnx-int8-dynamic"
    records = [_record("onnx", "fp32", 4.0), _record("onnx", "int8", 20.0), dynamic]
    predicted = {"onnx-fp32": 14.146, "onnx-int8": 13.965, "onnx-int8-dynamic": 13.973}
    rec = recommend(records, rpi4, measured=False, predicted_ms=predicted, host_machine=X86)
    assert rec.key == "onnx-fp32"
    assert ("not predicted at least 1.05x faster than FP32, so not worth a lower precision's accuracy cost: "
            "onnx-int8 (1.01x), onnx-int8-dynamic (1.01x)") in rec.reason


def test_a_predicted_int8_well_ahead_of_fp32_is_recommended():
    rpi4 = load_profile("rpi4")
    records = [_record("onnx", "fp32", 4.0), _record("onnx", "int8", 2.0)]
    rec = recommend(records, rpi4, measured=False, predicted_ms={"onnx-fp32": 10.0, "onnx-int8": 6.0},
                    host_machine=X86)
    assert rec.key == "onnx-int8" and "not predicted at least" not in rec.reason


def test_a_graph_the_roofline_costs_at_zero_does_not_break_the_pick():
    """A graph of only views (Identity, Reshape) is predicted at 0 ms."""
    rpi4 = load_profile("rpi4")
    records = [_record("onnx", "fp32", 1.0), _record("onnx", "int8", 1.0)]
    rec = recommend(records, rpi4, measured=False, predicted_ms={"onnx-fp32": 0.0, "onnx-int8": 0.0},
                    host_machine=X86)
    assert rec.key == "onnx-fp32" and "onnx-int8" in rec.reason.split("accuracy cost: ")[1]
