"""Efficiency priors: how fast each runtime runs on a board against its roofline, from published measurements.

The roofline (`roofline.py`) times a graph at a board's stated peaks; runtimes reach very different
fractions of them (ncnn's hand-written NEON kernels, ONNX Runtime's MLAS, TFLite's XNNPACK, TensorRT
on the GPU). A prior is a `roofline_fit.Fit` per (board, runtime, precision), fitted on published
measurements of that board (`published.py`), kept in the board's profile (`[[priors]]`) with the
number of rows, their sources and the median error on rows held out of the fit, so a prediction made
with it can say how far to trust it.

Each runtime is timed on the processor it runs on: a GPU runtime (the runtime table's `gpu`) at the
profile's [peak_tops], a CPU runtime at [cpu_peak_tops] where the board's [peak_tops] are an
accelerator's, scaled to the threads it runs with and to a clock a measurement states (an overclocked
Pi). Threads speed a CPU runtime up by Amdahl's law with the parallel share its priors state (fitted
where its measurements ran at several thread counts; without one, linearly): n of the cores run the
work 1 / ((1 - p) + p / n) times faster than one core. Every executed node also pays
NODE_OVERHEAD_US, a nominal dispatch cost the fit scales per runtime (kind "overhead"): a graph of
many small nodes is slower than its arithmetic, most of all on a GPU.

Priors are fitted per roof key ("fp32/depthwise", `roofline.node_roof_key`), with dense convolutions
split by the forms runtimes run by other algorithms (`fit_key`): 3x3 stride 1 (Winograd in ncnn and
TensorRT: fewer multiplications than the roofline counts), grouped (neither a dense GEMM nor a
depthwise kernel) and the rest.

A runtime with priors at FP32 but none at a lower precision on a board (no published INT8 measurement of
ONNX Runtime on a Pi 4) is not left unranked when other runtimes on the same processor have priors at both:
its latency is `transferred`, its FP32 prediction divided by the speed-up those runtimes' own priors
predict between the two precisions on the same graph (a Cortex-A72 has no dot-product instructions, so
what INT8 gains there is what its published INT8 rows show, kernel kind by kernel kind). The board's
profile keeps how well such transfers predicted published rows ([[transfers]], `TransferCheck`), and the
estimate says so.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from edgeopt_agent import runtimes
from edgeopt_agent.errors import UserError
from edgeopt_agent.profiles import DeviceProfile, EfficiencyPrior, TransferCheck

from .graph_cost import GraphCost
from .roofline import EXECUTED, OVERHEAD, Machine, Prediction, machine_for, node_roof_key, predict
from .roofline_fit import RIDGE, Fit, fit

NODE_OVERHEAD_US = 5.0  # nominal; the fitted "overhead" factor makes it the runtime's own


def costed_precision(runtime: str, precision: str) -> str:
    """The precision of the ONNX graph an artifact is costed by: the graph its runtime converts from (ncnn's
    pnnx starts from the FP32 ONNX whatever precision it writes), else the ONNX graph of its own precision
    (TensorRT builds its engine from it; TFLite and ExecuTorch run the same arithmetic). A precision the
    runtime's formats do not write (a published ncnn INT8 model, made by ncnn's own tools) runs its own
    arithmetic: the ONNX graph of that precision."""
    formats = [runtimes.format_of(fmt) for fmt in runtimes.BY_NAME[runtime].formats]
    base = next((f.export_base for f in formats if f.export_base and precision in f.precisions), None)
    return base.split("-")[-1] if base else precision


def on_gpu(runtime: str) -> bool:
    return runtimes.BY_NAME[runtime].gpu


def speedup(threads: int, parallel_fraction: Optional[float]) -> float:
    """How much faster `threads` cores run a CPU runtime's work than one (Amdahl; None: linear)."""
    p = 1.0 if parallel_fraction is None else parallel_fraction
    return 1.0 / ((1.0 - p) + p / threads)


