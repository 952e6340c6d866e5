"""Delivery confirmations: the collector tells a device which of its messages it committed.

The broker's PUBACK only says the broker has a message, and a broker that dies before saving
it loses it. So the agent keeps each telemetry and results message until the collector says,
on the device's confirm topic, that it committed it to its database (or already had it), or
that it rejected it for good (then sending it again would not help). Ids only, batched.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

from .envelope import CONFIRM_TYPE, Envelope, is_message_id
from .errors import ProtocolError
from .topics import validate_device_id

MAX_CONFIRM_IDS = 1000  # per confirm message: ~40 KB of JSON at most


@dataclass(frozen=True)
class Confirmation:
    """Host -> device: message ids the collector committed, and those it rejected (id -> reason)."""

    committed: Tuple[str, ...]
    rejected: Dict[str, str]

    @property
    def ids(self) -> Tuple[str, ...]:
        """Every id the device may forget."""
        return self.committed + tuple(self.rejected)


def confirm_message(device_id: str, seq: int, committed: Any = (), rejected: Optional[Mapping[str, str]] = None
                    ) -> Envelope:
    """Host -> device: the device's messages (by envelope id) that are committed or rejected for good."""
    committed, rejected = list(committed), dict(rejected or {})
    if len(committed) + len(rejected) > MAX_CONFIRM_IDS:
        raise ValueError(f"a confirm message lists at most {MAX_CONFIRM_IDS} ids; split the batch")
    body = {"committed": committed, "rejected": [{"id": i, "reason": r} for i, r in rejected.items()]}
    return Envelope(device_id=validate_device_id(device_id), seq=seq, type=CONFIRM_TYPE, body=body)


def parse_confirm(envelope: Envelope) -> Confirmation:
    body = envelope.body
    if envelope.type != CONFIRM_TYPE:
        raise ProtocolError(f"a '{envelope.type}' message on a confirm topic; expected '{CONFIRM_TYPE}'")
    if sorted(body) != ["committed", "rejected"]:
        raise ProtocolError("confirm body needs exactly 'committed' and 'rejected'")
    committed, rejected = body["committed"], body["rejected"]
    if not isinstance(committed, list) or not all(is_message_id(i) for i in committed):
        raise ProtocolError("confirm 'committed' must list message ids (32 lowercase hex digits)")
    if not isinstance(rejected, list) or not all(
        isinstance(r, dict) and sorted(r) == ["id", "reason"] and is_message_id(r["id"])
        and isinstance(r["reason"], str) for r in rejected
    ):
        raise ProtocolError("confirm 'rejected' must list {id, reason} objects")
    if len(committed) + len(rejected) > MAX_CONFIRM_IDS:
        raise ProtocolError(f"a confirm message lists at most {MAX_CONFIRM_IDS} ids")
    return Confirmation(tuple(committed), {r["id"]: r["reason"][:200] for r in rejected})
