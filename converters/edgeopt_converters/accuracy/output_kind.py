"""The kind an output is judged as, whether the user gave it, and the evidence that chose it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional


@dataclass(frozen=True)
class OutputKind:
    kind: str
    given: bool
    why: str  # the evidence sentence ("given" when the user said it)
    facts: Optional[Mapping[str, Any]] = field(default=None, compare=False)  # what the evidence found (a grid's layout)

    def describe(self) -> str:
        return self.kind if self.given else f"{self.kind} (inferred: {self.why})"

    def fact(self, key: str, default=None):
        return (self.facts or {}).get(key, default)
