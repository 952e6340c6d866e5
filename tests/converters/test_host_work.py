"""Accuracy work (reference, calibration, validation) runs with the threads this host is fastest with
and several small samples per run where the model takes them alike; timing keeps the profile's threads."""
import numpy as np
import pytest

from edgeopt_converters import host_work


@pytest.mark.parametrize("elements, batch", [(3 * 224 * 224, 1), (48 * 320 * 3, 1), (512, 64), (128 * 64, 8),
                                             (1, 64)])
def test_small_inputs_are_fed_many_per_run_and_images_one(elements, batch):
    assert host_work.batch_for(elements) == batch


class _Clock:
    """perf_counter for the probe: each call of a run advances it by that run's cost."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


@pytest.mark.parametrize("one, many, chosen", [(0.020, 0.005, 2), (0.010, 0.030, 1), (0.010, 0.009, 1)])
def test_all_cores_are_used_only_where_clearly_faster(monkeypatch, one, many, chosen):
    clock = _Clock()
    monkeypatch.setattr(host_work.time, "perf_counter", clock)
    cost = {1: one, 2: many}

    def make(threads):
        def run():
            clock.now += cost[threads]
        return run

    threads, why = host_work.choose_threads(make, cores=2)
    assert threads == chosen
    assert f"{one * 1e3:.0f} ms" in why and f"{many * 1e3:.0f} ms" in why


def test_one_core_is_never_probed():
    assert host_work.choose_threads(lambda t: pytest.fail("no probe on one core"), cores=1) == (1, "")


def test_a_model_that_mixes_samples_of_a_batch_is_fed_one_at_a_time():
    rng = np.random.default_rng(0)
    feed = {"x": rng.standard_normal((8, 4)).astype(np.float32)}

    def per_sample(f):
        return [np.tanh(f["x"]) * 2]

    def batch_norm_over_the_batch(f):
        x = f["x"]
        return [(x - x.mean(0)) / (x.std(0) + 1e-6)]

    assert host_work.same_per_sample(per_sample, feed, batch=8, base=1)
    assert not host_work.same_per_sample(batch_norm_over_the_batch, feed, batch=8, base=1)
