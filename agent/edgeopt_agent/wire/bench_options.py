"""The `bench` object of a job: the benchmark options it may set, and the checks of its input
descriptions and reference outputs."""
from __future__ import annotations

from typing import Any, Dict, Tuple

from ..errors import UserError
from ..values import is_int, is_number
from .errors import ProtocolError

# Benchmark options a job may set, with their JSON types; they map one to one onto the fields of
# edgeopt_agent.bench.BenchmarkSpec (the agent fills in the artifact itself).
BENCH_OPTIONS: Dict[str, Tuple[str, bool]] = {
    # name: (kind, nullable)
    "runs": ("positive", False),
    "duration_s": ("number", False),
    "warmup_runs": ("count", False),
    "warmup_s": ("number", False),
    "max_duration_s": ("number", False),
    "threads": ("positive", True),
    "batch_sizes": ("batch_sizes", True),
    "latency_budget_ms": ("number", True),
    "input_file": ("path", True),
    "seed": ("integer", False),
    "timeout_s": ("number", False),
    "memory_limit_mb": ("positive", True),
    "runtime": ("name", True),
    "precision": ("name", True),  # the precision a TensorRT engine is built at on the board
    "fallback_runtimes": ("names", True),  # runtimes to use, in order, when `runtime` is not available here
    "idle_s": ("number", False),
    "profile": ("flag", False),  # per-op profile from the runtime's own profiler, published with the result
    "inputs": ("inputs", True),  # how to feed each input: see check_input_description
    "reference": ("reference", True),  # outputs the board's must match: see check_reference
}

MAX_FALLBACK_RUNTIMES = 8
INPUT_DESCRIPTION_KEYS = ("name", "shape", "dtype", "value", "alias", "min_shape", "max_shape")
MAX_DESCRIBED_INPUTS = 256
MAX_INPUT_RANK = 16
MAX_INPUT_ELEMENTS = 2**28  # per input: a job cannot ask the board to fill more than this


def check_input_description(value: Any) -> Tuple[Dict[str, Any], ...]:
    """The `inputs` bench option: one object per model input, saying how the board feeds it.

    {"name": the artifact's input name, "shape": [concrete dims] (fills the dims the artifact
    leaves dynamic), "dtype": optional, "value": optional constant every feed holds (a sample
    rate), "alias": optional name the model used for it (an input file may use either),
    "min_shape"/"max_shape": optional, the smallest and largest sizes the conversion fed (a
    TensorRT optimization profile spans them, `shape` being its optimum)}.
    Raises UserError with the first problem.
    """
    if not isinstance(value, (list, tuple)) or len(value) > MAX_DESCRIBED_INPUTS:
        raise UserError(f"'inputs' must be a list of at most {MAX_DESCRIBED_INPUTS} input descriptions, got {value!r}")
    result = []
    for number, item in enumerate(value, start=1):
        if not isinstance(item, dict):
            raise UserError(f"'inputs' #{number} must be an object, got {item!r}")
        unknown = sorted(set(item) - set(INPUT_DESCRIPTION_KEYS))
        if unknown:
            raise UserError(f"'inputs' #{number} has unknown key(s) {', '.join(unknown)}; "
                            f"known: {', '.join(INPUT_DESCRIPTION_KEYS)}")
        for key in ("name", "dtype", "alias"):
            if key in item and (not isinstance(item[key], str) or not 1 <= len(item[key]) <= 256):
                raise UserError(f"'inputs' #{number} '{key}' must be a string of 1-256 characters, got {item.get(key)!r}")
        if "name" not in item:
            raise UserError(f"'inputs' #{number} needs a 'name'")
        shape = item.get("shape")
        if not isinstance(shape, (list, tuple)) or len(shape) > MAX_INPUT_RANK or \
                not all(is_int(d) and 0 <= d <= 2**31 for d in shape):
            raise UserError(f"'inputs' '{item['name']}' needs a 'shape': a list of at most {MAX_INPUT_RANK} "
                            f"non-negative integers, got {shape!r}")
        elements = 1
        for dim in shape:
            elements *= dim
        if elements > MAX_INPUT_ELEMENTS:
            raise UserError(f"'inputs' '{item['name']}' shape {list(shape)} holds more than {MAX_INPUT_ELEMENTS} elements")
        if "value" in item and not (isinstance(item["value"], bool) or is_number(item["value"])):
            raise UserError(f"'inputs' '{item['name']}' 'value' must be a number or a boolean, got {item['value']!r}")
        checked = {**item, "shape": [int(d) for d in shape]}
        for key, fits in (("min_shape", lambda bound, d: bound <= d), ("max_shape", lambda bound, d: bound >= d)):
            if key not in item:
                continue
            bound = item[key]
            if not isinstance(bound, (list, tuple)) or len(bound) != len(shape) or \
                    not all(is_int(b) and 0 <= b <= 2**31 and fits(b, d) for b, d in zip(bound, shape)):
                raise UserError(f"'inputs' '{item['name']}' '{key}' must list {len(shape)} integers bounding its "
                                f"shape {list(shape)}, got {bound!r}")
            checked[key] = [int(b) for b in bound]
        result.append(checked)
    names = [i["name"] for i in result]
    if len(set(names)) != len(names):
        raise UserError(f"'inputs' names an input twice: {names}")
    return tuple(result)


