"""The fleet tables as people read them (terminal) and as programs read them (JSON, CSV).

Each view is a list of columns: a header for the terminal, the key it reads, and how to show
it. JSON and CSV carry the store's values unformatted (times in seconds since the epoch).
"""
from __future__ import annotations

import csv
import io
import json
import math
import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..errors import UserError

DASH = "-"


@dataclass(frozen=True)
class Column:
    header: str
    show: Callable[[Mapping[str, Any]], str]


def _number(key: str, digits: int = 1) -> Callable[[Mapping[str, Any]], str]:
    def show(row: Mapping[str, Any]) -> str:
        value = row.get(key)
        if value is None:
            return DASH
        if value and abs(value) < 10 ** -digits * 10:
            return f"{value:.2g}"  # microsecond latencies would all print as 0.00
        return f"{value:,.{digits}f}"
    return show


def _text(key: str) -> Callable[[Mapping[str, Any]], str]:
    return lambda row: DASH if row.get(key) in (None, "") else str(row[key])


def ago(ts: Optional[float], now: Optional[float] = None) -> str:
    """'12 s ago', '5 min ago', '3 h ago', '2 d ago' (or 'in 4 s' for a clock ahead of ours)."""
    if ts is None:
        return DASH
    delta = (time.time() if now is None else now) - ts
    size = abs(delta)
    for limit, unit, span in ((120, "s", 1), (7200, "min", 60), (172800, "h", 3600), (math.inf, "d", 86400)):
        if size < limit:
            amount = f"{size / span:.0f} {unit}"
            return f"{amount} ago" if delta >= 0 else f"in {amount}"
    return DASH  # not reached


def clock(ts: Optional[float]) -> str:
    if ts is None:
        return DASH
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _runtimes(row: Mapping[str, Any]) -> str:
    return ", ".join(f"{name} {version}" for name, version in sorted((row.get("runtimes") or {}).items())) or DASH


def _state(row: Mapping[str, Any]) -> str:
    reason = row.get("state_reason")
    return row["state"] if not reason or row["state"] == "online" else f"{row['state']} ({reason})"


def _profile_check(row: Mapping[str, Any]) -> str:
    """Whether the device's profile describes its CPU, as its agent's newest status says."""
    check = row.get("profile_check")
    if not isinstance(check, Mapping) or check.get("ok") is None:
        return DASH  # no profile, an agent from before the check, or a check that failed
    if check["ok"]:
        return "ok"
    mismatch = check.get("mismatch") if isinstance(check.get("mismatch"), list) else []
    shown = "; ".join(str(m)[:200] for m in mismatch[:5]) + (f"; and {len(mismatch) - 5} more" if len(mismatch) > 5 else "")
    return f"MISMATCH: {shown}" if mismatch else "MISMATCH"


def _validity(row: Mapping[str, Any]) -> str:
    if not row.get("ok"):
        return f"failed: {row.get('error_kind') or 'error'}"
    if row.get("valid") is None:
        return DASH
    return "valid" if row["valid"] else "invalid: " + "; ".join(row.get("invalid_reasons") or [])


def _drop(row: Mapping[str, Any]) -> str:
    value = row.get("accuracy_drop_points")
    return DASH if value is None else f"{value:+.2f}"


def _power(row: Mapping[str, Any]) -> str:
    if row.get("power_w") is None:
        return DASH
    return f"{row['power_w']:.2f}" + (f" ({row['power_source']})" if row.get("power_source") else "")


def _key(row: Mapping[str, Any]) -> str:
    """The fingerprint of the board's pinned signing key, and of the other one its name was used with."""
    if not row.get("key"):
        return DASH
    shown = row["key"] + (" (provisioned)" if row.get("key_source") == "provisioned" else "")
    changed = row.get("key_changed")
    if changed:
        shown += (f"; other key {changed['fingerprint']}: {changed['messages']:,} message(s), last "
                  f"{ago(changed.get('last_at'))}")
    return shown


def _state_and_key(row: Mapping[str, Any]) -> str:
    """The state, flagged when messages came under the board's name signed by another key than its pinned
    one (refused until `edgeopt fleet pin-key`): at every terminal width."""
    return _state(row) + (" · KEY CHANGED" if row.get("key_changed") else "")


