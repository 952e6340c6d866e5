"""Delivery confirmations: the collector tells a device which of its messages it committed.

The broker's PUBACK only says the broker has a message, and a broker that dies before saving
it loses it. So the agent keeps each telemetry and results message until the collector says,
on the device's confirm topic, that it committed it to its database (or already had it), or
that it rejected it for good (then sending it again would not help). Batched.

Each entry names a message by its id *and* the sha256 of the bytes the collector stored or
rejected (`message_digest`): anyone can publish a copy of a board's message with the board's id
on an open broker, and the board forgets a message only when the digest is that of its own
bytes, so a confirm about someone else's copy makes it forget nothing.

A collector with a key signs each confirm (`issued_at` and `auth`: its certificate from the fleet
key and its signature; `edgeopt_agent.confirm_signing` defines the signed bytes and checks them),
so an agent with a trusted key forgets a message only on a confirm from a collector the fleet
certified. This module only carries those fields; it checks no signature.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, Optional, Tuple

from .envelope import CONFIRM_TYPE, Envelope, is_message_id, is_sha256
from .errors import ProtocolError
from .topics import validate_device_id

MAX_CONFIRM_IDS = 1000  # entries per confirm message: ~120 KB of JSON at most
CONFIRM_FIELDS = ("committed", "rejected")
SIGNED_CONFIRM_FIELDS = ("issued_at", "auth")  # present together, in a signed confirm only
COMMITTED_KEYS = ("digest", "id")
REJECTED_KEYS = ("digest", "id", "reason")
# Given the unsigned envelope (its body without `auth`), returns the body's `auth` object.
ConfirmSigner = Callable[[Envelope], Dict[str, Any]]
Delivery = Tuple[str, str]  # (message id, sha256 of the message's bytes)


@dataclass(frozen=True)
class Confirmation:
    """Host -> device: messages (id, digest) the collector committed, and those it rejected (with why)."""

    committed: Tuple[Delivery, ...]
    rejected: Tuple[Tuple[str, str, str], ...]  # (id, digest, reason)
    issued_at: Optional[float] = None  # when the collector signed it (signed confirms only)
    auth: Optional[Dict[str, Any]] = None  # certificate and signature, as sent; None: unsigned

    @property
    def deliveries(self) -> Tuple[Delivery, ...]:
        """Every (id, digest) the device may forget, when the digest is that of its own bytes."""
        return self.committed + tuple((i, d) for i, d, _ in self.rejected)


def confirm_message(device_id: str, seq: int, committed: Iterable[Delivery] = (),
                    rejected: Iterable[Tuple[str, str, str]] = (), signer: Optional[ConfirmSigner] = None,
                    issued_at: Optional[float] = None) -> Envelope:
    """Host -> device: the device's messages, as (id, digest), that are committed, and as
    (id, digest, reason) that are rejected for good.

    With `signer` (the collector's key) the body also carries `issued_at` (default now) and the
    `auth` the signer returns for the envelope as it is without it."""
    committed, rejected = list(committed), list(rejected)
    if len(committed) + len(rejected) > MAX_CONFIRM_IDS:
        raise ValueError(f"a confirm message lists at most {MAX_CONFIRM_IDS} messages; split the batch")
    body: Dict[str, Any] = {"committed": [{"id": i, "digest": d} for i, d in committed],
                            "rejected": [{"id": i, "digest": d, "reason": r} for i, d, r in rejected]}
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
    if not isinstance(committed, list) or not all(_entry(c, COMMITTED_KEYS) for c in committed):
        raise ProtocolError("confirm 'committed' must list {id, digest} objects (a message id: 32 lowercase hex "
                            "digits; the sha256 of its bytes: 64)")
    if not isinstance(rejected, list) or not all(
        _entry(r, REJECTED_KEYS) and isinstance(r["reason"], str) for r in rejected
    ):
        raise ProtocolError("confirm 'rejected' must list {id, digest, reason} objects")
    if len(committed) + len(rejected) > MAX_CONFIRM_IDS:
        raise ProtocolError(f"a confirm message lists at most {MAX_CONFIRM_IDS} messages")
    issued_at, auth = body.get("issued_at"), body.get("auth")
    if "auth" in body:
        if isinstance(issued_at, bool) or not isinstance(issued_at, (int, float)) or not math.isfinite(issued_at):
            raise ProtocolError("confirm 'issued_at' must be a number (seconds since the epoch)")
        if not isinstance(auth, dict):
            raise ProtocolError("confirm 'auth' must be an object (the collector's certificate and signature)")
    return Confirmation(tuple((c["id"], c["digest"]) for c in committed),
                        tuple((r["id"], r["digest"], r["reason"][:200]) for r in rejected),
                        issued_at=None if issued_at is None else float(issued_at), auth=auth)


def _entry(value: Any, keys: Tuple[str, ...]) -> bool:
    return (isinstance(value, dict) and tuple(sorted(value)) == keys and is_message_id(value["id"])
            and is_sha256(value["digest"]))
