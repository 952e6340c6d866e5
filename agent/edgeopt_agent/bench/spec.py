"""What to measure and within which limits: a frozen, validated benchmark request."""
from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any, Dict, Mapping, Optional

from .. import runtimes
from ..errors import UserError
from ..wire.bench_options import BenchOptions, as_json


@dataclass(frozen=True)
class BenchmarkSpec(BenchOptions):
    """One benchmark of one artifact: the benchmark options (edgeopt_agent.wire.BenchOptions, each
    defined there once, with the phases they bound) and what the board adds itself.

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

    What the board adds: artifact, the file to run; engine_cache_dir: where built engines are kept
    (the agent passes one under its data dir; None: edgeopt_agent.runners.engine_cache.default_cache_dir());
    bundle_dir: where a multi-file artifact (an ncnn bundle) is extracted while it loads (the agent
    passes one under its data dir, swept of what killed children left: edgeopt_agent.extraction_folders;
    None: the system's temporary folder).
    """

    artifact: str = ""
    engine_cache_dir: Optional[str] = None
    bundle_dir: Optional[str] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.artifact:
            raise UserError("a benchmark needs an 'artifact'")
        object.__setattr__(self, "artifact", str(self.artifact))
        for name in ("engine_cache_dir", "bundle_dir"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, str(getattr(self, name)))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "BenchmarkSpec":
        """From a job's options; unknown keys are an error, not silently ignored."""
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise UserError(f"unknown benchmark option(s) {', '.join(unknown)}; known: {', '.join(known)}")
        if "artifact" not in data:
            raise UserError("a benchmark needs an 'artifact'")
        return cls(**data)

    def to_dict(self) -> Dict[str, Any]:
        return {f.name: as_json(getattr(self, f.name)) for f in fields(self)}

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