def runtime_machine(profile: DeviceProfile, runtime: str, threads: Optional[int] = None,
                    clock_mhz: Optional[float] = None, parallel_fraction: Optional[float] = None) -> Machine:
    """The roofline of the processor `runtime` runs on, with `threads` of the CPU's cores (None: the
    profile's default) at Amdahl's `parallel_fraction`, and the processor at `clock_mhz` (None: the
    profile's clock)."""
    board = machine_for(profile)
    if on_gpu(runtime):
        if not profile.has_gpu:
            raise UserError(f"{runtime} runs on a GPU and {profile.name} states none")
        peaks, scale, processor = dict(board.peak_gops), 1.0, "GPU"
        stated = next((a.max_freq_mhz for a in profile.accelerators if a.kind == "gpu"), None)
        if clock_mhz and stated:
            scale = clock_mhz / stated
    else:
        if profile.has_gpu and not profile.cpu_peak_tops:
            raise UserError(f"{profile.name}'s [peak_tops] are its GPU's and it states no [cpu_peak_tops] to time "
                            f"{runtime} on its CPU with")
        peaks = {p: v * 1000.0 for p, v in (profile.cpu_peak_tops or profile.peak_tops).items()}
        used = min(max(1, threads or profile.default_threads), profile.cpu.cores)
        scale = speedup(used, parallel_fraction) / profile.cpu.cores * (
            (clock_mhz / profile.cpu.max_freq_mhz) if clock_mhz else 1.0)
        processor = f"CPU, {used} of {profile.cpu.cores} cores"
    return Machine(f"{profile.name} {processor}", {p: v * scale for p, v in peaks.items()}, board.bandwidth_gbps,
                   NODE_OVERHEAD_US, f"device profile {profile.name}: {processor} peaks and memory bandwidth")


def uncalibrated(cost: GraphCost, profile: DeviceProfile, runtime: str, threads: Optional[int] = None,
                 clock_mhz: Optional[float] = None, parallel_fraction: Optional[float] = None) -> Prediction:
    return predict(cost, runtime_machine(profile, runtime, threads, clock_mhz, parallel_fraction))


def fit_key(node) -> str:
    """The key a node's efficiency is fitted by: its roof key, a dense convolution's with its form."""
    key = node_roof_key(node)
    if node.kind != "conv" or not node.form:
        return key
    if node.form.endswith("/g"):
        return key + "-grouped"
    return key + ("-3x3s1" if node.form == "3x3/1" else "")


def fit_kind_ms(prediction: Prediction) -> Dict[str, float]:
    """Uncalibrated predicted time per fit key, the nodes' dispatch costs apart (OVERHEAD): what priors fit."""
    times: Dict[str, float] = {}
    for t in prediction.nodes:
        if t.node.role not in EXECUTED:
            continue
        for key, ms in ((fit_key(t.node), t.ms - t.overhead_ms), (OVERHEAD, t.overhead_ms)):
            if ms > 0:
                times[key] = times.get(key, 0.0) + ms
    return times


class PriorPrediction(Prediction):
    """A prediction calibrated by priors, whose factors are keyed by `fit_key`."""

    def factor(self, node) -> float:
        return self.kind_efficiency.get(fit_key(node), self.kind_efficiency.get(node_roof_key(node),
                                                                                self.efficiency or 1.0))


def with_prior(prediction: Prediction, prior: EfficiencyPrior) -> PriorPrediction:
    notes = [n for n in prediction.notes if not n.startswith("uncalibrated")]
    return PriorPrediction(prediction.machine, prediction.nodes, prior.factor, prior.rows, notes,
                           dict(prior.kinds))


def as_fit(prior: EfficiencyPrior) -> Fit:
    return Fit(prior.factor, prior.rows, dict(prior.kinds))


def calibrated_ms(prediction: Prediction, prior: EfficiencyPrior) -> float:
    return as_fit(prior).predicted(fit_kind_ms(prediction))


@dataclass(frozen=True)
class Evidence:
    """What a prediction with priors rests on, in words a reason can quote."""

    board: str
    runtime: str
    precision: str
    rows: int
    heldout_rows: int
    median_error_pct: Optional[float]

    def error_text(self) -> str:
        if self.median_error_pct is None:
            return "no held-out measurement to state an error on"
        return f"median error {self.median_error_pct:.0f} % on {self.heldout_rows} held-out rows"

    def text(self) -> str:
        if self.median_error_pct is None:
            return (f"predicted with priors fitted on {self.rows} published measurements of this board, no "
                    f"held-out measurement to state an error on ({self.runtime} {self.precision})")
        return (f"predicted with priors fitted on {self.rows} published measurements of this board, median error "
                f"{self.median_error_pct:.0f} % ({self.runtime} {self.precision}; error on {self.heldout_rows} "
                f"held-out rows)")


