"""The roofline: per node, is it bound by arithmetic or by memory on a board, and how long does it take.

A node takes max(ops / peak, bytes / bandwidth) on a machine with that peak throughput (at the
node's precision) and memory bandwidth, plus a fixed dispatch overhead per executed node where
the machine's is known (a convolution's or matrix product's own where measured: it hands work to
the runtime's thread pool, which a cheap elementwise node does not). Where the machine's last-level cache is known (this host's is), a node
whose whole working set (inputs, weights, outputs) fits in half of it moves its bytes at the
cache's bandwidth instead of DRAM's; the graph takes the sum (nodes run one after another), plus
the machine's fixed cost of one run where known.

Where the machine has a roof of its own for the node's kernel kind at the node's precision
(`node_kinds`: dense, depthwise or pointwise convolution, matrix product, elementwise, ...), the
node is timed with that kind's achieved throughput and bandwidth instead of the machine's peaks (an
INT8 node of a kind measured only in float: the float roof of its kind):
this host measures them with one small kernel per kind (`kind_kernels`); a board's profile states
only its peaks. Per-kind efficiency factors fitted from fleet measurements (measured / predicted,
`roofline_fit`) scale the prediction; without them the prediction is uncalibrated, and says so.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Tuple

from edgeopt_agent import runtimes
from edgeopt_agent.errors import UserError
from edgeopt_agent.profiles import DeviceProfile
from edgeopt_agent.runners import detect_format

from .graph_cost import GraphCost, InputShapes, NodeCost, analyze_onnx

EXECUTED = ("compute", "elementwise", "move", "dispatch")  # roles that run a kernel of their own
OVERHEAD = "overhead"  # kind_ms key of the nodes' fixed dispatch costs, calibrated apart from their work


@dataclass(frozen=True)
class KindRoof:
    """What a machine reaches on one kernel kind at one precision (measured by a small kernel)."""

    gops: float  # operations per second, in 1e9
    gbps: float  # bytes per second, in 1e9; 0: not measured, the machine's bandwidth applies
    kernel: str = ""  # what was measured

    def to_dict(self) -> dict:
        return {"gops": round(self.gops, 3), "gbps": round(self.gbps, 3), "kernel": self.kernel}


def roof_key(precision: str, kind: str) -> str:
    return f"{precision}/{kind or 'other'}"


def node_roof_key(node: NodeCost) -> str:
    return roof_key(node.precision, node.kind)


@dataclass(frozen=True)
class Machine:
    """What the roofline needs to know about a board."""

    name: str
    peak_gops: Mapping[str, float]  # precision -> operations per second, in 1e9
    bandwidth_gbps: float  # bytes per second, in 1e9
    overhead_us: float = 0.0  # fixed cost of running one node
    source: str = ""
    cache_bytes: float = 0.0  # last-level cache; 0: unknown, every byte comes from DRAM
    cache_bandwidth_gbps: float = 0.0
    notes: Tuple[str, ...] = ()
    kinds: Mapping[str, KindRoof] = field(default_factory=dict)  # roof_key(precision, kind) -> its own roof
    run_overhead_us: float = 0.0  # fixed cost of one run of a graph, whatever its nodes
    compute_overhead_us: float = 0.0  # fixed cost of a convolution or matrix product (its thread hand-off); 0: overhead_us

    def node_overhead_us(self, node: NodeCost) -> float:
        if node.role == "compute" and self.compute_overhead_us:
            return self.compute_overhead_us
        return self.overhead_us

    def peak(self, precision: str) -> Tuple[float, str]:
        """Peak for a precision, falling back to the nearest one the machine states (and saying so)."""
        if precision in self.peak_gops:
            return self.peak_gops[precision], precision
        for fallback in {"int8": ("fp16", "fp32"), "fp16": ("fp32",), "fp32": ("fp16",)}.get(precision, ()):
            if fallback in self.peak_gops:
                return self.peak_gops[fallback], fallback
        raise UserError(f"{self.name} states no peak throughput; add [peak_tops] to its profile")

    def ridge(self, precision: str) -> float:
        """Arithmetic intensity (ops/byte) above which a node is compute-bound."""
        return self.peak(precision)[0] / self.bandwidth_gbps

    def to_dict(self) -> dict:
        return {"name": self.name, "peak_gops": dict(self.peak_gops), "bandwidth_gbps": self.bandwidth_gbps,
                "overhead_us": self.overhead_us, "cache_bytes": self.cache_bytes,
                "cache_bandwidth_gbps": self.cache_bandwidth_gbps, "run_overhead_us": self.run_overhead_us,
                "compute_overhead_us": self.compute_overhead_us,
                "kinds": {k: v.to_dict() for k, v in sorted(self.kinds.items())},
                "source": self.source, "notes": list(self.notes)}

    def bandwidth_for(self, working_set: float) -> float:
        """Bytes per second (in 1e9) for a node that touches `working_set` bytes."""
        if self.cache_bytes and self.cache_bandwidth_gbps and working_set <= self.cache_bytes / 2:
            return self.cache_bandwidth_gbps
        return self.bandwidth_gbps


def machine_for(profile: DeviceProfile) -> Machine:
    """The roofline of a board from its profile's cited peak figures and memory bandwidth."""
    if not profile.peak_tops:
        raise UserError(f"device profile {profile.name} has no [peak_tops]; the roofline needs its peak throughput")
    if not profile.memory.bandwidth_gbps:
        raise UserError(f"device profile {profile.name} has no memory bandwidth_gbps; the roofline needs it")
    return Machine(profile.name, {p: v * 1000.0 for p, v in profile.peak_tops.items()},
                   profile.memory.bandwidth_gbps, 0.0,
                   f"device profile {profile.name} (theoretical peaks and bandwidth from the profile, not measured)")


