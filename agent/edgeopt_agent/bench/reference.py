"""Reference outputs: did the board compute what the host's FP32 artifact computes?

A job may carry a `reference` (see edgeopt_agent.wire.check_reference): a seed, a number of
samples and, for each output, a few of the FP32 artifact's values on those samples and the
tolerances the conversion's verdicts allow. The board makes the same inputs from the seed and
the input description (`reference_feeds`, used on both sides), runs its artifact, reduces its
outputs the same way (`reduce_output`) and compares (`compare`). numpy only: this runs on boards.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from ..runners.base import TensorInfo
from ..runners.errors import InputError

OUTPUT_MISMATCH = "output_mismatch"
MAX_VALUES = 512  # per output and sample: what the job carries of an output, taken at a stride
MAX_ARGMAX_ROWS = 256  # per output and sample


def reference_feeds(infos: Sequence[TensorInfo], descriptions: Optional[Sequence[Mapping[str, Any]]],
                    seed: int, sample: int, ranges: Optional[Mapping[str, Sequence[float]]] = None) -> Dict[str, np.ndarray]:
    """The inputs of one reference sample, the same on every machine for the same description.

    Each input is drawn from its own generator (seed, sample, its place in the description), so
    an artifact that orders or names its inputs differently (a TFLite file) gets the same data.
    Floats are uniform in [0, 1), or in `ranges[name]` (by the described name: the range a
    quantized input represents). A quantized input (a full-integer TFLite's int8 image) gets the
    same real values as the FP32 artifact's float input, whatever dtype the description gives it:
    the runner quantizes them with the input's own scale and zero point. Other integers are 0 or
    1, booleans coin flips; a described constant is that value.
    """
    listed = list(descriptions or ())
    if not listed:
        listed = [{"name": i.name, "shape": [d if TensorInfo.is_fixed(d) else 1 for d in i.shape],
                   "dtype": i.dtype} for i in infos]
    feeds = {}
    for position, info in enumerate(infos):
        index = _describing(info, position, listed, len(infos))
        description = listed[index]
        shape = tuple(int(d) for d in description["shape"])
        dtype = np.dtype(description.get("dtype") or info.dtype)
        if info.quantization is not None:
            dtype = np.dtype(np.float32)  # real values, quantized by the runner as the artifact says
        elif np.dtype(info.dtype).kind != dtype.kind:
            dtype = np.dtype(info.dtype)
        if "value" in description:
            feeds[info.name] = np.full(shape, description["value"], dtype=dtype)
            continue
        rng = np.random.default_rng([int(seed), int(sample), index])
        if dtype.kind == "f":
            low, high = (ranges or {}).get(description["name"], (0.0, 1.0))
            values = np.float32(low) + np.float32(high - low) * rng.random(shape, dtype=np.float32)
            feeds[info.name] = values.astype(dtype)
        elif dtype.kind in "iu":
            feeds[info.name] = rng.integers(0, 2, size=shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[info.name] = rng.random(shape) < 0.5
        else:
            raise InputError(f"cannot make reference data for input '{info.name}' of type {dtype}")
    return feeds


def _describing(info: TensorInfo, position: int, listed: List[Mapping[str, Any]], count: int) -> int:
    for index, description in enumerate(listed):
        if info.name in (description.get("name"), description.get("alias")):
            return index
    if len(listed) == count:
        return position
    raise InputError(f"the reference inputs do not describe the artifact's input '{info.name}'")


def reduce_output(value: np.ndarray, stride: int, count: int) -> np.ndarray:
    """`count` float64 values of an output, every `stride`-th of it flattened."""
    return np.asarray(value, dtype=np.float64).reshape(-1)[::stride][:count]


def row_argmax(value: np.ndarray, rows: int = MAX_ARGMAX_ROWS) -> List[int]:
    """Argmax along the last axis for the first `rows` rows (class scores: one row per sample)."""
    array = np.asarray(value)
    if array.ndim == 0 or array.shape[-1] < 2:
        return []
    return [int(i) for i in array.reshape(-1, array.shape[-1])[:rows].argmax(axis=1)]


def plan_stride(size: int, limit: int = MAX_VALUES) -> int:
    """The stride that keeps at most `limit` values of an output of `size` elements."""
    return max(1, -(-size // limit))


def run_reference(runner, reference: Mapping[str, Any], descriptions) -> Dict[str, Any]:
    """Run the reference samples through a loaded runner and compare with the reference outputs."""
    infos = runner.inputs()
    names = [o.name for o in runner.outputs()]
    produced: List[Dict[str, np.ndarray]] = []
    for sample in range(int(reference["samples"])):
        produced.append(runner.infer(reference_feeds(infos, descriptions, reference["seed"], sample,
                                                     reference.get("ranges"))))
    return compare(reference, produced, names)


def compare(reference: Mapping[str, Any], produced: Sequence[Mapping[str, np.ndarray]],
            names: Sequence[str]) -> Dict[str, Any]:
    """Per output: cosine, max error and argmax agreement against the reference, and the verdict."""
    checks = []
    for position, expected in enumerate(reference["outputs"]):
        name = expected["name"] if expected["name"] in names else (
            names[position] if len(names) == len(reference["outputs"]) else None)
        if name is None:
            checks.append({"name": expected["name"], "ok": False, "reason": "the artifact has no such output"})
            continue
        checks.append(_compare_output(expected, [outputs[name] for outputs in produced]))
    mismatched = [c for c in checks if not c["ok"]]
    return {
        "ok": not mismatched,
        "samples": int(reference["samples"]),
        "outputs": checks,
        "reason": None if not mismatched else OUTPUT_MISMATCH + ": " + "; ".join(_describe(c) for c in mismatched),
    }


def _compare_output(expected: Mapping[str, Any], values: Sequence[np.ndarray]) -> Dict[str, Any]:
    stride = int(expected.get("stride", 1))
    want = np.concatenate([np.asarray(v, dtype=np.float64) for v in expected["values"]])
    got = np.concatenate([reduce_output(v, stride, len(w)) for v, w in zip(values, expected["values"])])
    tolerance = dict(expected.get("tolerance") or {})
    check: Dict[str, Any] = {"name": expected["name"], "tolerance": tolerance}
    if got.shape != want.shape:
        check.update(ok=False, reason=f"{got.size} values where the reference has {want.size}")
        return check
    finite = bool(np.all(np.isfinite(got)))
    check["cosine"] = round(_cosine(want, got), 6) if finite else None
    check["max_abs_error"] = round(float(np.max(np.abs(want - got))), 6) if finite and got.size else None
    agreement = None
    if expected.get("argmax"):
        pairs = [(a, b) for ref, v in zip(expected["argmax"], values) for a, b in zip(ref, row_argmax(v, len(ref)))]
        agreement = round(sum(a == b for a, b in pairs) / len(pairs), 6) if pairs else None
    check["argmax_agreement"] = agreement
    failures = []
    if not finite:
        failures.append("non-finite values")
    if finite and tolerance.get("min_cosine") is not None and check["cosine"] < tolerance["min_cosine"]:
        failures.append(f"cosine {check['cosine']:.4f} < {tolerance['min_cosine']:.4f}")
    if finite and tolerance.get("max_abs_error") is not None and check["max_abs_error"] > tolerance["max_abs_error"]:
        failures.append(f"max error {check['max_abs_error']:.4g} > {tolerance['max_abs_error']:.4g}")
    minimum = tolerance.get("min_argmax_agreement")
    if minimum is not None and agreement is not None and agreement < minimum:
        failures.append(f"argmax agreement {agreement:.2f} < {minimum:.2f}")
    check["ok"] = not failures
    if failures:
        check["reason"] = ", ".join(failures)
    return check


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    norms = float(np.linalg.norm(a) * np.linalg.norm(b))
    if norms == 0.0:
        return 1.0 if not np.any(a) and not np.any(b) else 0.0
    return float(np.dot(a, b) / norms)


def _describe(check: Mapping[str, Any]) -> str:
    return f"{check['name']} ({check.get('reason')})"
