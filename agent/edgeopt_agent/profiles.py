"""Device profiles: one TOML data file per board, validated into frozen dataclasses.

Code asks a profile questions (which runtimes, which precisions, how many threads, which power
sensor); it never branches on a board's name. The data files live in the top-level
`device_profiles/` folder, which ships as the package `edgeopt_device_profiles`.
"""
from __future__ import annotations

import difflib
import importlib
import platform
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Tuple

from .errors import UserError
from .files import read_toml
from . import runtimes as runtime_table
from .runtimes import PRECISIONS

POWER_SENSORS = ("none", "rpi-pmic", "ina3221", "rapl", "nvml")
# Machine names that `platform.machine()` reports for each profile architecture.
_MACHINE_ALIASES = {"aarch64": ("aarch64", "arm64"), "x86_64": ("x86_64", "amd64")}


class ProfileError(UserError):
    """A device profile is unknown or its data file is invalid."""


@dataclass(frozen=True)
class Cpu:
    arch: str  # "aarch64" | "x86_64"
    model: str
    cores: int
    max_freq_mhz: int
    isa_features: Tuple[str, ...]
    cores_vary: bool = False  # a generic profile (x86-64): its boards' core counts differ, `cores` is an example

    def has(self, feature: str) -> bool:
        return feature in self.isa_features


@dataclass(frozen=True)
class Memory:
    size_gb: float
    bandwidth_gbps: Optional[float]


@dataclass(frozen=True)
class Accelerator:
    name: str
    kind: str  # "gpu" | "dla"
    precisions: Tuple[str, ...]
    notes: str = ""
    max_freq_mhz: Optional[float] = None  # the clock its [peak_tops] assume; a measurement at another clock scales by it


@dataclass(frozen=True)
class EfficiencyPrior:
    """How fast one runtime runs on the board against the roofline, fitted on cited published measurements
    (`scripts/bench_published.py` writes them from device_profiles/published/): measured / predicted over
    the whole graph, and per roof key ("fp32/depthwise", "overhead") where the measurements separate them.
    `median_error_pct` is the median absolute error of the priors' predictions on the held-out rows, the
    figure that says how far to trust them."""

    runtime: str
    precision: str
    factor: float
    rows: int  # published measurements of this board, runtime and precision the priors were fitted on
    heldout_rows: int
    median_error_pct: Optional[float]  # on the held-out rows; None: none held out
    kinds: Mapping[str, float] = field(default_factory=dict)
    sources: Tuple[str, ...] = ()  # ids in device_profiles/published/sources.csv
    # Amdahl's parallel share of a CPU runtime's work (n threads run 1 / ((1 - p) + p / n) times faster than
    # one), where its measurements ran at several thread counts; None: threads scale the peak linearly.
    parallel_fraction: Optional[float] = None


@dataclass(frozen=True)
class TransferCheck:
    """How well a runtime's latency at a precision it has no published measurement of is predicted from its
    priors at `base` times the speed-up other runtimes of the same processor show between the two
    (`cost/priors.py`, transferred estimates). `scripts/bench_published.py` checks it on the published rows of
    runtimes that do have their own, predicted as if they had not: `rows` on the train split, `heldout_rows`
    on the held-out one, whose median absolute error `median_error_pct` is the figure a reason quotes."""

    precision: str
    base: str
    rows: int
    heldout_rows: int
    median_error_pct: Optional[float]  # on the held-out rows; None: none held out
    runtimes: Tuple[str, ...] = ()  # the runtimes whose published rows were predicted so


@dataclass(frozen=True)
class Artifact:
    """One artifact a recipe produces: a format at a precision."""

    format: str
    precision: str

    @property
    def key(self) -> str:
        return f"{self.format}-{self.precision}"


@dataclass(frozen=True)
class Thermal:
    throttle_c: Optional[float]
    critical_c: Optional[float]


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    description: str
    cpu: Cpu
    memory: Memory
    accelerators: Tuple[Accelerator, ...]
    runtimes: Tuple[str, ...]
    recipe: Tuple[Artifact, ...]
    default_threads: int
    power_sensor: str
    thermal: Thermal
    peak_tops: Mapping[str, float] = field(default_factory=dict)
    notes: str = ""
    # The CPU's own peaks where [peak_tops] are an accelerator's (a Jetson): what CPU runtimes are timed with.
    cpu_peak_tops: Mapping[str, float] = field(default_factory=dict)
    priors: Tuple[EfficiencyPrior, ...] = ()
    transfers: Tuple[TransferCheck, ...] = ()

    def prior(self, runtime: str, precision: str) -> Optional[EfficiencyPrior]:
        """The published-evidence priors of a runtime at a precision on this board, if any were fitted."""
        return next((p for p in self.priors if p.runtime == runtime and p.precision == precision), None)

    def transfer(self, precision: str, base: str) -> Optional[TransferCheck]:
        """The check of estimates at `precision` transferred from `base` on this board, if one was made."""
        return next((t for t in self.transfers if t.precision == precision and t.base == base), None)

    @property
    def precisions(self) -> Tuple[str, ...]:
        return tuple(dict.fromkeys(a.precision for a in self.recipe))

    @property
    def formats(self) -> Tuple[str, ...]:
        return tuple(dict.fromkeys(a.format for a in self.recipe))

    @property
    def has_gpu(self) -> bool:
        return any(a.kind == "gpu" for a in self.accelerators)

    def accelerator_supports(self, precision: str) -> bool:
        return any(precision in a.precisions for a in self.accelerators)

    def matches_host(self, machine: Optional[str] = None) -> bool:
        """True when timings taken on this machine say something about the board."""
        machine = (machine or platform.machine()).lower()
        return machine in _MACHINE_ALIASES.get(self.cpu.arch, (self.cpu.arch,))


