"""Ed25519 signatures over jobs: the bytes that are signed, and checking them on the device.

`edgeopt deploy` signs and the agent checks the same bytes, `job_statement(body)`: canonical JSON
of the whole job body but its signature: the artifact (sha256, size, format, where it comes
from), the bench options, the target devices or profile, the job id, when it was issued and
when it expires, the model release and whether a downgrade is allowed, and `meta`. So nothing a
job asks of a board, nor what the fleet is told about the result, can be changed without the
private key. An agent configured with a trusted public key checks the signature before it
fetches, writes or loads anything of the artifact.

Standard library only, except the `cryptography` package, imported when a signature is checked.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

from .errors import MissingExtraError, UserError, require
from .values import finite
from .wire import BenchmarkJob, ProtocolError, Signature

ALGORITHM = "ed25519"
DOMAIN = b"edgeopt job signature v1\n"
# DER prefix of an Ed25519 SubjectPublicKeyInfo (RFC 8410): the raw 32-byte key follows it.
_SPKI_ED25519_PREFIX = bytes.fromhex("302a300506032b6570032100")
_PEM_BEGIN, _PEM_END = "-----BEGIN PUBLIC KEY-----", "-----END PUBLIC KEY-----"


class SignatureError(ProtocolError):
    """The job is unsigned, signed by another key, or not what was signed."""


def canonical(document: Mapping[str, Any]) -> bytes:
    """Keys sorted, no spaces, ASCII only; a non-finite number cannot be signed."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode("ascii")


def job_statement(body: Mapping[str, Any]) -> bytes:
    """The exact bytes a job's signature covers: its body without `signature`, as canonical JSON
    (keys sorted, no spaces, ASCII; non-finite numbers as null, as on the wire)."""
    return DOMAIN + canonical(finite({key: value for key, value in body.items() if key != "signature"}))


def key_id(raw_public_key: bytes) -> str:
    """A short name of a public key, shown on both sides so a wrong key is easy to spot."""
    return hashlib.sha256(raw_public_key).hexdigest()[:16]


@dataclass(frozen=True)
class TrustedKey:
    raw: bytes  # the 32-byte Ed25519 public key
    path: Optional[Path] = None

    @property
    def key_id(self) -> str:
        return key_id(self.raw)


def load_public_key(path: Path) -> TrustedKey:
    """Read an Ed25519 public key in PEM form (as `edgeopt keys init` writes it), without cryptography."""
    path = Path(path)
    try:
        text = path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read trusted key {path}: {getattr(exc, 'strerror', None) or exc}") from exc
    return TrustedKey(raw=parse_public_key_pem(text, str(path)), path=path)


def parse_public_key_pem(text: str, where: str = "public key") -> bytes:
    """The raw 32 bytes of a PEM "PUBLIC KEY" holding an Ed25519 key."""
    start, end = text.find(_PEM_BEGIN), text.find(_PEM_END)
    der = b""
    if 0 <= start < end:
        try:
            der = base64.b64decode("".join(text[start + len(_PEM_BEGIN):end].split()), validate=True)
        except (binascii.Error, ValueError):
            der = b""
    if len(der) != len(_SPKI_ED25519_PREFIX) + 32 or not der.startswith(_SPKI_ED25519_PREFIX):
        raise UserError(f"{where} is not an Ed25519 public key in PEM form; use the .pub file "
                        "that `edgeopt keys init` wrote")
    return der[len(_SPKI_ED25519_PREFIX):]


def ensure_available() -> None:
    """Fail at start-up, not at the first job, when signatures are wanted but cannot be checked."""
    if importlib.util.find_spec("cryptography") is None:
        raise MissingExtraError("cryptography", "agent", "checking job signatures (trusted_key)")


def verify(trusted: TrustedKey, signature: Signature, message: bytes) -> None:
    if signature.alg != ALGORITHM:
        raise SignatureError(f"job is signed with {signature.alg!r}; this agent checks {ALGORITHM}",
                             kind="signature_invalid")
    if signature.key_id != trusted.key_id:
        raise SignatureError(
            f"job is signed by key {signature.key_id}, but this agent trusts key {trusted.key_id}; "
            "deploy with the private key that matches the agent's trusted_key",
            kind="signature_invalid",
        )
    ed25519 = require("cryptography.hazmat.primitives.asymmetric.ed25519", "agent", "checking job signatures")
    exceptions = require("cryptography.exceptions", "agent", "checking job signatures")
    try:
        ed25519.Ed25519PublicKey.from_public_bytes(trusted.raw).verify(signature.raw(), message)
    except exceptions.InvalidSignature:
        raise SignatureError(
            f"job signature (key {signature.key_id}) does not match the job: it was changed after signing "
            "(artifact, bench options, target, job id, validity or meta)",
            kind="signature_invalid",
        ) from None


def check_signature(trusted: Optional[TrustedKey], job: BenchmarkJob) -> None:
    """Refuse a job unless it is signed, as a whole, by the trusted key; no-op when signatures are off."""
    if trusted is None:
        return
    if job.signature is None:
        raise SignatureError(
            f"this agent only runs signed jobs (trusted key {trusted.key_id}) and this one is unsigned; "
            "deploy it with `edgeopt deploy --key PRIVATE_KEY`",
            kind="unsigned_job",
        )
    verify(trusted, job.signature, job_statement(job.body))