DEVICES = (
    Column("device", _text("device_id")),
    Column("profile", _text("profile")),
    Column("profile check", _profile_check),
    Column("state", _state_and_key),
    Column("key", _key),
    Column("last seen", lambda r: ago(r.get("last_seen"))),
    Column("agent", _text("agent_version")),
    Column("runtimes", _runtimes),
    Column("temp °C", _number("temperature_c")),
    Column("missing msgs", lambda r: str(r.get("missing_messages") or 0)),
)

def build_label(row: Mapping[str, Any]) -> str:
    """The build a result measured: the version it was given, else the start of its build id."""
    if row.get("build_version"):
        return str(row["build_version"])
    return str(row["build_id"])[:12] if row.get("build_id") else DASH


RESULTS = (
    Column("model", _text("model")),
    Column("device", _text("device_id")),
    Column("profile", _text("profile")),
    Column("artifact", _text("artifact_key")),
    Column("format", lambda r: " ".join(r[k] for k in ("format", "precision") if r.get(k)) or DASH),
    Column("runtime", _text("runtime")),  # what the board ran it with, after any fallback
    Column("threads", _text("threads")),
    Column("p50 ms", _number("p50_ms", 2)),
    Column("p90 ms", _number("p90_ms", 2)),
    Column("p99 ms", _number("p99_ms", 2)),
    Column("inf/s", _number("throughput_ips", 1)),
    Column("peak MB", _number("peak_rss_mb", 0)),
    Column("mJ/inf", _number("energy_per_inference_mj", 2)),
    Column("acc drop pts", _drop),
    Column("valid", _validity),
    Column("build", build_label),  # the version it was given, else the start of its id (fleet compare's names)
)

# Columns a narrow terminal leaves out first, in that order (--json and --csv keep everything).
DEVICES_OPTIONAL = ("key", "agent", "runtimes", "missing msgs", "temp °C")
RESULTS_OPTIONAL = ("p90 ms", "peak MB", "inf/s", "profile", "format", "mJ/inf", "threads", "runtime", "build")

TELEMETRY = (
    Column("time (UTC)", lambda r: clock(r.get("ts"))),
    Column("device", _text("device_id")),
    Column("seq", _text("seq")),
    Column("cpu %", _number("cpu_percent")),
    Column("mem used MB", _number("memory_used_mb", 0)),
    Column("temp °C", _number("temperature_c")),
    Column("power W", _power),
)

GAPS = (
    Column("device", _text("device_id")),
    Column("kind", _text("kind")),
    Column("missing seqs", lambda r: f"{r['first_missing_seq']}" if r["first_missing_seq"] == r["last_missing_seq"]
           else f"{r['first_missing_seq']}-{r['last_missing_seq']}"),
    Column("detected", lambda r: ago(r.get("detected_at"))),
    Column("filled", lambda r: ago(r["filled_at"]) if r.get("filled_at") else "no"),
)


def cells(columns: Sequence[Column], rows: Sequence[Mapping[str, Any]]) -> Tuple[List[str], List[List[str]]]:
    """Headers and the formatted cells of every row."""
    return [c.header for c in columns], [[c.show(row) for c in columns] for row in rows]


def to_json(rows: Any) -> str:
    return json.dumps(rows, indent=2, sort_keys=False, default=str)


def to_csv(rows: Sequence[Mapping[str, Any]], drop: Sequence[str] = ()) -> str:
    """Flat CSV: one column per key; lists and objects are written as JSON."""
    keys: List[str] = []
    for row in rows:
        keys.extend(k for k in row if k not in keys and k not in drop)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(keys)
    for row in rows:
        writer.writerow([_csv_value(row.get(k)) for k in keys])
    return out.getvalue()


def _csv_value(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return value


_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|min|h|d)$")
_SPANS: Dict[str, float] = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


def parse_since(text: str, now: Optional[float] = None, option: str = "--since") -> float:
    """'30s', '10m', '2h', '1d' back from now; seconds since the epoch; or an ISO 8601 time (UTC if no zone)."""
    value = text.strip()
    match = _RELATIVE.match(value.lower())
    if match:
        return (time.time() if now is None else now) - float(match.group(1)) * _SPANS[match.group(2)]
    try:
        return float(value)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise UserError(f"{option} '{text}' is not a time: use 30s, 10m, 2h, 1d, seconds since the epoch, "
                        "or an ISO time such as 2024-05-01T12:00:00") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.timestamp()


# --- fleet compare -------------------------------------------------------------------------------------


