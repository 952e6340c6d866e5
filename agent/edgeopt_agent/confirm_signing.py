"""Signed delivery confirmations: the collector's certificate, and its signature on each confirm.

A confirm makes an agent forget measurements, so an agent with a trusted (fleet) key forgets
only on a confirm it can authenticate, whatever the broker lets others publish:

- the **collector certificate**: the fleet key (`edgeopt keys init`, the key that signs jobs)
  signs a collector's own Ed25519 public key, its name and validity (`certificate_statement`);
- each **confirm** is signed by that collector key over the device id, the envelope's seq and
  the whole body but `auth`: the committed and rejected ids and when it was issued
  (`confirm_statement`), and carries the certificate in `auth`.

Each statement starts with its own domain line, and a job's with another (`signing.DOMAIN`), so
no signature made for one can pass as another. The host builds (`edgeopt.fleet.collector_keys`)
and the board checks (`verify_confirm`) the same bytes, defined here.

Standard library only, except the `cryptography` package, imported when a signature is checked.
"""
from __future__ import annotations

import base64
import binascii
import math
import time
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional

from .errors import require
from .signing import ALGORITHM, TrustedKey, canonical, key_id
from .wire import ED25519_SIGNATURE_BYTES, Confirmation, Envelope, ProtocolError

CERTIFICATE_DOMAIN = b"edgeopt collector certificate v1\n"
CONFIRM_DOMAIN = b"edgeopt confirm signature v1\n"
CERTIFICATE_FIELDS = ("collector", "public_key", "issued_at", "expires_at", "signature")
AUTH_FIELDS = ("certificate", "signature")
MAX_CERTIFICATE_LIFETIME_S = 2 * 366 * 86400.0
# A signed confirm is acted on only this long after its `issued_at` (plus the clock skew), so a
# captured one cannot be replayed for the certificate's lifetime. Refusing a late one loses
# nothing: the agent keeps the measurements, sends them again, and the collector confirms the
# duplicates anew with a fresh signature (an agent offline longer gets its queued confirms late).
MAX_CONFIRM_AGE_S = 24 * 3600.0
MAX_COLLECTOR_NAME = 128
ED25519_PUBLIC_KEY_BYTES = 32

# Why a confirm was refused: each is counted apart in the agent's telemetry.
UNSIGNED = "unsigned_confirm"  # no `auth`: a plain confirm, to an agent that needs a signed one
CERTIFICATE_INVALID = "certificate_invalid"  # not certified by the trusted key, or malformed
CERTIFICATE_EXPIRED = "certificate_expired"  # outside its validity (clock skew allowed)
SIGNATURE_INVALID = "confirm_signature_invalid"  # not signed by the certified key, or changed since
WRONG_DEVICE = "wrong_device"  # signed for another device
CONFIRM_EXPIRED = "confirm_expired"  # its `issued_at` is older than MAX_CONFIRM_AGE_S, or in the future


class ConfirmRefused(ProtocolError):
    """A confirm the agent will not act on; `kind` says why."""


@dataclass(frozen=True)
class CollectorCertificate:
    collector: str
    public_key: bytes  # the collector's raw 32-byte Ed25519 public key
    issued_at: float
    expires_at: float
    fleet_key_id: str  # the key that signed it

    @property
    def key_id(self) -> str:
        return key_id(self.public_key)


def certificate_statement(certificate: Mapping[str, Any]) -> bytes:
    """The bytes the fleet key signs: the certificate without its `signature`."""
    return CERTIFICATE_DOMAIN + canonical({k: v for k, v in certificate.items() if k != "signature"})


def confirm_statement(device_id: str, seq: int, body: Mapping[str, Any]) -> bytes:
    """The bytes a collector key signs: which device, the envelope's seq, and the body but `auth`."""
    return CONFIRM_DOMAIN + canonical({"device_id": device_id, "seq": seq,
                                       "body": {k: v for k, v in body.items() if k != "auth"}})


