"""The benchmark engine: measure one artifact in an isolated child process.

    from edgeopt_agent.bench import BenchmarkSpec, run_benchmark
    result = run_benchmark(BenchmarkSpec(artifact="model.onnx", runs=200), sensors=suite)

Importing this package loads neither numpy nor a runtime: those live in the child.
"""
from __future__ import annotations

from .engine import ENERGY_KEYS, NO_SENSORS, run_benchmark
from .failures import BAD_ARTIFACT, BAD_INPUT, CRASH, OUT_OF_MEMORY, RUNTIME_ERROR, TIMEOUT, UNSUPPORTED
from .spec import BenchmarkSpec, available_cpus

__all__ = [
    "BAD_ARTIFACT",
    "BAD_INPUT",
    "BenchmarkSpec",
    "CRASH",
    "ENERGY_KEYS",
    "NO_SENSORS",
    "OUT_OF_MEMORY",
    "RUNTIME_ERROR",
    "TIMEOUT",
    "UNSUPPORTED",
    "available_cpus",
    "run_benchmark",
]