def comparison_rows(comparison: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """One flat row per board, then per profile, of a comparison (`releases.Comparison.to_dict()`): what
    the table shows and --csv writes."""
    rows: List[Dict[str, Any]] = []
    for board in comparison["boards"]:
        base, cand = board["baseline"], board["candidate"]
        rows.append({"scope": "board", "device_id": board["device_id"], "profile": board["profile"],
                     "artifact": board["artifact"], **_ratio_columns(board["ratios"]),
                     "memory_change": board["memory_change"], "energy_change": board["energy_change"],
                     "baseline_runs": base["counted"], "candidate_runs": cand["counted"],
                     "left_out": len(base["left_out"]) + len(cand["left_out"]),
                     "baseline_runtime": ", ".join(base["runtimes"]), "candidate_runtime": ", ".join(cand["runtimes"]),
                     "baseline_agent": ", ".join(base["agent_versions"]), "candidate_agent": ", ".join(cand["agent_versions"]),
                     "verdict": board["verdict"], "evidence": board["evidence"],
                     "reason": "; ".join(filter(None, [board["reason"], *board["notes"]]))})
    for profile in comparison["profiles"]:
        rows.append({"scope": "profile", "device_id": f"{len(profile['boards'])} board(s)", "profile": profile["profile"],
                     "artifact": None, **_ratio_columns(profile["ratios"]),
                     "memory_change": profile["memory_change"], "energy_change": profile["energy_change"],
                     "verdict": profile["verdict"], "evidence": "histograms",
                     "reason": "geometric mean over " + ", ".join(profile["boards"])})
    return rows


def _ratio_columns(ratios: Mapping[str, Any]) -> Dict[str, Any]:
    columns: Dict[str, Any] = {}
    for metric in ("p50", "p90", "p99"):
        found = ratios.get(metric) or {}
        columns[f"baseline_{metric}_ms"] = found.get("baseline_ms")
        columns[f"candidate_{metric}_ms"] = found.get("candidate_ms")
        columns[f"{metric}_ratio"] = found.get("ratio")
        columns[f"{metric}_low"] = found.get("low")
        columns[f"{metric}_high"] = found.get("high")
    return columns


def _ratio(metric: str) -> Callable[[Mapping[str, Any]], str]:
    def show(row: Mapping[str, Any]) -> str:
        ratio = row.get(f"{metric}_ratio")
        if ratio is None:
            return DASH
        if row.get(f"{metric}_low") is None:
            return f"{ratio:.3f} (no interval)"
        return f"{ratio:.3f} [{row[f'{metric}_low']:.3f}–{row[f'{metric}_high']:.3f}]"
    return show


def _percent_change(key: str) -> Callable[[Mapping[str, Any]], str]:
    return lambda row: DASH if row.get(key) is None else f"{round(row[key] * 100, 1) + 0.0:+.1f}%"  # never -0.0


def _latencies(metric: str) -> Callable[[Mapping[str, Any]], str]:
    def show(row: Mapping[str, Any]) -> str:
        base, cand = row.get(f"baseline_{metric}_ms"), row.get(f"candidate_{metric}_ms")
        if base is None or cand is None:
            return DASH
        return f"{short_ms(base)} → {short_ms(cand)}"
    return show


def short_ms(value: float) -> str:
    """A latency in ms with three significant digits (0.00412, 4.12, 41.2, 412)."""
    return f"{value:.3g}" if value < 1000 else f"{value:,.0f}"


def _runs(row: Mapping[str, Any]) -> str:
    if row.get("scope") != "board":
        return DASH
    left = f" ({row['left_out']} left out)" if row.get("left_out") else ""
    return f"{row.get('baseline_runs', 0)} / {row.get('candidate_runs', 0)}{left}"


def _verdict(row: Mapping[str, Any]) -> str:
    verdict = row.get("verdict") or DASH
    return verdict.upper() if verdict == "slower" else verdict


COMPARE = (
    Column("board", _text("device_id")),
    Column("profile", _text("profile")),
    Column("artifact", _text("artifact")),
    Column("p50 ms", _latencies("p50")),
    Column("p50 ratio [interval]", _ratio("p50")),
    Column("p90 ratio [interval]", _ratio("p90")),
    Column("p99 ratio [interval]", _ratio("p99")),
    Column("peak mem", _percent_change("memory_change")),
    Column("energy", _percent_change("energy_change")),
    Column("runs base / cand", _runs),
    Column("verdict", _verdict),
)
COMPARE_OPTIONAL = ("p99 ratio [interval]", "artifact", "p90 ratio [interval]", "energy", "profile", "peak mem",
                    "runs base / cand", "p50 ms")