@dataclass
class NodeTime:
    node: NodeCost
    ms: float
    bound: str  # "compute" | "memory" (DRAM or cache) | "overhead" | "none"
    peak_precision: str
    roof: str = ""  # roof_key of the kind roof it was timed with; "": the machine's peaks
    overhead_ms: float = 0.0  # the part of `ms` that is the node's fixed dispatch cost

    def to_dict(self) -> dict:
        data = self.node.to_dict()
        data.update({"predicted_ms": round(self.ms, 6), "bound": self.bound, "peak_precision": self.peak_precision,
                     "roof": self.roof or "peak"})
        return data


@dataclass
class Prediction:
    machine: Machine
    nodes: List[NodeTime]
    efficiency: Optional[float] = None  # measured / predicted over the whole graph, from the fleet; None: uncalibrated
    efficiency_samples: int = 0
    notes: List[str] = field(default_factory=list)
    kind_efficiency: Mapping[str, float] = field(default_factory=dict)  # roof key -> factor, where the fleet allows

    def factor(self, node: NodeCost) -> float:
        return self.kind_efficiency.get(node_roof_key(node), self.efficiency or 1.0)

    def calibrated_ms(self, t: NodeTime) -> float:
        overhead = self.kind_efficiency.get(OVERHEAD, self.efficiency or 1.0)
        return (t.ms - t.overhead_ms) * self.factor(t.node) + t.overhead_ms * overhead

    @property
    def run_ms(self) -> float:
        return self.machine.run_overhead_us / 1000.0

    @property
    def roofline_ms(self) -> float:
        return self.run_ms + sum(n.ms for n in self.nodes)

    @property
    def ms(self) -> float:
        return self.run_ms + sum(self.calibrated_ms(n) for n in self.nodes)

    @property
    def calibrated(self) -> bool:
        return self.efficiency is not None

    def bound_share(self) -> Dict[str, float]:
        """Share of the predicted time spent in memory-bound, compute-bound and overhead-bound nodes."""
        total = self.roofline_ms or 1.0
        shares: Dict[str, float] = {}
        for n in self.nodes:
            shares[n.bound] = shares.get(n.bound, 0.0) + n.ms / total
        return shares

    def kind_ms(self) -> Dict[str, float]:
        """Uncalibrated predicted time per roof key ("int8/depthwise"), the nodes' fixed dispatch costs apart
        (OVERHEAD): what per-kind efficiency is fitted against."""
        times: Dict[str, float] = {}
        for n in self.nodes:
            for key, ms in ((node_roof_key(n.node), n.ms - n.overhead_ms), (OVERHEAD, n.overhead_ms)):
                if ms > 0:
                    times[key] = times.get(key, 0.0) + ms
        return times

    def to_dict(self, top: Optional[int] = None) -> dict:
        ordered = sorted(self.nodes, key=lambda n: -n.ms)
        return {
            "machine": self.machine.to_dict(),
            "predicted_ms": round(self.ms, 6),
            "roofline_ms": round(self.roofline_ms, 6),
            "calibrated": self.calibrated,
            "efficiency": self.efficiency,
            "efficiency_samples": self.efficiency_samples,
            "kind_efficiency": {k: round(v, 4) for k, v in sorted(self.kind_efficiency.items())},
            "kind_ms": {k: round(v, 6) for k, v in sorted(self.kind_ms().items(), key=lambda kv: -kv[1])},
            "bound_share": {k: round(v, 4) for k, v in self.bound_share().items()},
            "notes": list(self.notes),
            "nodes": [n.to_dict() for n in (ordered[:top] if top else ordered)],
        }


