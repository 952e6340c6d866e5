"""What the board was set to around a run: clocks, power mode and temperature, from the sensors' telemetry.

The clock sensor itself reports clocks that drop during a run (its health issues); this adds
the settings to the result and notices a power mode changed under the run.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

from ..values import is_number

BOARD_SECTIONS = ("clocks", "nvpmodel")


def board_state(snapshot: Mapping[str, Any]) -> Dict[str, Any]:
    """The clock and power-mode sections of a SensorSuite snapshot (empty where the board has none)."""
    return {section: snapshot[section] for section in BOARD_SECTIONS if snapshot.get(section)}


def board_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> List[str]:
    """Why the settings after the run make its numbers untrustworthy, as invalid-reasons."""
    mode_before = (before.get("nvpmodel") or {}).get("mode")
    mode_after = (after.get("nvpmodel") or {}).get("mode")
    if mode_before is not None and mode_after is not None and mode_before != mode_after:
        return [f"the nvpmodel power mode changed during the run ({mode_before} -> {mode_after})"]
    return []


def board_fields(before: Mapping[str, Any], after: Mapping[str, Any]) -> Dict[str, Any]:
    """The result's "clocks" ({"before", "after"}) and "nvpmodel" (as at the start; None where unknown)."""
    clocks = None
    if before.get("clocks") or after.get("clocks"):
        clocks = {"before": before.get("clocks"), "after": after.get("clocks")}
    return {"clocks": clocks, "nvpmodel": before.get("nvpmodel")}


def thermal_fields(before: Mapping[str, Any], after: Mapping[str, Any],
                   health: Sequence[Optional[Mapping[str, Any]]]) -> Dict[str, Any]:
    """The result's "thermal": the hottest zone before and after the run (°C; None without a thermal
    sensor) and whether the board throttled at any point (which also makes the run invalid)."""
    return {"before_c": _hottest(before), "after_c": _hottest(after),
            "throttled": any(bool(h and h.get("throttled")) for h in health)}


def _hottest(snapshot: Mapping[str, Any]) -> Optional[float]:
    zones = snapshot.get("thermal") if isinstance(snapshot.get("thermal"), Mapping) else {}
    readings = [float(v) for v in zones.values() if is_number(v)]
    return max(readings) if readings else None