def signature_dict(key_id_: str, raw_signature: bytes) -> Dict[str, str]:
    return {"alg": ALGORITHM, "key_id": key_id_, "value": base64.b64encode(raw_signature).decode("ascii")}


def parse_certificate(data: Any) -> CollectorCertificate:
    """The certificate's fields, checked for shape only (`verify_certificate` checks the signature)."""
    if not isinstance(data, dict) or sorted(data) != sorted(CERTIFICATE_FIELDS):
        raise ConfirmRefused("collector certificate must be an object with exactly "
                             + ", ".join(CERTIFICATE_FIELDS), kind=CERTIFICATE_INVALID)
    name = data["collector"]
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_COLLECTOR_NAME or not name.isprintable():
        raise ConfirmRefused(f"collector certificate 'collector' must be a name of 1-{MAX_COLLECTOR_NAME} "
                             "printable characters", kind=CERTIFICATE_INVALID)
    public_key = _b64(data["public_key"], ED25519_PUBLIC_KEY_BYTES, "collector certificate 'public_key'",
                      CERTIFICATE_INVALID)
    issued_at, expires_at = data["issued_at"], data["expires_at"]
    if not (_number(issued_at) and _number(expires_at) and issued_at < expires_at
            and expires_at - issued_at <= MAX_CERTIFICATE_LIFETIME_S):
        raise ConfirmRefused("collector certificate needs numeric 'issued_at' < 'expires_at', at most "
                             f"{MAX_CERTIFICATE_LIFETIME_S / 86400:.0f} days apart", kind=CERTIFICATE_INVALID)
    signer = _parse_signature(data["signature"], "collector certificate", CERTIFICATE_INVALID)
    return CollectorCertificate(name, public_key, float(issued_at), float(expires_at), signer["key_id"])


def verify_certificate(trusted: TrustedKey, data: Any, now: Optional[float] = None,
                       clock_skew_s: float = 300.0) -> CollectorCertificate:
    """The certificate, when the trusted fleet key signed it and it is valid now (give or take the skew)."""
    certificate = parse_certificate(data)
    signature = data["signature"]
    if signature["key_id"] != trusted.key_id:
        raise ConfirmRefused(
            f"collector '{certificate.collector}' is certified by key {signature['key_id']}, but this agent "
            f"trusts key {trusted.key_id}; issue its certificate with the fleet key (`edgeopt keys collector`)",
            kind=CERTIFICATE_INVALID)
    if not _verified(trusted.raw, base64.b64decode(signature["value"]), certificate_statement(data)):
        raise ConfirmRefused(f"collector '{certificate.collector}' certificate does not match its signature "
                             f"by key {trusted.key_id}: it was changed after it was issued", kind=CERTIFICATE_INVALID)
    now = time.time() if now is None else now
    if now > certificate.expires_at + clock_skew_s:
        raise ConfirmRefused(f"collector '{certificate.collector}' certificate expired "
                             f"{now - certificate.expires_at:.0f} s ago; issue a new one with `edgeopt keys collector`",
                             kind=CERTIFICATE_EXPIRED)
    if now < certificate.issued_at - clock_skew_s:
        raise ConfirmRefused(f"collector '{certificate.collector}' certificate is issued "
                             f"{certificate.issued_at - now:.0f} s in this board's future; check the clocks",
                             kind=CERTIFICATE_EXPIRED)
    return certificate