def node_time(node: NodeCost, machine: Machine) -> NodeTime:
    if node.role not in EXECUTED:
        return NodeTime(node, 0.0, "none", node.precision)
    key = node_roof_key(node)
    own = machine.kinds.get(key)
    if own is None and node.precision != "fp32" and roof_key("fp32", node.kind) in machine.kinds:
        # No kernel of this kind at this precision: the runtime's float kernel of the kind is the nearer
        # figure (8-bit data in and out, the arithmetic as slow), not the machine's INT8 matrix peak.
        key = roof_key("fp32", node.kind)
        own = machine.kinds[key]
    bandwidth = machine.bandwidth_for(node.bytes)
    if own is not None:
        peak, used = own.gops, node.precision
        bandwidth = min(bandwidth, own.gbps) if own.gbps else bandwidth
    else:
        (peak, used), key = machine.peak(node.precision), ""
    compute_s = node.kernel_ops / (peak * 1e9)
    memory_s = node.bytes / (bandwidth * 1e9)
    overhead_s = machine.node_overhead_us(node) * 1e-6
    if max(compute_s, memory_s) < overhead_s:
        bound = "overhead"
    else:
        bound = "compute" if compute_s >= memory_s else "memory"
    return NodeTime(node, (max(compute_s, memory_s) + overhead_s) * 1000.0, bound, used, key, overhead_s * 1000.0)


def predict(cost: GraphCost, machine: Machine, efficiency: Optional[float] = None, samples: int = 0,
            kind_efficiency: Optional[Mapping[str, float]] = None) -> Prediction:
    times = [node_time(n, machine) for n in cost.nodes]
    notes = list(machine.notes)
    fallbacks = sorted({(t.node.precision, t.peak_precision) for t in times
                        if t.node.role in EXECUTED and not t.roof and t.node.precision != t.peak_precision})
    for wanted, used in fallbacks:
        notes.append(f"{machine.name} states no {wanted} peak; {wanted} nodes are timed at its {used} peak")
    executed = [t for t in times if t.node.role in EXECUTED and t.ms > 0]
    if machine.kinds:
        own = sorted({t.roof for t in executed if t.roof})
        generic = sorted({node_roof_key(t.node) for t in executed if not t.roof})
        notes.append(f"{sum(1 for t in executed if t.roof)} of {len(executed)} nodes timed with {machine.name}'s "
                     f"measured per-kind roofs ({', '.join(own) or 'none'})"
                     + (f"; the rest ({', '.join(generic)}) at its measured peaks" if generic else ""))
    else:
        notes.append(f"every node timed at {machine.name}'s stated peak throughput and bandwidth (no per-kind "
                     f"figures for this machine)")
    if efficiency is None:
        notes.append("uncalibrated: no fleet measurement of this board to fit an efficiency factor from")
    return Prediction(machine, times, efficiency, samples, notes, dict(kind_efficiency or {}))


def predict_artifacts(profile: DeviceProfile, paths: Mapping[str, Path],
                      input_shapes: Optional[Mapping[str, InputShapes]] = None) -> Dict[str, float]:
    """Uncalibrated roofline latency (ms) of each ONNX artifact on a board, by artifact key, with each
    artifact's inputs fixed to `input_shapes[key]` (by input name; a dynamic dim left open costs its
    nodes nothing, so artifacts compared must be costed at the same shapes).

    Empty where the profile states no peak figures or bandwidth; an artifact whose graph cannot
    be analysed is left out.
    """
    return roofline_ms(profile, artifact_costs(paths, input_shapes))


def artifact_costs(paths: Mapping[str, Path],
                   input_shapes: Optional[Mapping[str, InputShapes]] = None) -> Dict[str, GraphCost]:
    """The graph cost of each artifact the roofline reads (ONNX), by key; one it cannot analyse is left out."""
    costs: Dict[str, GraphCost] = {}
    for key, path in paths.items():
        if runtimes.format_of(detect_format(path)).roofline == "own":
            try:
                costs[key] = analyze_onnx(path, (input_shapes or {}).get(key, ()))
            except UserError:
                continue
    return costs


def roofline_ms(profile: DeviceProfile, costs: Mapping[str, GraphCost]) -> Dict[str, float]:
    """Uncalibrated roofline latency (ms) of each costed graph on the board; empty where the profile
    states no peak figures or bandwidth."""
    try:
        board = machine_for(profile)
    except UserError:
        return {}
    return {key: predict(cost, board).roofline_ms for key, cost in costs.items()}
