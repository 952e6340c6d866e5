import pytest

from edgeopt_agent.wire.backoff import Backoff


def test_delays_grow_exponentially_up_to_the_cap_without_jitter():
    backoff = Backoff(initial=1, maximum=10, factor=2, jitter=0)
    assert [backoff.next() for _ in range(6)] == [1, 2, 4, 8, 10, 10]
    backoff.reset()
    assert backoff.next() == 1


def test_jitter_shortens_each_delay_by_up_to_the_fraction():
    rolls = iter([0.0, 1.0, 0.5])
    backoff = Backoff(initial=2, maximum=100, factor=2, jitter=0.5, rng=lambda: next(rolls))
    assert [backoff.next() for _ in range(3)] == [2.0, 2.0, 6.0]


def test_real_jitter_stays_within_bounds():
    backoff = Backoff(initial=1, maximum=4, jitter=0.5)
    delays = [backoff.next() for _ in range(50)]
    assert all(0.5 <= d <= 4 for d in delays)
    assert len(set(delays)) > 1


@pytest.mark.parametrize("kwargs", [{"initial": 0}, {"initial": 5, "maximum": 1}, {"jitter": 1.0}, {"factor": 0.5}])
def test_nonsense_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        Backoff(**kwargs)
