"""Efficiency per kernel kind fitted from stored fleet pairs (a fake store and the real one)."""
from __future__ import annotations

import pytest

from edgeopt.analysis import efficiency
from edgeopt.fleet.store import open_store
from edgeopt_converters.cost.roofline_fit import MIN_SHARE, fit


class FakeStore:
    def __init__(self, rows):
        self.rows = rows

    def roofline_fits(self, profile=None):
        return [r for r in self.rows if profile is None or r["profile"] == profile]


def _row(key, kind_ms, measured, precision="int8", profile="rpi5"):
    return {"profile": profile, "precision": precision, "model_sha256": "ab" * 32, "artifact_key": key,
            "predicted_ms": sum(kind_ms.values()), "measured_ms": measured, "kind_ms": kind_ms}


# The board runs INT8 convolutions at 2x their roofline time and depthwise ones at 6x.
ROWS = [_row("a", {"int8/conv": 10.0}, 20.0), _row("b", {"int8/depthwise": 10.0}, 60.0),
        _row("c", {"int8/conv": 5.0, "int8/depthwise": 5.0}, 40.0), _row("d", {"int8/conv": 8.0, "int8/depthwise": 2.0}, 28.0),
        _row("e", {"fp32/conv": 10.0}, 15.0, precision="fp32")]


def test_per_kind_factors_are_fitted_where_the_fleet_data_separates_the_kinds():
    found, scope = efficiency(FakeStore(ROWS).roofline_fits("rpi5"), "rpi5", "int8")
    assert scope == "int8" and found.samples == 4
    whole = (2.0 * 6.0 * 4.0 * 2.8) ** 0.25
    assert found.factor == pytest.approx(whole)
    assert found.kinds["int8/conv"] == pytest.approx(2.0, rel=0.1)
    assert found.kinds["int8/depthwise"] == pytest.approx(6.0, rel=0.1)
    assert found.kind_samples == {"int8/conv": 3, "int8/depthwise": 3}
    # Per kind, each artifact is predicted closer than by the whole-graph factor.
    for r in ROWS[:4]:
        per_kind = abs(found.predicted(r["kind_ms"]) - r["measured_ms"])
        assert per_kind < abs(r["predicted_ms"] * whole - r["measured_ms"])


def test_too_little_data_keeps_the_whole_graph_factor():
    one, _ = efficiency(ROWS, "rpi5", "fp32")
    assert one.factor == pytest.approx(1.5) and one.kinds == {}
    old = [dict(r, kind_ms={}) for r in ROWS[:4]]  # rows stored before the kinds were
    assert fit(old).kinds == {} and fit(old).factor == pytest.approx(fit(ROWS[:4]).factor)
    none, scope = efficiency(ROWS, "rpi4", "int8")
    assert none.factor is None and scope == ""


def test_a_kind_that_takes_too_little_time_is_not_fitted_and_leaving_an_artifact_out_works():
    tiny = MIN_SHARE / 2
    rows = [dict(r, kind_ms=dict(r["kind_ms"], **{"fp32/qdq": tiny})) for r in ROWS[:4]]
    found = fit(rows)
    assert "fp32/qdq" not in found.kinds and set(found.kinds) == {"int8/conv", "int8/depthwise"}
    left_out, _ = efficiency(ROWS, "rpi5", "int8", leave_out=("ab" * 32, "b"))
    assert left_out.samples == 3


def test_the_store_keeps_each_pairs_predicted_time_per_kind(tmp_path):
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    with open_store(url) as store:
        store.save_roofline_fit("rpi5", "int8", "ab" * 32, "onnx-int8", 10.0, 30.0, {"int8/conv": 7.0, "fp32/qdq": 3.0})
        store.save_roofline_fit("rpi5", "fp32", "ab" * 32, "onnx-fp32", 20.0, 30.0)
        rows = {r["artifact_key"]: r for r in store.roofline_fits("rpi5")}
    assert rows["onnx-int8"]["kind_ms"] == {"int8/conv": 7.0, "fp32/qdq": 3.0}
    assert rows["onnx-fp32"]["kind_ms"] == {}


def test_the_fit_is_in_log_space_and_scales_dispatch_overhead_apart_from_work():
    # Work is 1.5x its roofline time on every artifact; fixed dispatch costs are 4x theirs.
    rows = [_row(key, {"fp32/conv": work, "overhead": overhead}, 1.5 * work + 4.0 * overhead, precision="fp32")
            for key, work, overhead in (("big", 20.0, 0.2), ("mid", 5.0, 1.0), ("tiny", 0.1, 0.4))]
    found = fit(rows)  # the ridge keeps each factor a little towards the whole-graph one (2.17 here)
    assert found.factor == pytest.approx(2.1707, rel=1e-3)
    assert found.kinds["fp32/conv"] == pytest.approx(1.5, rel=0.05)
    assert found.kinds["overhead"] == pytest.approx(4.0, rel=0.1)
    for r in rows:
        assert found.predicted(r["kind_ms"]) == pytest.approx(r["measured_ms"], rel=0.07)
    loose = fit(rows, ridge=0.01)
    assert loose.kinds["fp32/conv"] == pytest.approx(1.5, rel=0.01) and loose.kinds["overhead"] == pytest.approx(4.0, rel=0.01)
    # One artifact 2x too slow and one 2x too fast: no correction at all.
    even = fit([_row("slow", {"fp32/conv": 1.0}, 2.0), _row("fast", {"fp32/conv": 1.0}, 0.5)])
    assert even.factor == pytest.approx(1.0) and even.kinds["fp32/conv"] == pytest.approx(1.0)
