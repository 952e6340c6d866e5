"""One format for a speed-up and its interval: the recommendation's reason, the convert table and the
report show the same digits (they used to differ in the last one: `0.92x [0.81, 0.94]` in the table
from the manifest's 3-decimal figures, `0.91x FP32, 95% 0.81-0.94` in the reason from the raw ones)."""
import pytest

from edgeopt.cli.convert import _speedup
from edgeopt.report.compare import artifact_views
from edgeopt.report.page import _artifact_row
from edgeopt_converters.cost.host_timing import HostTiming, Speedup, speedup_text


@pytest.mark.parametrize("estimate, low, high, shown", [
    (0.91497, 0.81449, 0.94497, "0.92x [0.81, 0.94]"),  # 0.915 in the manifest: 0.92 everywhere
    (1.12, 1.0, 1.3249, "1.12x [1.00, 1.32]"),
])
def test_the_reason_the_table_and_the_report_agree(estimate, low, high, shown):
    speedup = Speedup(estimate, low, high, "onnx-fp32")
    timing = HostTiming(1.0, 1.2, 100, rounds=20, speedup=speedup).to_dict()  # as the manifest keeps it
    assert speedup.text() == shown
    assert _speedup(timing) == shown
    entry = {"key": "onnx-int8", "host_timing": {**timing, "speedup_vs_fp32": round(estimate, 3)}, "accuracy": {}}
    (view,) = artifact_views({"artifacts": [entry]})
    assert shown.replace("x", "×") in _artifact_row(view, predicted=False)


def test_a_speed_up_without_an_interval():
    assert speedup_text(1.0) == "1.00x"
    assert _speedup({"speedup": None, "speedup_vs_fp32": 0.914}) == "0.91x"
    assert _speedup({"speedup": None, "speedup_vs_fp32": None}) == "-"
