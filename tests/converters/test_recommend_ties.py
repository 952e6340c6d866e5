"""A board the host cannot stand for: the roofline predicts, and where it ties two runtimes on the same
graph, this host's measured ratio between them settles it instead of the profile's order."""
from types import SimpleNamespace

from edgeopt_agent.profiles import load_profile
from edgeopt_converters.cost.host_timing import HostTiming
from edgeopt_converters.recommend import recommend


def _record(fmt, precision, host_ms):
    accuracy = SimpleNamespace(verdict="ok", reason="", excellent=True)
    planned = SimpleNamespace(format=fmt, precision=precision, key=f"{fmt}-{precision}")
    return SimpleNamespace(planned=planned, accuracy=accuracy, host_timing=HostTiming(host_ms, host_ms, 10), info={})


def test_the_host_runtime_ratio_breaks_a_roofline_tie():
    rpi4 = load_profile("rpi4")
    assert rpi4.runtimes[0] == "tflite", "the profile's own order would pick TFLite"
    records = [_record("onnx", "fp32", 4.0), _record("tflite", "fp32", 10.0)]
    rec = recommend(records, rpi4, measured=False, why_predicted="rpi4 is not this machine's architecture",
                    predicted_ms={"onnx-fp32": 7.0})
    assert rec.key == "onnx-fp32" and rec.basis == "predicted"
    assert "tflite-fp32 ran the same graph 2.5x slower than onnx-fp32 on this host" in rec.reason


def test_runtimes_within_the_tie_keep_the_profile_order():
    rpi4 = load_profile("rpi4")
    records = [_record("onnx", "fp32", 4.0), _record("tflite", "fp32", 4.1)]
    rec = recommend(records, rpi4, measured=False, predicted_ms={"onnx-fp32": 7.0})
    assert rec.key == "tflite-fp32" and "settled by this host" not in rec.reason