def evidence(profile: DeviceProfile, runtime: str, precision: str) -> Optional[Evidence]:
    prior = profile.prior(runtime, precision)
    if prior is None:
        return None
    return Evidence(profile.name, runtime, precision, prior.rows, prior.heldout_rows, prior.median_error_pct)


BASE_PRECISION = "fp32"  # what a precision without evidence of its own is transferred from
# A runtime gives its speed-up to another only with priors at the lower precision fitted on at least this many
# rows: chosen on the train split (bench_published --cv; median error of transfers 45 % with every runtime as a
# donor, 30 % with this floor: a prior fitted on one INT8 row, ONNX Runtime's on a Pi 5, misjudged the others).
MIN_DONOR_ROWS = 3


@dataclass(frozen=True)
class Transferred:
    """What a transferred estimate rests on: the runtime's own priors at BASE_PRECISION, divided by the speed-up
    that other runtimes of the same processor show on this board between the two precisions for the same
    graph (their own priors at both), and how well such transfers predicted published rows (TransferCheck)."""

    board: str
    runtime: str
    precision: str
    base: Evidence
    donors: Tuple[str, ...]
    donor_rows: int  # published measurements at `precision` the donors' priors were fitted on
    speedup: float  # the donors' speed-up on this graph (geometric mean over donors)
    check: Optional[TransferCheck]

    def check_text(self) -> str:
        c = self.check
        if c is None or not (c.rows or c.heldout_rows):
            return "this transfer is not checked against any published measurement"
        if c.median_error_pct is None:
            return f"checked on {c.rows} published {self.precision} rows, none held out to state an error on"
        return (f"such transfers' median error {c.median_error_pct:.0f} % on {c.heldout_rows} held-out published "
                f"{self.precision} rows ({', '.join(c.runtimes)} predicted without their own {self.precision} priors)")

    def text(self) -> str:
        return (f"no published measurement of {self.runtime} at {self.precision} on this board: estimated from its "
                f"{self.base.precision} priors ({self.base.rows} published measurements, {self.base.error_text()}) and "
                f"the {self.precision} speed-up {' and '.join(self.donors)} show here on this graph, "
                f"{self.speedup:.2f}x (their {self.precision} priors fitted on {self.donor_rows} published "
                f"measurements); {self.check_text()}")


@dataclass(frozen=True)
class BoardEstimate:
    """One artifact's latency on a board with its runtime's priors, or why there is none."""

    key: str
    runtime: str
    precision: str
    graph: str  # the ONNX artifact it is costed by
    ms: Optional[float]
    evidence: Optional[Union[Evidence, Transferred]]
    why_not: str = ""


def prior_ms(profile: DeviceProfile, runtime: str, precision: str, costs: Mapping[str, GraphCost],
             threads: Optional[int] = None, clock_mhz: Optional[float] = None) -> float:
    """Latency of (runtime, precision) on the board by its priors, costed by its ONNX graph in `costs`
    (KeyError: that graph is missing)."""
    prior = profile.prior(runtime, precision)
    cost = costs[f"onnx-{costed_precision(runtime, precision)}"]
    return calibrated_ms(uncalibrated(cost, profile, runtime, threads, clock_mhz, prior.parallel_fraction), prior)


def estimate(profile: DeviceProfile, key: str, runtime: str, precision: str, costs: Mapping[str, GraphCost],
             threads: Optional[int] = None, clock_mhz: Optional[float] = None) -> BoardEstimate:
    """An artifact's predicted latency on the board with the priors of (runtime, precision), costed by the
    ONNX graph `costed_precision` names (`costs`: GraphCost by ONNX artifact key, "onnx-fp32", ...); without
    such priors, transferred from the runtime's BASE_PRECISION priors where other runtimes show the speed-up."""
    graph = f"onnx-{costed_precision(runtime, precision)}"
    found = evidence(profile, runtime, precision)
    if found is None:
        return transferred(profile, key, runtime, precision, costs, threads, clock_mhz)
    if graph not in costs:
        return BoardEstimate(key, runtime, precision, graph, None, found, f"no {graph} graph to cost it by")
    try:
        ms = prior_ms(profile, runtime, precision, costs, threads, clock_mhz)
    except UserError as exc:
        return BoardEstimate(key, runtime, precision, graph, None, found, str(exc))
    return BoardEstimate(key, runtime, precision, graph, ms, found)


