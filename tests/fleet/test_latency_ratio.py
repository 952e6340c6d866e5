"""The ratio of two builds' latency percentiles and its bootstrap interval (edgeopt.fleet.latency_ratio):
it holds the true ratio as often as it says, it widens when a build's runs disagree, and boards combine."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest

from edgeopt.fleet.latency_ratio import combined, percentile_ratios, pooled_percentiles
from edgeopt_agent.wire import LatencyHistogram


def run(rng, p50, n=300, spread=0.05):
    return LatencyHistogram.of_durations([p50 * math.exp(rng.gauss(0, spread)) for _ in range(n)])


@pytest.mark.parametrize("true_ratio", [1.0, 1.1])
def test_the_95_percent_interval_holds_the_true_p50_ratio_at_least_95_percent_of_the_time(true_ratio):
    rng = random.Random(3)
    held = 0
    trials = 150
    for trial in range(trials):
        found = percentile_ratios([run(rng, 10.0)], [run(rng, 10.0 * true_ratio)], np.random.default_rng(trial),
                                  percentiles=(50,), resamples=500)
        held += found[50].low <= true_ratio <= found[50].high
    assert held / trials >= 0.95  # widened for the histograms' 0.5 % resolution: if anything, wider than needed


def test_the_estimate_and_interval_of_each_percentile():
    rng = random.Random(1)
    found = percentile_ratios([run(rng, 10.0, 2000)], [run(rng, 12.0, 2000)], np.random.default_rng(0))
    assert set(found) == {50, 90, 99}
    for ratio in found.values():
        assert ratio.low < ratio.estimate < ratio.high
        assert ratio.estimate == pytest.approx(1.2, rel=0.03)
        assert ratio.candidate_ms / ratio.baseline_ms == pytest.approx(ratio.estimate)
    assert found[99].high - found[99].low > found[50].high - found[50].low  # the tail is known less well


def test_runs_of_one_build_that_disagree_widen_the_interval():
    rng = random.Random(2)
    agreeing = [run(rng, 10.0), run(rng, 10.0)]
    disagreeing = [run(rng, 9.7), run(rng, 10.3)]
    candidate = [run(rng, 10.0), run(rng, 10.0)]
    narrow = percentile_ratios(agreeing, candidate, np.random.default_rng(0), percentiles=(50,))[50]
    wide = percentile_ratios(disagreeing, candidate, np.random.default_rng(0), percentiles=(50,))[50]
    assert wide.high - wide.low > 1.5 * (narrow.high - narrow.low)


def test_boards_combine_into_a_geometric_mean_with_a_narrower_interval():
    rng = random.Random(4)
    boards = [percentile_ratios([run(rng, p50)], [run(rng, p50 * 1.1)], np.random.default_rng(i), percentiles=(50,))[50]
              for i, p50 in enumerate((5.0, 10.0, 20.0, 40.0))]
    profile = combined(boards)
    assert profile.estimate == pytest.approx(math.exp(np.mean([math.log(b.estimate) for b in boards])))
    assert profile.low < profile.estimate < profile.high
    assert profile.high - profile.low < min(b.high - b.low for b in boards)
    assert profile.baseline_ms == pytest.approx(math.exp(np.mean([math.log(b.baseline_ms) for b in boards])))


def test_the_same_seed_gives_the_same_interval():
    rng = random.Random(5)
    base, cand = [run(rng, 10.0)], [run(rng, 10.5)]
    first = percentile_ratios(base, cand, np.random.default_rng(7))[50]
    again = percentile_ratios(base, cand, np.random.default_rng(7))[50]
    assert (first.low, first.high) == (again.low, again.high)


def test_sides_that_cannot_be_compared_say_why():
    rng = random.Random(6)
    coarse = LatencyHistogram.of_durations([10.0, 11.0], gamma=1.05)
    with pytest.raises(ValueError, match="different bucket widths"):
        percentile_ratios([run(rng, 10.0), coarse], [run(rng, 10.0)], np.random.default_rng(0))
    with pytest.raises(ValueError, match="without runs"):
        percentile_ratios([], [run(rng, 10.0)], np.random.default_rng(0))


def test_pooled_percentiles_are_those_of_every_run_together():
    rng = random.Random(8)
    runs = [run(rng, 10.0, 100), run(rng, 20.0, 100)]
    pooled = pooled_percentiles(runs, (50, 90))
    assert pooled == {p: runs[0].merged(runs[1]).percentile(p) for p in (50, 90)}
