"""How a TensorRT engine is built, defined once: the board reads each setting from here or from the
job's benchmark spec, and the engine cache's key is made of them (runner.py).

    precision      the job's `precision` (None: the model's own; INT8 from a QDQ ONNX only)
    max_batch      the largest of the job's `batch_sizes` (1 without them)
    input_shapes   the job's `inputs` shapes: the optimization profile's optimum for dynamic axes
    input_ranges   their `min_shape`/`max_shape`, where the conversion fed several sizes
    workspace_mb   the builder's workspace, DEFAULT_WORKSPACE_MB (no job sets it)
    cache_dir      where engines are kept: the job's `engine_cache_dir`, which the agent puts under its data dir
"""
from __future__ import annotations

from typing import Any, Dict

DEFAULT_WORKSPACE_MB = 1024


def spec_options(spec: Any) -> Dict[str, Any]:
    """What the TensorRT runner takes from a benchmark spec (the row's `spec_options`)."""
    ranges = {d["name"]: [list(d.get("min_shape", d["shape"])), list(d.get("max_shape", d["shape"]))]
              for d in spec.inputs or () if "min_shape" in d or "max_shape" in d}
    return {
        "precision": spec.precision,
        "cache_dir": spec.engine_cache_dir,
        "max_batch": max(spec.batch_sizes or (1,)),
        "input_shapes": {d["name"]: list(d["shape"]) for d in spec.inputs or ()} or None,
        **({"input_ranges": ranges} if ranges else {}),
    }