def donors(profile: DeviceProfile, runtime: str, precision: str, base: str = BASE_PRECISION) -> Tuple[str, ...]:
    """The other runtimes on the same processor of the board with priors at `base` and at `precision` (fitted
    on at least MIN_DONOR_ROWS rows)."""
    return tuple(p.runtime for p in profile.priors if p.precision == precision and p.runtime != runtime
                 and p.rows >= MIN_DONOR_ROWS and on_gpu(p.runtime) == on_gpu(runtime)
                 and profile.prior(p.runtime, base) is not None)


def transferred(profile: DeviceProfile, key: str, runtime: str, precision: str, costs: Mapping[str, GraphCost],
                threads: Optional[int] = None, clock_mhz: Optional[float] = None,
                base: str = BASE_PRECISION) -> BoardEstimate:
    """(runtime, precision) without published evidence of its own: the runtime's latency at `base` by its
    priors, divided by the geometric mean over `donors` of their latency at `base` over their latency at
    `precision` on the same graphs (each by its own priors), or why there is none."""
    graph = f"onnx-{costed_precision(runtime, precision)}"
    none = f"no published measurement of {runtime} at {precision} on {profile.name}"
    if precision == base or profile.prior(runtime, base) is None:
        return BoardEstimate(key, runtime, precision, graph, None, None, none)
    givers = donors(profile, runtime, precision, base)
    if not givers:
        return BoardEstimate(key, runtime, precision, graph, None, None,
                             f"{none}, nor enough of another runtime on its processor at both {precision} and {base}")
    try:
        own = prior_ms(profile, runtime, base, costs, threads, clock_mhz)
        ratios = [prior_ms(profile, d, base, costs, threads, clock_mhz) /
                  prior_ms(profile, d, precision, costs, threads, clock_mhz) for d in givers]
    except KeyError as exc:
        return BoardEstimate(key, runtime, precision, graph, None, None, f"{none}; no {exc.args[0]} graph to transfer by")
    except UserError as exc:
        return BoardEstimate(key, runtime, precision, graph, None, None, f"{none}; {exc}")
    speedup = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    found = Transferred(profile.name, runtime, precision, evidence(profile, runtime, base), givers,
                        sum(profile.prior(d, precision).rows for d in givers), speedup, profile.transfer(precision, base))
    return BoardEstimate(key, runtime, precision, graph, own / speedup, found)


def fit_prior(rows: Sequence[Mapping[str, Any]], ridge: float = RIDGE) -> Fit:
    """Priors from rows of predicted_ms (uncalibrated, on the runtime's machine), measured_ms and kind_ms."""
    return fit(rows, ridge)


def median_abs_error_pct(pairs: Sequence[tuple]) -> Optional[float]:
    """Median of |predicted - measured| / measured, in %, over (predicted, measured) pairs."""
    errors: List[float] = [abs(p - m) / m * 100.0 for p, m in pairs if m > 0]
    return statistics.median(errors) if errors else None


def prior_table(found: Fit, rows: int, heldout_rows: int, error_pct: Optional[float], sources: Sequence[str],
                runtime: str, precision: str, parallel_fraction: Optional[float] = None) -> Dict[str, Any]:
    """A fit as the [[priors]] entry a profile stores."""
    entry: Dict[str, Any] = {"runtime": runtime, "precision": precision, "factor": round(found.factor, 4),
                             "rows": rows, "heldout_rows": heldout_rows}
    if parallel_fraction is not None:
        entry["parallel_fraction"] = parallel_fraction
    if error_pct is not None:
        entry["median_error_pct"] = round(error_pct, 1)
    entry["kinds"] = {k: round(v, 4) for k, v in sorted(found.kinds.items())}
    entry["sources"] = sorted(set(sources))
    return entry
