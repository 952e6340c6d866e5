"""The roofline: per node, is it bound by arithmetic or by memory on a board, and how long does it take.

A node takes max(ops / peak, bytes / bandwidth) on a machine with that peak throughput (at the
node's precision) and memory bandwidth, plus a fixed dispatch overhead per executed node where
the machine's is known. Where the machine's last-level cache is known (this host's is), a node
whose whole working set (inputs, weights, outputs) fits in half of it moves its bytes at the
cache's bandwidth instead of DRAM's; the graph takes the sum (nodes run one after another). Peak figures and
bandwidths come from the board's profile (cited there), or are measured on this host by
`host_peaks`. A per-board efficiency factor fitted from fleet measurements (measured / predicted)
scales the prediction; without one the prediction is uncalibrated, and says so.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Tuple

from edgeopt_agent.errors import UserError
from edgeopt_agent.profiles import DeviceProfile

from .graph_cost import GraphCost, NodeCost, analyze_onnx

EXECUTED = ("compute", "elementwise", "move")  # roles that run a kernel of their own


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
                "cache_bandwidth_gbps": self.cache_bandwidth_gbps, "source": self.source, "notes": list(self.notes)}

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
                   profile.memory.bandwidth_gbps, 0.0, f"device profile {profile.name} (theoretical peaks)")


@dataclass
class NodeTime:
    node: NodeCost
    ms: float
    bound: str  # "compute" | "memory" (DRAM or cache) | "overhead" | "none"
    peak_precision: str

    def to_dict(self) -> dict:
        data = self.node.to_dict()
        data.update({"predicted_ms": round(self.ms, 6), "bound": self.bound, "peak_precision": self.peak_precision})
        return data


@dataclass
class Prediction:
    machine: Machine
    nodes: List[NodeTime]
    efficiency: Optional[float] = None  # measured / predicted, from the fleet; None: uncalibrated
    efficiency_samples: int = 0
    notes: List[str] = field(default_factory=list)

    @property
    def roofline_ms(self) -> float:
        return sum(n.ms for n in self.nodes)

    @property
    def ms(self) -> float:
        return self.roofline_ms * (self.efficiency or 1.0)

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

    def to_dict(self, top: Optional[int] = None) -> dict:
        ordered = sorted(self.nodes, key=lambda n: -n.ms)
        return {
            "machine": self.machine.to_dict(),
            "predicted_ms": round(self.ms, 6),
            "roofline_ms": round(self.roofline_ms, 6),
            "calibrated": self.calibrated,
            "efficiency": self.efficiency,
            "efficiency_samples": self.efficiency_samples,
            "bound_share": {k: round(v, 4) for k, v in self.bound_share().items()},
            "notes": list(self.notes),
            "nodes": [n.to_dict() for n in (ordered[:top] if top else ordered)],
        }


def node_time(node: NodeCost, machine: Machine) -> NodeTime:
    if node.role not in EXECUTED:
        return NodeTime(node, 0.0, "none", node.precision)
    peak, used = machine.peak(node.precision)
    compute_s = node.ops / (peak * 1e9)
    memory_s = node.bytes / (machine.bandwidth_for(node.bytes) * 1e9)
    overhead_s = machine.overhead_us * 1e-6
    if max(compute_s, memory_s) < overhead_s:
        bound = "overhead"
    else:
        bound = "compute" if compute_s >= memory_s else "memory"
    return NodeTime(node, (max(compute_s, memory_s) + overhead_s) * 1000.0, bound, used)


def predict(cost: GraphCost, machine: Machine, efficiency: Optional[float] = None, samples: int = 0) -> Prediction:
    times = [node_time(n, machine) for n in cost.nodes]
    notes = list(machine.notes)
    fallbacks = sorted({(t.node.precision, t.peak_precision) for t in times
                        if t.node.role in EXECUTED and t.node.precision != t.peak_precision})
    for wanted, used in fallbacks:
        notes.append(f"{machine.name} states no {wanted} peak; {wanted} nodes are timed at its {used} peak")
    if efficiency is None:
        notes.append("uncalibrated: no fleet measurement of this board to fit an efficiency factor from")
    return Prediction(machine, times, efficiency, samples, notes)


def predict_artifacts(profile: DeviceProfile, paths: Mapping[str, Path]) -> Dict[str, float]:
    """Uncalibrated roofline latency (ms) of each ONNX artifact on a board, by artifact key.

    Empty where the profile states no peak figures or bandwidth; an artifact whose graph cannot
    be analysed is left out.
    """
    try:
        board = machine_for(profile)
    except UserError:
        return {}
    predicted: Dict[str, float] = {}
    for key, path in paths.items():
        if str(path).endswith(".onnx"):
            try:
                predicted[key] = predict(analyze_onnx(path), board).roofline_ms
            except UserError:
                continue
    return predicted
