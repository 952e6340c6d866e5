"""Nearest-rank percentiles and the latency summary on data with known answers."""
from __future__ import annotations

import math

import pytest

from edgeopt_agent.bench.stats import nearest_rank, summarize_ms


def test_nearest_rank_textbook_example():
    # The classic nearest-rank example: 15, 20, 35, 40, 50.
    data = [15, 20, 35, 40, 50]
    assert [nearest_rank(data, p) for p in (5, 30, 40, 50, 100)] == [15, 20, 20, 35, 50]


def test_nearest_rank_on_one_to_hundred_is_the_percentile_itself():
    data = list(range(1, 101))
    for p in (1, 7, 29, 50, 57, 90, 95, 99, 100):
        assert nearest_rank(data, p) == p  # exact rank arithmetic: no 7.000000001 -> 8


def test_nearest_rank_on_ten_values():
    data = list(range(1, 11))
    assert (nearest_rank(data, 50), nearest_rank(data, 90), nearest_rank(data, 95), nearest_rank(data, 99)) == (5, 9, 10, 10)


def test_nearest_rank_single_value_and_bad_arguments():
    assert nearest_rank([3.5], 99) == 3.5
    with pytest.raises(ValueError):
        nearest_rank([], 50)
    with pytest.raises(ValueError):
        nearest_rank([1, 2], 0)


def test_summary_in_milliseconds():
    seconds = [0.001 * v for v in (4, 1, 3, 2, 10)]  # 1..4 ms and one 10 ms outlier
    s = summarize_ms(seconds)
    assert (s["min"], s["p50"], s["p90"], s["p95"], s["p99"], s["max"]) == (1.0, 3.0, 10.0, 10.0, 10.0, 10.0)
    assert s["mean"] == pytest.approx(4.0)
    assert s["std"] == pytest.approx(math.sqrt((9 + 4 + 1 + 0 + 36) / 5))  # population std