def _expect(table: Mapping[str, Any], key: str, kind, where: str):
    if key not in table:
        raise ProfileError(f"{where}: missing key '{key}'")
    value = table[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise ProfileError(f"{where}: '{key}' must be {getattr(kind, '__name__', kind)}, got {value!r}")
    return value


def _optional_float(table: Mapping[str, Any], key: str, where: str) -> Optional[float]:
    if table.get(key) is None:
        return None
    return _expect(table, key, float, where)


def _optional_bool(table: dict, key: str, where: str) -> bool:
    value = table.get(key, False)
    if not isinstance(value, bool):
        raise ProfileError(f"{where}: {key} must be true or false, not {value!r}")
    return value


def _one_of(value: str, allowed: Tuple[str, ...], what: str, where: str) -> str:
    if value not in allowed:
        raise ProfileError(f"{where}: {what} '{value}' is not one of {', '.join(allowed)}")
    return value


def parse_profile(data: Mapping[str, Any], source: str) -> DeviceProfile:
    """Validate one profile's data; errors name the file and the key."""
    where = source
    cpu_t = _expect(data, "cpu", dict, where)
    mem_t = _expect(data, "memory", dict, where)
    thermal_t = data.get("thermal", {})
    cpu = Cpu(
        arch=_one_of(_expect(cpu_t, "arch", str, where + " [cpu]"), ("aarch64", "x86_64"), "arch", where),
        model=_expect(cpu_t, "model", str, where + " [cpu]"),
        cores=_expect(cpu_t, "cores", int, where + " [cpu]"),
        max_freq_mhz=_expect(cpu_t, "max_freq_mhz", int, where + " [cpu]"),
        isa_features=tuple(_expect(cpu_t, "isa_features", list, where + " [cpu]")),
        cores_vary=_optional_bool(cpu_t, "cores_vary", where + " [cpu]"),
    )
    memory = Memory(
        size_gb=_expect(mem_t, "size_gb", float, where + " [memory]"),
        bandwidth_gbps=_optional_float(mem_t, "bandwidth_gbps", where + " [memory]"),
    )
    accelerators = tuple(
        Accelerator(
            name=_expect(a, "name", str, where + " [[accelerators]]"),
            kind=_one_of(_expect(a, "kind", str, where), ("gpu", "dla", "npu"), "accelerator kind", where),
            precisions=tuple(
                _one_of(p, PRECISIONS, "precision", where) for p in _expect(a, "precisions", list, where)
            ),
            notes=a.get("notes", ""),
            max_freq_mhz=_optional_float(a, "max_freq_mhz", where + " [[accelerators]]"),
        )
        for a in data.get("accelerators", [])
    )
    runtimes = tuple(
        _one_of(r, runtime_table.PROFILE_RUNTIMES, "runtime", where) for r in _expect(data, "runtimes", list, where)
    )
    recipe = tuple(
        Artifact(
            format=_one_of(_expect(r, "format", str, where + " [[recipe]]"), runtime_table.FORMATS, "format", where),
            precision=_one_of(_expect(r, "precision", str, where + " [[recipe]]"), PRECISIONS, "precision", where),
        )
        for r in _expect(data, "recipe", list, where)
    )
    if not recipe:
        raise ProfileError(f"{where}: the recipe lists no artifacts")
    threads = _expect(data, "default_threads", int, where)
    if not 1 <= threads <= cpu.cores:
        raise ProfileError(f"{where}: default_threads {threads} must be between 1 and {cpu.cores}")
    peak = _peaks(data, "peak_tops", where)
    cpu_peak = _peaks(data, "cpu_peak_tops", where)
    return DeviceProfile(
        name=_expect(data, "name", str, where),
        description=_expect(data, "description", str, where),
        cpu=cpu,
        memory=memory,
        accelerators=accelerators,
        runtimes=runtimes,
        recipe=recipe,
        default_threads=threads,
        power_sensor=_one_of(_expect(data, "power_sensor", str, where), POWER_SENSORS, "power_sensor", where),
        thermal=Thermal(
            throttle_c=_optional_float(thermal_t, "throttle_c", where + " [thermal]"),
            critical_c=_optional_float(thermal_t, "critical_c", where + " [thermal]"),
        ),
        peak_tops=peak,
        notes=data.get("notes", ""),
        cpu_peak_tops=cpu_peak,
        priors=tuple(_prior(p, f"{where} [[priors]]") for p in data.get("priors", [])),
        transfers=tuple(_transfer(t, f"{where} [[transfers]]") for t in data.get("transfers", [])),
    )


def _peaks(data: Mapping[str, Any], key: str, where: str) -> Dict[str, float]:
    table = data.get(key, {})
    if not isinstance(table, dict):
        raise ProfileError(f"{where}: [{key}] must be a table of precision = TOPS")
    for precision in table:
        _one_of(precision, PRECISIONS, f"{key} precision", where)
        if _expect(table, precision, float, f"{where} [{key}]") <= 0:
            raise ProfileError(f"{where} [{key}]: {precision} must be above 0")
    return {k: float(v) for k, v in table.items()}


def _prior(table: Mapping[str, Any], where: str) -> EfficiencyPrior:
    if not isinstance(table, dict):
        raise ProfileError(f"{where}: each [[priors]] entry must be a table")
    runtime = _one_of(_expect(table, "runtime", str, where), runtime_table.RUNTIMES, "runtime", where)
    precision = _one_of(_expect(table, "precision", str, where), PRECISIONS, "precision", where)
    kinds = table.get("kinds", {})
    if not isinstance(kinds, dict):
        raise ProfileError(f"{where}: kinds must be a table of roof key = factor")
    factors = {"factor": _expect(table, "factor", float, where)}
    factors.update({f"kinds.{k}": _expect(kinds, k, float, where) for k in kinds})
    bad = [k for k, v in factors.items() if not v > 0]
    if bad:
        raise ProfileError(f"{where}: {runtime} {precision}: {', '.join(bad)} must be above 0")
    counts = {k: _expect(table, k, int, where) for k in ("rows", "heldout_rows")}
    if min(counts.values()) < 0 or counts["rows"] < 1:
        raise ProfileError(f"{where}: {runtime} {precision}: rows must be at least 1 and heldout_rows at least 0")
    sources = _expect(table, "sources", list, where) if "sources" in table else []
    parallel = _optional_float(table, "parallel_fraction", where)
    if parallel is not None and not 0 < parallel <= 1:
        raise ProfileError(f"{where}: {runtime} {precision}: parallel_fraction must be above 0 and at most 1")
    return EfficiencyPrior(runtime, precision, factors["factor"], counts["rows"], counts["heldout_rows"],
                           _optional_float(table, "median_error_pct", where),
                           {k: float(v) for k, v in kinds.items()}, tuple(str(s) for s in sources), parallel)


def _transfer(table: Mapping[str, Any], where: str) -> TransferCheck:
    if not isinstance(table, dict):
        raise ProfileError(f"{where}: each [[transfers]] entry must be a table")
    precision = _one_of(_expect(table, "precision", str, where), PRECISIONS, "precision", where)
    base = _one_of(_expect(table, "base", str, where), PRECISIONS, "base", where)
    counts = {k: _expect(table, k, int, where) for k in ("rows", "heldout_rows")}
    if min(counts.values()) < 0:
        raise ProfileError(f"{where}: {precision} from {base}: rows and heldout_rows must be at least 0")
    checked = _expect(table, "runtimes", list, where) if "runtimes" in table else []
    for runtime in checked:
        _one_of(runtime, runtime_table.RUNTIMES, "runtimes", where)
    return TransferCheck(precision, base, counts["rows"], counts["heldout_rows"],
                         _optional_float(table, "median_error_pct", where), tuple(checked))


def _profile_files() -> Dict[str, Path]:
    if sys.version_info >= (3, 9):
        folder = resources.files("edgeopt_device_profiles")
    else:  # Python 3.8 (JetPack 5) has no resources.files; the TOML files ship as plain files
        folder = Path(importlib.import_module("edgeopt_device_profiles").__file__).parent
    return {
        entry.name[: -len(".toml")]: Path(str(entry))
        for entry in folder.iterdir()
        if entry.name.endswith(".toml")
    }


def load_profile_file(path: Path) -> DeviceProfile:
    data = read_toml(path, "device profile", error=ProfileError)
    return parse_profile(data, str(Path(path).name))


def profile_names() -> Tuple[str, ...]:
    return tuple(sorted(_profile_files()))


def load_profile(name: str) -> DeviceProfile:
    """Load a bundled profile by name, or a profile file by path."""
    if name.endswith(".toml") and Path(name).exists():
        return load_profile_file(Path(name))
    files = _profile_files()
    if name not in files:
        close = difflib.get_close_matches(name, files, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise ProfileError(f"unknown device '{name}'; available: {', '.join(sorted(files))}{hint}")
    profile = load_profile_file(files[name])
    if profile.name != name:
        raise ProfileError(f"{name}.toml declares name '{profile.name}'; the file name and name must match")
    return profile


def all_profiles() -> Tuple[DeviceProfile, ...]:
    return tuple(load_profile(name) for name in profile_names())