MAX_REFERENCE_SAMPLES = 8
MAX_REFERENCE_OUTPUTS = 64
MAX_REFERENCE_VALUES = 4096  # per output and sample (edgeopt sends at most 512)
REFERENCE_TOLERANCES = ("min_cosine", "max_abs_error", "min_argmax_agreement")


def check_reference(value: Any) -> Dict[str, Any]:
    """The `reference` bench option: what the host's FP32 artifact computed on a few seeded inputs.

    {"seed": int, "samples": 1-8, "ranges": optional {input name: [low, high]} of the generated
    floats (default [0, 1)), "outputs": [{"name", "stride": every stride-th value of the
    flattened output, "values": [[floats] per sample], "argmax": optional [[ints] per sample]
    (last-axis argmax per row), "tolerance": {"min_cosine", "max_abs_error",
    "min_argmax_agreement"} (each a number or null)}]}. Raises UserError with the first problem.
    """
    if not isinstance(value, dict) or set(value) - {"seed", "samples", "outputs", "ranges"}:
        raise UserError(f"'reference' must be an object with seed, samples, outputs and ranges, got {_short(value)}")
    ranges = value.get("ranges") or {}
    if not isinstance(ranges, dict) or len(ranges) > MAX_DESCRIBED_INPUTS or not all(
            isinstance(v, list) and len(v) == 2 and all(is_number(x) for x in v) and v[0] < v[1]
            for v in ranges.values()):
        raise UserError("'reference' ranges must map input names to [low, high] with low < high")
    samples = value.get("samples")
    if not is_int(value.get("seed")) or not is_int(samples) or not 1 <= samples <= MAX_REFERENCE_SAMPLES:
        raise UserError(f"'reference' needs an integer seed and 1-{MAX_REFERENCE_SAMPLES} samples")
    outputs = value.get("outputs")
    if not isinstance(outputs, list) or not 1 <= len(outputs) <= MAX_REFERENCE_OUTPUTS:
        raise UserError(f"'reference' outputs must be a list of 1-{MAX_REFERENCE_OUTPUTS} objects")
    for item in outputs:
        where = f"'reference' output {_short(item.get('name') if isinstance(item, dict) else item)}"
        if not isinstance(item, dict) or set(item) - {"name", "stride", "values", "argmax", "tolerance"} or \
                not isinstance(item.get("name"), str) or not (is_int(item.get("stride")) and item["stride"] >= 1):
            raise UserError(f"{where} needs a name, a stride of at least 1 and values, and nothing else")
        per_sample = item.get("values")
        if not isinstance(per_sample, list) or len(per_sample) != samples or not all(
                isinstance(v, list) and len(v) <= MAX_REFERENCE_VALUES and all(is_number(x) for x in v)
                for v in per_sample):
            raise UserError(f"{where}: values must hold one list of at most {MAX_REFERENCE_VALUES} numbers per sample")
        argmax = item.get("argmax")
        if argmax is not None and (not isinstance(argmax, list) or len(argmax) != samples or not all(
                isinstance(v, list) and len(v) <= MAX_REFERENCE_VALUES and all(is_int(x) for x in v) for v in argmax)):
            raise UserError(f"{where}: argmax must hold one list of integers per sample")
        tolerance = item.get("tolerance") or {}
        if not isinstance(tolerance, dict) or set(tolerance) - set(REFERENCE_TOLERANCES) or \
                not all(v is None or is_number(v) for v in tolerance.values()):
            raise UserError(f"{where}: tolerance may hold {', '.join(REFERENCE_TOLERANCES)}, each a number or null")
    return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def parse_bench(data: Any) -> Dict[str, Any]:
    if not isinstance(data, dict):
        raise ProtocolError("job 'bench' must be an object of benchmark options")
    unknown = sorted(set(data) - set(BENCH_OPTIONS))
    if unknown:
        raise ProtocolError(
            f"unknown bench option(s): {', '.join(unknown)}; known: {', '.join(sorted(BENCH_OPTIONS))}"
        )
    options: Dict[str, Any] = {}
    for name, value in data.items():
        kind, nullable = BENCH_OPTIONS[name]
        if value is None:
            if not nullable:
                raise ProtocolError(f"bench option '{name}' may not be null")
            options[name] = None
            continue
        options[name] = _check_option(name, kind, value)
    return options


