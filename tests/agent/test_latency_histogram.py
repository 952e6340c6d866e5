"""A result's latency histogram (edgeopt_agent.wire.latency_histogram): compact, within 0.5 % of every
percentile, merged by adding counts, and checked as the board's word it is."""
from __future__ import annotations

import json
import math
import random

import pytest

from edgeopt_agent.bench.stats import PERCENTILES, nearest_rank, summarize_milliseconds
from edgeopt_agent.wire import LatencyHistogram, ProtocolError
from edgeopt_agent.wire.latency_histogram import MAX_BUCKETS, RELATIVE_ACCURACY


def durations(seed=1, n=2000, p50=12.0):
    rng = random.Random(seed)
    return [p50 * math.exp(rng.gauss(0, 0.1)) * (rng.uniform(2, 5) if rng.random() < 0.02 else 1) for _ in range(n)]


@pytest.mark.parametrize("seed", range(5))
def test_every_percentile_read_back_is_within_the_relative_accuracy_of_the_exact_one(seed):
    values = durations(seed)
    histogram = LatencyHistogram.of_durations(values)
    exact = sorted(values)
    assert histogram.count == len(values)
    for p in list(PERCENTILES) + [1, 10, 75, 99.9, 100]:
        assert histogram.percentile(p) == pytest.approx(nearest_rank(exact, p), rel=RELATIVE_ACCURACY * 1.0001)


def test_on_the_wire_it_is_small_and_reads_back_the_same():
    values = durations(n=10000)
    histogram = LatencyHistogram.of_durations(values)
    data = histogram.to_dict()
    assert len(json.dumps(data, separators=(",", ":"))) < 1500  # 10,000 durations in about a kilobyte
    again = LatencyHistogram.from_dict(json.loads(json.dumps(data)))
    assert again == histogram and again.count == 10000


def test_empty_buckets_between_the_body_and_a_tail_are_one_number():
    histogram = LatencyHistogram.of_durations([10.0] * 5 + [1000.0])
    data = histogram.to_dict()
    assert data["counts"][0] == 5 and data["counts"][-1] == 1
    assert len(data["counts"]) == 3 and data["counts"][1] < -400  # the 460-odd empty buckets in between
    assert histogram.percentile(100) == pytest.approx(1000.0, rel=RELATIVE_ACCURACY)


def test_runs_merge_by_adding_counts():
    first, second = durations(1, 500), durations(2, 700)
    merged = LatencyHistogram.of_durations(first).merged(LatencyHistogram.of_durations(second))
    assert merged == LatencyHistogram.of_durations(first + second)


def test_durations_too_short_for_the_clock_count_as_the_shortest_bucket():
    histogram = LatencyHistogram.of_durations([0.0, 0.0, 1e-9, 5.0])
    assert histogram.count == 4 and histogram.percentile(50) < 1e-5


def test_summary_and_histogram_agree_on_the_same_durations():
    values = durations(3)
    summary, histogram = summarize_milliseconds(values), LatencyHistogram.of_durations(values)
    for p in (50, 90, 99):
        assert histogram.percentile(p) == pytest.approx(summary[f"p{p}"], rel=RELATIVE_ACCURACY * 1.0001)


@pytest.mark.parametrize("data, message", [
    ([], "exactly gamma, first, counts and count"),
    ({"gamma": 1.01, "first": 0, "counts": [1]}, "exactly gamma, first, counts and count"),
    ({"gamma": 1.0, "first": 0, "counts": [1], "count": 1}, "'gamma' must be a number in"),
    ({"gamma": "1.01", "first": 0, "counts": [1], "count": 1}, "'gamma' must be a number in"),
    ({"gamma": 1.01, "first": 1.5, "counts": [1], "count": 1}, "'first' must be an integer"),
    ({"gamma": 1.01, "first": 10 ** 9, "counts": [1], "count": 1}, "'first' must be an integer"),
    ({"gamma": 1.01, "first": 0, "counts": [1, 0, 2], "count": 3}, "non-zero integers"),
    ({"gamma": 1.01, "first": 0, "counts": [1, True], "count": 2}, "non-zero integers"),
    ({"gamma": 1.01, "first": 0, "counts": [1, -(10 ** 11), 1], "count": 2}, "must lie within"),
    ({"gamma": 1.01, "first": 0, "counts": [2, 3], "count": 6}, "is not the sum of its counts"),
    ({"gamma": 1.01, "first": 0, "counts": [1] * (MAX_BUCKETS + 1), "count": MAX_BUCKETS + 1}, "more than"),
    ({"gamma": 1.01, "first": 0, "counts": "1,2", "count": 3}, "'counts' must be a list"),
])
def test_a_histogram_that_does_not_hold_is_refused_with_what_is_wrong(data, message):
    with pytest.raises(ProtocolError, match=message):
        LatencyHistogram.from_dict(data)
