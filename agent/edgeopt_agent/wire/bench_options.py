"""The benchmark options, each written once (`BenchOptions`): `edgeopt bench` and `edgeopt deploy`
flags, the `bench` object of a job and its checks on the board, the board configuration a manifest
plans, and the benchmark spec the board runs (edgeopt_agent.bench.BenchmarkSpec adds the artifact)
are generated from these fields. Also the checks of input descriptions and reference outputs."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from ..errors import UserError
from ..runtimes import PRECISIONS
from ..values import is_int, is_number
from .errors import ProtocolError
from .options import OptionSet, Spec, option

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


def _runtimes() -> Tuple[str, ...]:
    from ..runtimes import RUNTIMES  # the table as it is when asked: a row added later is seen

    return RUNTIMES


def _engine_runtimes() -> Tuple[str, ...]:
    from ..runtimes import ENGINE_RUNTIMES

    return ENGINE_RUNTIMES


def _batch_sizes(value: Any) -> Tuple[int, ...]:
    """The CLI's "1,2,4,8", or a list of whole numbers: distinct, each at least 1."""
    if isinstance(value, str):
        try:
            sizes = [int(part) for part in value.split(",") if part.strip()]
        except ValueError:
            sizes = []
        if not sizes:
            raise UserError(f"--batch takes whole numbers separated by commas, e.g. 1,2,4,8; got '{value}'")
        value = sizes
    if not isinstance(value, (list, tuple)) or not all(is_int(b) for b in value):
        raise UserError(f"'batch_sizes' must be a list of whole numbers, got {_short(value)}")
    sizes = tuple(int(b) for b in value)
    if not sizes or min(sizes) < 1 or len(set(sizes)) != len(sizes):
        raise UserError(f"'batch_sizes' must be distinct and at least 1, got {list(sizes)}")
    return sizes


def _runtime_names(value: Any) -> Tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise UserError(f"'fallback_runtimes' must be a list of runtime names, got {_short(value)}")
    if not 1 <= len(value) <= MAX_FALLBACK_RUNTIMES or not all(1 <= len(v) <= 64 for v in value):
        raise UserError(f"'fallback_runtimes' must list 1-{MAX_FALLBACK_RUNTIMES} runtime names, got {_short(value)}")
    known = _runtimes()
    unknown = [r for r in value if r not in known]
    if unknown:
        raise UserError(f"unknown fallback runtime '{unknown[0]}'; available: {', '.join(known)}")
    return tuple(value)