def _check_option(name: str, kind: str, value: Any) -> Any:
    if kind == "integer":
        if not is_int(value):
            raise ProtocolError(f"bench option '{name}' must be an integer, got {value!r}")
    elif kind == "count":
        if not is_int(value) or value < 0:
            raise ProtocolError(f"bench option '{name}' must be a non-negative integer, got {value!r}")
    elif kind == "positive":
        if not is_int(value) or value < 1:
            raise ProtocolError(f"bench option '{name}' must be a positive integer, got {value!r}")
    elif kind == "number":
        if not is_number(value) or value < 0:
            raise ProtocolError(f"bench option '{name}' must be a non-negative number, got {value!r}")
    elif kind == "batch_sizes":
        if not isinstance(value, list) or not value or not all(is_int(v) and v >= 1 for v in value):
            raise ProtocolError(f"bench option '{name}' must be a non-empty list of positive integers, got {value!r}")
        return tuple(value)
    elif kind == "flag":
        if not isinstance(value, bool):
            raise ProtocolError(f"bench option '{name}' must be true or false, got {value!r}")
    elif kind == "inputs":
        try:
            return [dict(item) for item in check_input_description(value)]
        except UserError as exc:
            raise ProtocolError(f"bench option {exc}") from None
    elif kind == "reference":
        try:
            return check_reference(value)
        except UserError as exc:
            raise ProtocolError(f"bench option {exc}") from None
    elif kind == "names":
        if not isinstance(value, list) or not 1 <= len(value) <= MAX_FALLBACK_RUNTIMES or \
                not all(isinstance(v, str) and 1 <= len(v) <= 64 for v in value):
            raise ProtocolError(f"bench option '{name}' must be a list of 1-{MAX_FALLBACK_RUNTIMES} runtime names, "
                                f"got {_short(value)}")
        return list(value)
    elif kind in ("path", "name"):
        if not isinstance(value, str) or not value:
            raise ProtocolError(f"bench option '{name}' must be a non-empty string, got {value!r}")
    return value
