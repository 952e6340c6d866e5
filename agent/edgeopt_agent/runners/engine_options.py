"""What the runtimes that build an engine on the board take from a benchmark spec (their rows'
`spec_options`): the precision to build at, where to cache it, and the shapes to build it for."""
from __future__ import annotations

from typing import Any, Dict


def tensorrt(spec: Any) -> Dict[str, Any]:
    ranges = {d["name"]: [list(d.get("min_shape", d["shape"])), list(d.get("max_shape", d["shape"]))]
              for d in spec.inputs or () if "min_shape" in d or "max_shape" in d}
    return {
        "precision": spec.precision,
        "cache_dir": spec.engine_cache_dir,
        "max_batch": max(spec.batch_sizes or (1,)),
        "input_shapes": {d["name"]: list(d["shape"]) for d in spec.inputs or ()} or None,
        **({"input_ranges": ranges} if ranges else {}),
    }


def onnxruntime_tensorrt(spec: Any) -> Dict[str, Any]:
    return {"precision": spec.precision, "cache_dir": spec.engine_cache_dir}