@dataclass(frozen=True)
class BenchOptions(OptionSet):
    """Every benchmark option a job, `edgeopt bench` or `edgeopt deploy` may set, once.

    Phases: load, one cold inference, warm-up until both `warmup_runs` and `warmup_s` are met,
    then the measured phase until both `runs` and `duration_s` are met; each of the last two
    phases stops at `max_duration_s` whatever it has reached. An option whose default is None may
    be null in a job; the others may not.
    """

    named_by = "name"
    booleans = "true or false"

    runs: int = option(100, "Minimum number of measured runs.", kind=int, minimum=1)
    duration_s: float = option(1.0, "Minimum measured seconds.", kind=float, minimum=0, flags=("--duration",))
    warmup_runs: int = option(10, "Minimum warm-up runs.", kind=int, minimum=0, flags=("--warmup",))
    warmup_s: float = option(0.2, "Minimum warm-up seconds.", kind=float, minimum=0, cli=False)
    max_duration_s: float = option(60.0, "Cap on each of warm-up and measurement, seconds.", kind=float, minimum=0,
                                   above_minimum=True, flags=("--max-duration",))
    threads: Optional[int] = option(
        None, "Runtime threads (default: for a convert folder's artifact, its manifest's, from the profile; else "
              "every CPU the benchmark may use; at most those CPUs).", kind=int, minimum=1)
    batch_sizes: Optional[Tuple[int, ...]] = option(None, "Batch sizes to sweep, e.g. 1,2,4,8.", read=_batch_sizes,
                                                    flags=("--batch",), metavar="N[,N...]")
    latency_budget_ms: Optional[float] = option(None, "Report the largest batch whose p90 fits this budget.",
                                                kind=float, minimum=0, above_minimum=True)
    input_file: Optional[str] = option(
        None, "Input data: .npy (one input) or .npz keyed by input name, N samples on axis 0 (as convert reads it); "
              "a run feeds one batch of them (--batch sets its size). On a board: a file under the agent's "
              "data folder's models/.", kind=Path, flags=("--input",))
    seed: int = option(0, "Seed of the random input.", kind=int)
    timeout_s: float = option(300.0, "Kill a benchmark after this many seconds.", kind=float, minimum=0,
                              above_minimum=True, flags=("--timeout", "--bench-timeout"))
    memory_limit_mb: Optional[int] = option(None, "Address-space limit of the benchmark process (RLIMIT_AS; not "
                                                  "applied to GPU runtimes).", kind=int, minimum=1)
    runtime: Optional[str] = option(
        None, "Runtime (default: for a convert folder's artifact, its manifest's, falling back to the next the "
              "profile lists where the machine lacks it; else from the file type).", choices=_runtimes)
    precision: Optional[str] = option(
        None, "Precision a TensorRT engine is built at on the machine that runs it (runtimes tensorrt, "
              "onnxruntime-tensorrt; default: the manifest's).", choices=PRECISIONS)
    fallback_runtimes: Optional[Tuple[str, ...]] = option(
        None, "Runtimes to use, in order, when `runtime` is not available where the benchmark runs.",
        read=_runtime_names, cli=False)
    idle_s: float = option(1.0, "Idle power baseline before each run, seconds (with a power sensor).", kind=float,
                           minimum=0, flags=("--idle",))
    profile: bool = option(False, "Per-op profile from the runtime's own profiler, published with the result.",
                           kind=bool, cli=False)
    inputs: Optional[Tuple[Dict[str, Any], ...]] = option(
        None, "How to feed each input (see check_input_description).", read=check_input_description, cli=False)
    reference: Optional[Dict[str, Any]] = option(
        None, "Outputs the board's must match (see check_reference).", read=check_reference, cli=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_together()

    def _check_together(self) -> None:
        """What one option says about another: fallbacks differ from the runtime, an engine precision
        needs a runtime that builds an engine."""
        fallbacks = self.fallback_runtimes
        if fallbacks is not None and (len(set(fallbacks)) != len(fallbacks) or self.runtime in fallbacks):
            raise UserError(f"fallback_runtimes must be distinct and differ from the runtime, got {list(fallbacks)}")
        engines = _engine_runtimes()
        if self.precision is not None and self.runtime is not None and self.runtime not in engines:
            raise UserError(f"precision applies to runtimes that build an engine on the board ({', '.join(engines)}), "
                            f"not to '{self.runtime}'")

    @classmethod
    def what(cls) -> str:
        return "benchmark option"


# The options a job's `bench` may set (all of BenchOptions), by name.
BENCH_OPTIONS: Dict[str, Spec] = BenchOptions.specs()


def parse_bench(data: Any) -> Dict[str, Any]:
    """A job's `bench` object checked as BenchOptions checks it (a ProtocolError naming the first
    problem): the options it sets, as JSON values."""
    if not isinstance(data, dict):
        raise ProtocolError("job 'bench' must be an object of benchmark options")
    specs = BenchOptions.specs()
    unknown = sorted(set(data) - set(specs))
    if unknown:
        raise ProtocolError(f"unknown bench option(s): {', '.join(unknown)}; known: {', '.join(sorted(specs))}")
    options: Dict[str, Any] = {}
    for name, value in data.items():
        try:
            options[name] = BenchOptions.checked(name, value)
        except UserError as exc:
            raise ProtocolError(_on_the_wire(name, str(exc))) from None
    try:
        BenchOptions(**options)
    except UserError as exc:
        raise ProtocolError(f"bench options: {exc}") from None
    return {name: as_json(value) for name, value in options.items()}


def as_json(value: Any) -> Any:
    """An option's value as a job carries it: tuples as lists."""
    if isinstance(value, (list, tuple)):
        return [as_json(item) for item in value]
    if isinstance(value, dict):
        return {key: as_json(item) for key, item in value.items()}
    return value


def _on_the_wire(name: str, text: str) -> str:
    return f"bench option {text}" if text.startswith(f"'{name}'") else f"bench option '{name}': {text}"