def verify_confirm(trusted: TrustedKey, envelope: Envelope, confirmation: Confirmation, device_id: str,
                   now: Optional[float] = None, clock_skew_s: float = 300.0,
                   max_age_s: float = MAX_CONFIRM_AGE_S) -> CollectorCertificate:
    """Refuse (ConfirmRefused) unless the confirm is for `device_id`, signed by a collector key that
    the trusted fleet key certified and that is valid now, and issued at most `max_age_s` ago and
    not in the future (give or take the skew either way); returns that collector's certificate."""
    if envelope.device_id != device_id:
        raise ConfirmRefused(f"confirm is for device '{envelope.device_id}', not this one ('{device_id}')",
                             kind=WRONG_DEVICE)
    auth = confirmation.auth
    if auth is None:
        raise ConfirmRefused(
            f"this agent forgets measurements only on confirms signed by a collector that its trusted key "
            f"{trusted.key_id} certified, and this one is unsigned; start the collector with its key "
            "(`edgeopt keys collector`, `edgeopt fleet serve --collector-key`)", kind=UNSIGNED)
    if sorted(auth) != sorted(AUTH_FIELDS):
        raise ConfirmRefused("confirm 'auth' must hold exactly 'certificate' and 'signature'", kind=SIGNATURE_INVALID)
    now = time.time() if now is None else now
    certificate = verify_certificate(trusted, auth["certificate"], now, clock_skew_s)
    signature = _parse_signature(auth["signature"], "confirm", SIGNATURE_INVALID)
    if signature["key_id"] != certificate.key_id:
        raise ConfirmRefused(f"confirm is signed by key {signature['key_id']}, not by collector "
                             f"'{certificate.collector}' (key {certificate.key_id})", kind=SIGNATURE_INVALID)
    statement = confirm_statement(envelope.device_id, envelope.seq, envelope.body)
    if not _verified(certificate.public_key, base64.b64decode(signature["value"]), statement):
        raise ConfirmRefused(f"confirm signature of collector '{certificate.collector}' does not match the "
                             "confirm: its device, seq or ids were changed after signing", kind=SIGNATURE_INVALID)
    issued_at = envelope.body.get("issued_at")  # signed (checked above); `parse_confirm` made it a number
    if not _number(issued_at):
        raise ConfirmRefused("a signed confirm needs a numeric 'issued_at'", kind=SIGNATURE_INVALID)
    if now - issued_at > max_age_s + clock_skew_s:
        raise ConfirmRefused(f"confirm of collector '{certificate.collector}' was issued {now - issued_at:.0f} s "
                             f"ago, more than the {max_age_s:g} s a confirm is valid: a late or replayed "
                             "one; the collector confirms the measurements again when they are re-sent",
                             kind=CONFIRM_EXPIRED)
    if issued_at - clock_skew_s > now:
        raise ConfirmRefused(f"confirm of collector '{certificate.collector}' is issued {issued_at - now:.0f} s "
                             f"in this board's future, beyond the {clock_skew_s:g} s allowed for clock skew; "
                             "check the clocks", kind=CONFIRM_EXPIRED)
    return certificate


def _verified(raw_public_key: bytes, raw_signature: bytes, message: bytes) -> bool:
    ed25519 = require("cryptography.hazmat.primitives.asymmetric.ed25519", "agent", "checking confirm signatures")
    exceptions = require("cryptography.exceptions", "agent", "checking confirm signatures")
    try:
        ed25519.Ed25519PublicKey.from_public_bytes(raw_public_key).verify(raw_signature, message)
    except exceptions.InvalidSignature:
        return False
    return True


def _parse_signature(data: Any, what: str, kind: str) -> Dict[str, str]:
    if not isinstance(data, dict) or sorted(data) != ["alg", "key_id", "value"]:
        raise ConfirmRefused(f"{what} 'signature' must be an object with exactly 'alg', 'key_id' and 'value'",
                             kind=kind)
    if data["alg"] != ALGORITHM:
        raise ConfirmRefused(f"{what} is signed with {data['alg']!r}; this agent checks {ALGORITHM}", kind=kind)
    if not isinstance(data["key_id"], str) or not 1 <= len(data["key_id"]) <= 64:
        raise ConfirmRefused(f"{what} signature 'key_id' must be a string of 1-64 characters", kind=kind)
    _b64(data["value"], ED25519_SIGNATURE_BYTES, f"{what} signature 'value'", kind)
    return data


def _b64(value: Any, size: int, what: str, kind: str) -> bytes:
    try:
        if not isinstance(value, str):
            raise ValueError("not a string")
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != size:
        raise ConfirmRefused(f"{what} must be the base64 of {size} bytes", kind=kind)
    return raw


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
