"""What to measure and within which limits: a frozen, validated benchmark request."""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields
from typing import Any, Dict, Mapping, Optional, Tuple

from ..errors import UserError
from .. import runtimes
from ..runtimes import PRECISIONS
from ..values import is_int, is_number
from ..wire import check_input_description, check_reference


@dataclass(frozen=True)
class BenchmarkSpec:
    """One benchmark of one artifact.

    Phases: load, one cold inference, warm-up until both `warmup_runs` and `warmup_s` are met,
    then the measured phase until both `runs` and `duration_s` are met; each of the last two
    phases stops at `max_duration_s` whatever it has reached.

    batch_sizes: None runs the model's declared shape (1 where the batch axis is dynamic);
    several sizes sweep them, one measured phase each.
    idle_s: idle power baseline taken before the child starts when sensors are given.
    timeout_s bounds the whole child process; memory_limit_mb is its address-space limit
    (RLIMIT_AS: virtual memory, larger than RSS; applied after the runtime is imported; not
    applied to GPU runtimes, whose CUDA reserves more address space than any useful limit).
    precision: what runtimes that build an engine on the board ("tensorrt",
    "onnxruntime-tensorrt") build at. None: "tensorrt" builds at the model's own precision
    (INT8 for a QDQ model); "onnxruntime-tensorrt" enables neither FP16 nor INT8.
    fallback_runtimes: runtimes to run the artifact with, in order, when `runtime` is not available
    on this machine (not installed, no GPU); the result names the one used and why (`fallback`).
    None: no fallback, a missing runtime is an error. A runtime that does not build an engine
    runs the artifact at its own precision, so `precision` is dropped when falling back to one.
    threads: capped at the CPUs this process may use (the result says so: `threads_capped`).
    reference: outputs of the host's FP32 artifact on seeded inputs, with tolerances (see
    edgeopt_agent.wire.check_reference); the child checks its own outputs against them.
    profile: after every batch size is measured, run the first one again under the runtime's
    own per-op profiler (onnxruntime's; TensorRT's IProfiler; other runtimes say why they
    cannot) and report it as "op_profile" (edgeopt_agent.op_profile).
    engine_cache_dir: where built engines are kept (the agent passes one under its data dir;
    None: edgeopt_agent.runners.engine_cache.default_cache_dir()).
    bundle_dir: where a multi-file artifact (an ncnn bundle) is extracted while it loads (the agent
    passes one under its data dir, swept of what killed children left: edgeopt_agent.extraction_folders;
    None: the system's temporary folder).
    """

    artifact: str
    runs: int = 100
    duration_s: float = 1.0
    warmup_runs: int = 10
    warmup_s: float = 0.2
    max_duration_s: float = 60.0
    threads: Optional[int] = None
    batch_sizes: Optional[Tuple[int, ...]] = None
    latency_budget_ms: Optional[float] = None
    input_file: Optional[str] = None
    seed: int = 0
    timeout_s: float = 300.0
    memory_limit_mb: Optional[int] = None
    runtime: Optional[str] = None
    idle_s: float = 1.0
    precision: Optional[str] = None
    engine_cache_dir: Optional[str] = None
    bundle_dir: Optional[str] = None
    profile: bool = False
    inputs: Optional[Tuple[Dict[str, Any], ...]] = None
    reference: Optional[Dict[str, Any]] = None
    fallback_runtimes: Optional[Tuple[str, ...]] = None

    def __post_init__(self) -> None:
        if self.reference is not None:
            object.__setattr__(self, "reference", check_reference(self.reference))
        if self.inputs is not None:
            object.__setattr__(self, "inputs", check_input_description(self.inputs))
        object.__setattr__(self, "artifact", str(self.artifact))
        if self.input_file is not None:
            object.__setattr__(self, "input_file", str(self.input_file))
        for name in ("engine_cache_dir", "bundle_dir"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, str(getattr(self, name)))
        if self.batch_sizes is not None:
            if isinstance(self.batch_sizes, int) or not all(is_int(b) for b in self.batch_sizes):
                raise UserError(f"batch sizes must be a list of whole numbers, got {self.batch_sizes!r}")
            sizes = tuple(int(b) for b in self.batch_sizes)
            if not sizes or min(sizes) < 1 or len(set(sizes)) != len(sizes):
                raise UserError(f"batch sizes must be distinct and at least 1, got {list(sizes)}")
            object.__setattr__(self, "batch_sizes", sizes)
        _at_least(self, "runs", 1, whole=True)
        _at_least(self, "warmup_runs", 0, whole=True)
        _at_least(self, "duration_s", 0)
        _at_least(self, "warmup_s", 0)
        _at_least(self, "idle_s", 0)
        _positive(self, "max_duration_s")
        _positive(self, "timeout_s")
        if self.threads is not None:
            _at_least(self, "threads", 1, whole=True)
        if self.memory_limit_mb is not None:
            _at_least(self, "memory_limit_mb", 1, whole=True)
        if self.latency_budget_ms is not None:
            _positive(self, "latency_budget_ms")
        if not isinstance(self.profile, bool):
            raise UserError(f"profile must be true or false, got {self.profile!r}")
        if not is_int(self.seed):
            raise UserError(f"seed must be a whole number, got {self.seed!r}")
        known, engines = runtimes.RUNTIMES, runtimes.ENGINE_RUNTIMES
        if self.runtime is not None and self.runtime not in known:
            raise UserError(f"unknown runtime '{self.runtime}'; available: {', '.join(known)}")
        if self.fallback_runtimes is not None:
            if isinstance(self.fallback_runtimes, str) or not all(isinstance(r, str) for r in self.fallback_runtimes):
                raise UserError(f"fallback_runtimes must be a list of runtime names, got {self.fallback_runtimes!r}")
            names = tuple(self.fallback_runtimes)
            unknown = [r for r in names if r not in known]
            if unknown:
                raise UserError(f"unknown fallback runtime '{unknown[0]}'; available: {', '.join(known)}")
            if len(set(names)) != len(names) or self.runtime in names:
                raise UserError(f"fallback_runtimes must be distinct and differ from the runtime, got {list(names)}")
            object.__setattr__(self, "fallback_runtimes", names or None)
        if self.precision is not None and self.precision not in PRECISIONS:
            raise UserError(f"unknown precision '{self.precision}'; available: {', '.join(PRECISIONS)}")
        if self.precision is not None and self.runtime is not None and self.runtime not in engines:
            raise UserError(
                f"precision applies to runtimes that build an engine on the board ({', '.join(engines)}), "
                f"not to '{self.runtime}'"
            )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "BenchmarkSpec":
        """From a job's options; unknown keys are an error, not silently ignored."""
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise UserError(f"unknown benchmark option(s) {', '.join(unknown)}; known: {', '.join(known)}")
        if "artifact" not in data:
            raise UserError("a benchmark needs an 'artifact'")
        values = dict(data)
        if values.get("batch_sizes") is not None and not isinstance(values["batch_sizes"], (int, str)):
            values["batch_sizes"] = tuple(values["batch_sizes"])
        return cls(**values)

    def to_dict(self) -> Dict[str, Any]:
        data = asdict(self)
        if self.batch_sizes is not None:
            data["batch_sizes"] = list(self.batch_sizes)
        if self.inputs is not None:
            data["inputs"] = [dict(item) for item in self.inputs]
        if self.fallback_runtimes is not None:
            data["fallback_runtimes"] = list(self.fallback_runtimes)
        return data

    def resolved_threads(self) -> int:
        """`threads`, at most the CPUs this process may use (more would only make the threads share
        cores); every such CPU when not given."""
        cpus = available_cpus()
        return min(self.threads, cpus) if self.threads else cpus

    def runner_options(self) -> Dict[str, Any]:
        """What open_runner takes beyond the path, threads and runtime, for this spec's runtime (its
        row's `spec_options` say which)."""
        row = runtimes.BY_NAME.get(self.runtime) if self.runtime is not None else None
        if row is None or row.spec_options is None:
            return {}
        return row.spec_options(self)


def available_cpus() -> int:
    """CPUs this process may run on (respects taskset/cgroup affinity where the OS exposes it)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _at_least(spec: BenchmarkSpec, name: str, minimum: float, whole: bool = False) -> None:
    value = getattr(spec, name)
    ok = is_int(value) if whole else is_number(value)
    if not ok or value < minimum:
        kind = "a whole number" if whole else "a number"
        raise UserError(f"{name} must be {kind} of at least {minimum}, got {value!r}")


def _positive(spec: BenchmarkSpec, name: str) -> None:
    value = getattr(spec, name)
    if not is_number(value) or value <= 0:
        raise UserError(f"{name} must be a number above 0, got {value!r}")
