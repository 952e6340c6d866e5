"""A benchmark's latency distribution as a result carries it: log-spaced buckets, a few hundred bytes.

Bucket i holds the durations d (in ms) with GAMMA**(i-1) < d <= GAMMA**i. Its value,
2 * GAMMA**i / (GAMMA + 1), is within RELATIVE_ACCURACY (0.5 %) of every duration in it (the
DDSketch construction), so any percentile read back is within 0.5 % of the exact one, whatever
the spread, and two histograms of the same GAMMA merge by adding counts.

On the wire (a result's `latency_histogram`)::

    {"gamma": 1.01, "first": 231, "counts": [3, 17, 40, -12, 1], "count": 61}

`counts[k]` is the count of bucket `first + k`; a negative entry -z stands for z empty buckets, so
a tail far from the body costs a few characters. `count` is the number of durations.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Sequence, Tuple

from ..values import is_int, is_number
from .errors import ProtocolError

GAMMA = 1.01
RELATIVE_ACCURACY = (GAMMA - 1) / (GAMMA + 1)
MIN_MS = 1e-6  # shorter durations (a clock that did not tick) count as this
MAX_BUCKETS = 4096  # non-empty buckets one histogram may hold: 4096 at 1 % apart span 10^17
MAX_INDEX = 10 ** 6  # |bucket index|
MAX_COUNT = 10 ** 12


@dataclass(frozen=True)
class LatencyHistogram:
    """(bucket index, count) pairs, ascending by index, every count positive."""

    buckets: Tuple[Tuple[int, int], ...]
    gamma: float = GAMMA

    @classmethod
    def of_durations(cls, durations_ms: Iterable[float], gamma: float = GAMMA) -> "LatencyHistogram":
        counts: Dict[int, int] = {}
        log_gamma = math.log(gamma)
        for value in durations_ms:
            index = math.ceil(math.log(max(value, MIN_MS)) / log_gamma)
            counts[index] = counts.get(index, 0) + 1
        return cls(tuple(sorted(counts.items())), gamma)

    @property
    def count(self) -> int:
        return sum(n for _, n in self.buckets)

    @property
    def relative_accuracy(self) -> float:
        return (self.gamma - 1) / (self.gamma + 1)

    def value(self, index: int) -> float:
        """The value every duration of bucket `index` is read back as (ms)."""
        return 2 * self.gamma ** index / (self.gamma + 1)

    def percentile(self, percentile: float) -> float:
        """Nearest rank, as the benchmark's own percentiles: the bucket holding the ceil(p/100 * n)-th duration."""
        if not self.buckets:
            raise ValueError("an empty histogram has no percentiles")
        rank = max(1, math.ceil(percentile * self.count / 100))
        seen = 0
        for index, count in self.buckets:
            seen += count
            if seen >= rank:
                break
        return self.value(index)

    def merged(self, other: "LatencyHistogram") -> "LatencyHistogram":
        if other.gamma != self.gamma:
            raise ValueError(f"histograms of different bucket widths ({self.gamma} and {other.gamma}) do not merge")
        counts = dict(self.buckets)
        for index, count in other.buckets:
            counts[index] = counts.get(index, 0) + count
        return LatencyHistogram(tuple(sorted(counts.items())), self.gamma)

    def to_dict(self) -> Dict[str, Any]:
        encoded: List[int] = []
        previous = None
        for index, count in self.buckets:
            if previous is not None and index - previous > 1:
                encoded.append(-(index - previous - 1))
            encoded.append(count)
            previous = index
        return {"gamma": self.gamma, "first": self.buckets[0][0] if self.buckets else 0, "counts": encoded,
                "count": self.count}

    @classmethod
    def from_dict(cls, data: Any) -> "LatencyHistogram":
        """Checked: ProtocolError says what is wrong (a result's histogram is a board's word, like the rest)."""
        if not isinstance(data, Mapping) or set(data) != {"gamma", "first", "counts", "count"}:
            raise ProtocolError("a latency histogram is an object with exactly gamma, first, counts and count")
        gamma, first, counts, total = data["gamma"], data["first"], data["counts"], data["count"]
        if not is_number(gamma) or not 1 < gamma <= 2:
            raise ProtocolError(f"latency histogram 'gamma' must be a number in (1, 2], got {gamma!r}")
        if not is_int(first) or abs(first) > MAX_INDEX:
            raise ProtocolError(f"latency histogram 'first' must be an integer within ±{MAX_INDEX}")
        if not isinstance(counts, list) or len(counts) > 2 * MAX_BUCKETS:
            raise ProtocolError(f"latency histogram 'counts' must be a list of at most {2 * MAX_BUCKETS} integers")
        buckets = _decoded(first, counts)
        if not is_int(total) or total != sum(n for _, n in buckets):
            raise ProtocolError(f"latency histogram 'count' ({total!r}) is not the sum of its counts")
        return cls(tuple(buckets), float(gamma))


def _decoded(first: int, counts: Sequence[Any]) -> List[Tuple[int, int]]:
    buckets: List[Tuple[int, int]] = []
    index = first
    for entry in counts:
        if not is_int(entry) or entry == 0 or abs(entry) > MAX_COUNT:
            raise ProtocolError("latency histogram 'counts' must hold non-zero integers (a negative one skips "
                                "that many empty buckets)")
        if entry < 0:
            index -= entry
            continue
        if abs(index) > MAX_INDEX:
            raise ProtocolError(f"latency histogram buckets must lie within ±{MAX_INDEX}")
        buckets.append((index, entry))
        index += 1
    if len(buckets) > MAX_BUCKETS:
        raise ProtocolError(f"latency histogram holds more than {MAX_BUCKETS} buckets")
    return buckets
