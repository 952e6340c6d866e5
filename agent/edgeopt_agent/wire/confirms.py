"""Delivery confirmations: the collector tells a device which of its messages it committed.

The broker's PUBACK only says the broker has a message, and a broker that dies before saving
it loses it. So the agent keeps each telemetry and results message until the collector says,
on the device's confirm topic, that it committed it to its database (or already had it), or
that it rejected it for good (then sending it again would not help). Ids only, batched.

A collector with a key signs each confirm (`issued_at` and `auth`: its certificate from the fleet
key and its signature; `edgeopt_agent.confirm_signing` defines the signed bytes and checks them),
so an agent with a trusted key forgets a message only on a confirm from a collector the fleet
certified. This module only carries those fields; it checks no signature.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from .envelope import CONFIRM_TYPE, Envelope, is_message_id
from .errors import ProtocolError
from .topics import validate_device_id

MAX_CONFIRM_IDS = 1000  # per confirm message: ~40 KB of JSON at most
CONFIRM_FIELDS = ("committed", "rejected")
SIGNED_CONFIRM_FIELDS = ("issued_at", "auth")  # present together, in a signed confirm only
# Given the unsigned envelope (its body without `auth`), returns the body's `auth` object.
ConfirmSigner = Callable[[Envelope], Dict[str, Any]]


@dataclass(frozen=True)
class Confirmation:
    """Host -> device: message ids the collector committed, and those it rejected (id -> reason)."""

    committed: Tuple[str, ...]
    rejected: Dict[str, str]
    issued_at: Optional[float] = None  # when the collector signed it (signed confirms only)
    auth: Optional[Dict[str, Any]] = None  # certificate and signature, as sent; None: unsigned

    @property
    def ids(self) -> Tuple[str, ...]:
        """Every id the device may forget."""
        return self.committed + tuple(self.rejected)


def confirm_message(device_id: str, seq: int, committed: Any = (), rejected: Optional[Mapping[str, str]] = None,
                    signer: Optional[ConfirmSigner] = None, issued_at: Optional[float] = None) -> Envelope:
    """Host -> device: the device's messages (by envelope id) that are committed or rejected for good.

    With `signer` (the collector's key) the body also carries `issued_at` (default now) and the
    `auth` the signer returns for the envelope as it is without it."""
    committed, rejected = list(committed), dict(rejected or {})
    if len(committed) + len(rejected) > MAX_CONFIRM_IDS:
        raise ValueError(f"a confirm message lists at most {MAX_CONFIRM_IDS} ids; split the batch")
    body: Dict[str, Any] = {"committed": committed,
                            "rejected": [{"id": i, "reason": r} for i, r in rejected.items()]}
    envelope = Envelope(device_id=validate_device_id(device_id), seq=seq, type=CONFIRM_TYPE, body=body)
    if signer is not None:
        body["issued_at"] = round(time.time() if issued_at is None else issued_at, 3)
        body["auth"] = signer(envelope)
    return envelope


def parse_confirm(envelope: Envelope) -> Confirmation:
    body = envelope.body
    if envelope.type != CONFIRM_TYPE:
        raise ProtocolError(f"a '{envelope.type}' message on a confirm topic; expected '{CONFIRM_TYPE}'")
    if sorted(body) not in (sorted(CONFIRM_FIELDS), sorted(CONFIRM_FIELDS + SIGNED_CONFIRM_FIELDS)):
        raise ProtocolError("confirm body needs exactly 'committed' and 'rejected', and, when signed, "
                            "'issued_at' and 'auth'")
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
    issued_at, auth = body.get("issued_at"), body.get("auth")
    if "auth" in body:
        if isinstance(issued_at, bool) or not isinstance(issued_at, (int, float)) or not math.isfinite(issued_at):
            raise ProtocolError("confirm 'issued_at' must be a number (seconds since the epoch)")
        if not isinstance(auth, dict):
            raise ProtocolError("confirm 'auth' must be an object (the collector's certificate and signature)")
    return Confirmation(tuple(committed), {r["id"]: r["reason"][:200] for r in rejected},
                        issued_at=None if issued_at is None else float(issued_at), auth=auth)
