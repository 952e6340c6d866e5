"""BenchmarkSpec: validated on construction, round-trips through a job's dict."""
from __future__ import annotations

import pytest

from edgeopt_agent.bench import BenchmarkSpec
from edgeopt_agent.errors import UserError


def test_defaults_and_round_trip():
    spec = BenchmarkSpec(artifact="m.onnx", batch_sizes=[1, 2, 8])
    assert spec.batch_sizes == (1, 2, 8) and spec.runs == 100
    again = BenchmarkSpec.from_dict(spec.to_dict())
    assert again == spec


@pytest.mark.parametrize(
    "options, message",
    [
        ({"runs": 0}, "runs must be 1 or more, got 0"),
        ({"runs": 2.5}, "runs must be a whole number"),
        ({"duration_s": -1}, "duration_s must be 0 or more"),
        ({"max_duration_s": 0}, "max_duration_s must be above 0"),
        ({"timeout_s": float("nan")}, "timeout_s must be a finite number, above 0"),
        ({"threads": 0}, "threads must be 1 or more"),
        ({"batch_sizes": [1, 1]}, "distinct"),
        ({"batch_sizes": [0]}, "at least 1"),
        ({"batch_sizes": ["a"]}, "whole numbers"),
        ({"memory_limit_mb": 0}, "memory_limit_mb"),
        ({"latency_budget_ms": 0}, "latency_budget_ms must be above 0"),
        ({"runtime": "openvino"}, "unknown runtime 'openvino'"),
        ({"seed": True}, "seed must be a whole number"),
    ],
)
def test_bad_values_are_refused(options, message):
    with pytest.raises(UserError, match=message):
        BenchmarkSpec(artifact="m.onnx", **options)


def test_unknown_job_options_are_named():
    with pytest.raises(UserError, match="unknown benchmark option\\(s\\) iterations"):
        BenchmarkSpec.from_dict({"artifact": "m.onnx", "iterations": 5})
    with pytest.raises(UserError, match="needs an 'artifact'"):
        BenchmarkSpec.from_dict({"runs": 5})


def test_threads_resolve_to_a_count():
    from edgeopt_agent.bench.spec import available_cpus

    assert BenchmarkSpec(artifact="m.onnx", threads=1).resolved_threads() == 1
    # more threads than CPUs would only share cores: capped (the result says so, test_runtime_fallback.py)
    assert BenchmarkSpec(artifact="m.onnx", threads=available_cpus() + 1).resolved_threads() == available_cpus()
    assert BenchmarkSpec(artifact="m.onnx").resolved_threads() >= 1
