"""Where each speed figure comes from, said in words the report prints next to it.

Three sources, never mixed up: measured on the conversion host, predicted for a board by the
roofline, measured on a board by the fleet. Host timings speak for the target only when the
manifest says the host stands for it (same architecture, CPU runtimes, timing not skipped).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Tuple

from .text import text

PREDICTION_METHOD = "roofline"


@dataclass(frozen=True)
class HostEvidence:
    """What a conversion manifest says about its host's timings."""

    machine: str
    simd: Tuple[str, ...]
    target: str
    stands_for_target: bool
    why_not: str  # why the host does not stand for the target ("" when it does or nobody said)

    @property
    def host(self) -> str:
        """"x86_64; avx2 fma" — the host's architecture and speed-relevant CPU flags."""
        return f"{self.machine}; {' '.join(self.simd)}" if self.simd else self.machine

    @property
    def measured(self) -> str:
        return f"measured on the conversion host ({self.host})"

    @property
    def measured_briefly(self) -> str:
        """For a summary card: the architecture without the flags."""
        return f"measured on the conversion host ({self.machine})"

    @property
    def predicted(self) -> str:
        return predicted_label(self.target)

    @property
    def not_standing_for(self) -> str:
        """One clause: why host speed-ups are not the target's."""
        because = f": {self.why_not}" if self.why_not else ""
        return f"the conversion host ({self.machine}) does not stand for {self.target}{because}"


def predicted_label(target: str, method: str = PREDICTION_METHOD) -> str:
    return f"predicted for {target} ({method})"


def board_label(device: str) -> str:
    return f"measured on {device} by the fleet"


def host_evidence(manifest: Optional[Mapping[str, Any]]) -> Optional[HostEvidence]:
    """None without a manifest."""
    if not isinstance(manifest, Mapping):
        return None
    host = manifest.get("host") if isinstance(manifest.get("host"), Mapping) else {}
    rec = manifest.get("recommendation") if isinstance(manifest.get("recommendation"), Mapping) else {}
    target = text(manifest.get("device"), "the target")
    machine = text(host.get("machine"), "unknown architecture")
    simd = tuple(str(f) for f in host.get("simd") or () if isinstance(f, str)) if isinstance(host.get("simd"), list) else ()
    return HostEvidence(machine, simd, target, _stands_for_target(host, rec), _why_not(host, target, machine))


def _stands_for_target(host: Mapping[str, Any], rec: Mapping[str, Any]) -> bool:
    if isinstance(host.get("stands_for_target"), bool):
        return host["stands_for_target"]
    # Manifests from before `stands_for_target`: the recommendation's basis says the same.
    basis = rec.get("basis")
    if basis in ("measured", "predicted"):
        return basis == "measured"
    return host.get("matches_target") is True


def _why_not(host: Mapping[str, Any], target: str, machine: str) -> str:
    said = host.get("not_target_because")
    if isinstance(said, str) and said:
        return said
    if host.get("matches_target") is False:
        return f"{target} is not {machine}"
    return ""
