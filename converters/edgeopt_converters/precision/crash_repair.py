"""A static INT8 that onnxruntime's quantizer cannot build: what it fails on is found and kept in float.

quantize_static crashes on graphs its passes do not expect (seen: its weight-scale adjustment for
INT32 biases on a 1-D convolution, `The truth value of an array ... is ambiguous`; a Softmax whose
output was never calibrated, `Only an existing tensor can be modified, 'v452' is not`). Every attempt
below quantizes the same prepared graph with the same activation ranges, so it costs one
quantize_static call; the first stage that builds gives the artifact, which is then judged like any
other (and searched by mixed precision when its verdict is not ok). The stages, in order:

1. The nodes the error names (a node, or the producer and consumers of a tensor it quotes) kept in
   float; again with what the next error names, up to NAMED_ROUNDS times.
2. The quantizer's weight-scale adjustment for INT32 biases off (an optional pass, the one seen crashing).
3. Op types: only the multiply-accumulate ops quantized; when that builds, the other op types are added
   back, and the fewest that still fail stay in float (delta debugging).
4. Nodes: the fewest multiply-accumulate nodes that must stay in float, found the same way.
5. One scale per weight instead of one per output channel.

When none builds, the caller goes on to dynamic INT8, then weight-only INT8 (repair.py). Every attempt
and why the repair stopped are recorded (`quantizer_repair` in the manifest entry); attempts are
search time, counted against --time-budget.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

from edgeopt_agent.errors import require

from ..passes.errors import StepFailed
from ..passes.quantize_onnx import OnnxInt8Options, QuantizeOnnxStatic, calibration_cache
from .graph_regions import MAC_OPS

if TYPE_CHECKING:
    from ..context import ConversionContext
    from ..recipe import PlannedArtifact

NAMED_ROUNDS = 3
MAX_ATTEMPTS = 40
SINGLES_FIRST = 16  # up to this many candidates, each is tried alone before halving
_QUOTED = re.compile(r"'([^'\s]{1,200})'|Node \(([^()\s]{1,200})\)")
_QDQ_SUFFIXES = ("_DequantizeLinear", "_QuantizeLinear", "_DequantizeLinear_Output", "_QuantizeLinear_Output",
                 "_quantized", "_scale", "_zero_point")


@dataclass(frozen=True)
class Build:
    int8: OnnxInt8Options
    path: Path
    info: Dict[str, Any]
    stage: str


@dataclass
class CrashRepair:
    """The attempts to build one static INT8 artifact that crashed the quantizer."""

    ctx: "ConversionContext"
    item: "PlannedArtifact"
    prepared: Path  # the graph the quantizer read (after preprocessing)
    last_error: str
    attempts: List[Dict[str, Any]] = field(default_factory=list)
    seconds: List[float] = field(default_factory=list)
    stopped: str = ""

    def build(self, int8: OnnxInt8Options, stage: str) -> Optional[Build]:
        """Quantize the prepared graph with `int8`: the build, or None (the cause kept in `last_error`)."""
        if len(self.attempts) >= MAX_ATTEMPTS:
            self.stopped = f"{MAX_ATTEMPTS} attempts made"
        elif self.ctx.seconds_left() < max(self.seconds, default=0.0):
            self.stopped = f"--time-budget {self.ctx.options.time_budget:g} s would be overrun"
        if self.stopped:
            return None
        trial = self.ctx.work / ".steps" / f"repair-{self.item.key}-{len(self.attempts)}.onnx"
        cache = calibration_cache(self.ctx.work / self.item.filename)  # the crashed build's ranges, if it got that far
        started = time.monotonic()
        try:
            info = QuantizeOnnxStatic(int8).run(self.ctx.step_context(calibration_cache=cache), self.prepared, trial).info
        except StepFailed as exc:
            self.last_error = str(exc)
            self._record(stage, int8, "failed", str(exc))
            return None
        finally:
            self.seconds.append(time.monotonic() - started)
        self._record(stage, int8, "built")
        return Build(int8, trial, info, stage)

    def _record(self, stage: str, int8: OnnxInt8Options, result: str, cause: str = "") -> None:
        attempt = {"stage": stage, "float_nodes": len(int8.nodes_to_exclude), "result": result}
        if int8.op_types:
            attempt["op_types"] = list(int8.op_types)
        if cause:
            attempt["cause"] = cause[:300]
        self.attempts.append(attempt)

    def to_dict(self, built: Optional[Build]) -> Dict[str, Any]:
        return {"attempts": self.attempts, "stopped": self.stopped,
                "result": f"built: {built.stage}" if built else "no static INT8 could be built"}


def repair_crash(ctx: "ConversionContext", item: "PlannedArtifact", cause: str) -> Tuple[CrashRepair, Optional[Build]]:
    """The stages of the module doc in order, until one builds."""
    onnx = require("onnx", "convert")
    prepared = ctx.work / ".steps" / f"{item.key}.0.preprocess-onnx.onnx"
    if not prepared.is_file():
        prepared = ctx.built[item.base]  # preprocessing itself failed: quantize the FP32 export as it is
    graph = onnx.load(str(prepared), load_external_data=False).graph
    repair = CrashRepair(ctx, item, prepared, cause)
    base = item.int8
    stages: List[Callable[[], Optional[Build]]] = [
        lambda: _named(repair, graph, base),
        lambda: repair.build(replace(base, adjust_weights_for_bias=False),
                             "weight-scale adjustment for INT32 biases off") if base.adjust_weights_for_bias else None,
        lambda: None if base.op_types else _op_types(repair, graph, base),
        lambda: _nodes(repair, graph, base),
        lambda: repair.build(replace(base, per_channel=False), "one scale per weight (per-tensor)")
        if base.per_channel else None,
    ]
    for stage in stages:
        built = stage()
        if built is not None:
            repair.stopped = repair.stopped or "built"
            return repair, built
        if repair.stopped:
            break
    repair.stopped = repair.stopped or "every stage failed"
    return repair, None


def _named(repair: CrashRepair, graph, base: OnnxInt8Options) -> Optional[Build]:
    kept = list(base.nodes_to_exclude)
    for _ in range(NAMED_ROUNDS):
        named = [n for n in nodes_named(graph, repair.last_error) if n not in kept]
        if not named:
            return None
        kept += named
        built = repair.build(replace(base, nodes_to_exclude=tuple(kept)), f"named by the error: {', '.join(named[:3])}")
        if built is not None:
            return built
    return None


def nodes_named(graph, message: str) -> List[str]:
    """Nodes of `graph` an error names: by node name, or as the producer or a consumer of a tensor it
    quotes. A name the quantizer made for a tensor's Q/DQ node (`layernorm.bias_DequantizeLinear`) names
    that tensor."""
    names = set()
    for quoted in (a or b for a, b in _QUOTED.findall(message)):
        names.add(quoted)
        for suffix in _QDQ_SUFFIXES:
            if quoted.endswith(suffix):
                names.add(quoted[:-len(suffix)])
    return [n.name for n in graph.node
            if n.name and (n.name in names or names & set(n.output) or names & set(n.input))]


def _op_types(repair: CrashRepair, graph, base: OnnxInt8Options) -> Optional[Build]:
    present = quantizable_op_types(graph)
    macs = tuple(t for t in MAC_OPS if t in present)
    others = [t for t in present if t not in macs]
    if not macs or not others:
        return None
    mac_only = repair.build(replace(base, op_types=macs), "only multiply-accumulate ops in INT8")
    if mac_only is None:
        return None
    return _fewest(repair, others, mac_only, lambda excluded: repair.build(
        replace(base, op_types=macs + tuple(t for t in others if t not in excluded)),
        f"op types kept in float: {', '.join(excluded)}"))


def _nodes(repair: CrashRepair, graph, base: OnnxInt8Options) -> Optional[Build]:
    candidates = [n.name for n in graph.node if n.name and n.op_type in MAC_OPS and n.name not in base.nodes_to_exclude]
    if len(candidates) < 2:
        return None
    every = repair.build(replace(base, nodes_to_exclude=base.nodes_to_exclude + tuple(candidates)),
                         "every multiply-accumulate node in float")
    if every is None:
        return None  # the crash is elsewhere
    return _fewest(repair, candidates, every, lambda excluded: repair.build(
        replace(base, nodes_to_exclude=base.nodes_to_exclude + tuple(excluded)),
        f"{len(excluded)} multiply-accumulate node{'s' if len(excluded) > 1 else ''} in float: "
        + ", ".join(excluded[:4]) + (" ..." if len(excluded) > 4 else "")))


def _fewest(repair: CrashRepair, items: Sequence[str], everything: Build,
            build: Callable[[List[str]], Optional[Build]]) -> Build:
    """The build with the fewest of `items` excluded (`everything`: all of them excluded, known to build).
    Builds that are not kept are deleted as soon as a better one exists."""
    best = {"build": everything, "count": len(items)}

    def builds(excluded: List[str]) -> bool:
        if not excluded or len(excluded) >= best["count"]:
            return False
        found = build(excluded)
        if found is None:
            return False
        best["build"].path.unlink(missing_ok=True)
        best.update(build=found, count=len(excluded))
        return True

    smallest_exclusion(items, builds)
    return best["build"]


def smallest_exclusion(items: Sequence[str], builds: Callable[[List[str]], bool]) -> List[str]:
    """A small subset of `items` whose exclusion lets the graph build, given that excluding all of them
    does (delta debugging: halves and finer pieces, each tried alone and as the complement; among a few
    items, each alone first, one culprit being the common case)."""
    if len(items) <= SINGLES_FIRST:
        for item in items:
            if builds([item]):
                return [item]
    current = list(items)
    pieces = 2
    while len(current) >= 2:
        chunks = [current[i::pieces] for i in range(pieces)]
        reduced = next((chunk for chunk in chunks if len(chunk) < len(current) and builds(chunk)), None)
        if reduced is None:
            reduced = next((rest for rest in ([x for x in current if x not in chunk] for chunk in chunks)
                            if rest and builds(rest)), None)
            pieces = max(pieces - 1, 2) if reduced is not None else pieces
        else:
            pieces = 2
        if reduced is not None:
            current = reduced
        elif pieces >= len(current):
            break
        else:
            pieces = min(len(current), pieces * 2)
    return current


def quantizable_op_types(graph) -> List[str]:
    """The op types of `graph` that onnxruntime's static quantizer handles, in graph order."""
    from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

    known = set(QDQRegistry) | set(QLinearOpsRegistry)
    return list(dict.fromkeys(n.op_type for n in graph.node if n.op_type in known))
