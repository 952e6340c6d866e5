"""On the host's own architecture a choice between artifacts rests on an interval that decides it: the
fastest by its median is chosen over another only where their paired per-round ratio is above 1 at 95 %;
otherwise the profile's order picks, and the reason says the timing did not decide (issue 36: a pick between
two FP32 formats rested on 8 noisy rounds and went to the one an independent timing found 0.86x)."""
from types import SimpleNamespace

import numpy as np

from edgeopt_agent.profiles import load_profile
from edgeopt_converters.cost.host_timing import HostTiming
from edgeopt_converters.recommend import recommend


def _record(fmt, rounds):
    accuracy = SimpleNamespace(verdict="ok", reason="", excellent=True)
    planned = SimpleNamespace(format=fmt, precision="fp32", key=f"{fmt}-fp32")
    timing = HostTiming(float(np.median(rounds)), float(np.max(rounds)), len(rounds), len(rounds), None, None,
                        tuple(rounds))
    return SimpleNamespace(planned=planned, accuracy=accuracy, host_timing=timing, info={})


def test_a_gap_the_rounds_do_not_decide_goes_to_the_profiles_order():
    x86 = load_profile("x86-64")
    rng = np.random.default_rng(0)
    noise = rng.uniform(0.8, 1.25, 8)
    onnx = _record("onnx", list(10.0 * noise))
    tflite = _record("tflite", list(10.3 * noise[::-1]))  # 3 % slower by the medians, noise both ways
    preferred = x86.runtimes.index("onnxruntime") < x86.runtimes.index("tflite")
    rec = recommend([tflite, onnx], x86, measured=True)
    assert rec.key == ("onnx-fp32" if preferred else "tflite-fp32")
    assert "the timing does not decide between" in rec.reason and "95%" in rec.reason


def test_a_gap_the_rounds_decide_picks_the_faster_against_the_order():
    x86 = load_profile("x86-64")
    order = [r for r in x86.runtimes if r in ("onnxruntime", "tflite")]
    first, second = ("onnx", "tflite") if order[0] == "onnxruntime" else ("tflite", "onnx")
    base = np.linspace(10, 11, 10)
    preferred, faster = _record(first, list(base * 1.3)), _record(second, list(base))
    rec = recommend([preferred, faster], x86, measured=True)
    assert rec.key == f"{second}-fp32" and "does not decide" not in rec.reason
