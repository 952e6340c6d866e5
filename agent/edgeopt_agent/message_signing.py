"""A board's own key, and its Ed25519 signature on every message it sends.

MQTT does not say who published a message, and on a broker without an ACL anyone may publish on
a board's topics. So every status, telemetry, results and transfer envelope an agent sends
carries `sig`, made with the board's own device key:

    {"alg": "ed25519", "public_key": "<base64 of the raw 32-byte key>", "value": "<base64 of 64 bytes>"}

over `message_statement`: the line `edgeopt device message v1` and a newline, then the envelope
without `sig` as canonical JSON (keys sorted, no spaces, ASCII). The collector pins each board's
key (on first sight, or from `edgeopt fleet provision`) and stores only messages that verify
under it; `public_key` in the message only says which key signed it.

The key is made at the agent's first start (PKCS#8 PEM, mode 0600, `device.key` in its data
dir, with `device.pub` beside it) unless its config names one (`device_key`, which `edgeopt fleet provision` writes).
Standard library only, except the `cryptography` package, imported when a key is loaded or a
signature checked.
"""
from __future__ import annotations

import base64
import binascii
import functools
import json
import os
import stat
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

from .errors import UserError, require
from .files import write_atomically
from .signing import ALGORITHM, canonical, key_id
from .values import finite
from .wire import ED25519_SIGNATURE_BYTES, Envelope, ProtocolError

DOMAIN = b"edgeopt device message v1\n"
SIGNATURE_FIELD = "sig"
SIGNATURE_KEYS = ("alg", "public_key", "value")
KEY_FILE = "device.key"
PUBLIC_KEY_BYTES = 32
# Why a message does not verify: each is a reason in the collector's `rejected` table.
UNSIGNED = "unsigned_message"  # no `sig`: an agent from before device keys, or anyone else
SIGNATURE_INVALID = "signature_invalid"  # a `sig` that is malformed or not over these bytes


class MessageSignatureError(ProtocolError):
    """A message that does not carry a valid signature of its own; `kind` says which way."""


def message_statement(document: Mapping[str, Any]) -> bytes:
    """The bytes a device key signs: the envelope as its JSON reads, without `sig` (a NaN or infinity,
    which a reader stores as null anyway, stands as null)."""
    unsigned = {k: v for k, v in document.items() if k != SIGNATURE_FIELD}
    try:
        return DOMAIN + canonical(unsigned)
    except ValueError:  # a NaN or infinity somewhere (never from an agent): walked only then
        return DOMAIN + canonical(finite(unsigned))


def fingerprint(raw_public_key: bytes) -> str:
    """A device key's short name, shown by the agent's status and `edgeopt fleet devices`."""
    return key_id(raw_public_key)


class DeviceKey:
    """A board's Ed25519 private key: signs what the board sends."""

    def __init__(self, private_key: Any, path: Optional[Path] = None):
        serialization = _crypto("cryptography.hazmat.primitives.serialization")
        self._key = private_key
        self.path = path
        self.public_key = private_key.public_key().public_bytes(serialization.Encoding.Raw,
                                                                serialization.PublicFormat.Raw)
        self._public_b64 = base64.b64encode(self.public_key).decode("ascii")

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.public_key)

    @classmethod
    def generate(cls) -> "DeviceKey":
        ed25519 = _crypto("cryptography.hazmat.primitives.asymmetric.ed25519")
        return cls(ed25519.Ed25519PrivateKey.generate())

    @classmethod
    def load(cls, path: Path) -> "DeviceKey":
        """The key in `path`: an unencrypted PEM Ed25519 private key that only its owner may read."""
        path = Path(path)
        try:
            info = os.lstat(path)
        except OSError as exc:
            raise UserError(f"cannot read the device key {path}: {exc.strerror}; give device_key the device.key "
                            "that `edgeopt fleet provision` wrote, or leave it out to make one") from None
        if stat.S_ISLNK(info.st_mode) or not stat.S_ISREG(info.st_mode):
            raise UserError(f"the device key {path} is not a regular file (a link is not followed); give the "
                            "file itself")
        if info.st_mode & 0o077:
            raise UserError(f"the device key {path} may be read by other users (mode {stat.S_IMODE(info.st_mode):04o}), "
                            f"who could then speak for this board: chmod 600 {path}")
        serialization = _crypto("cryptography.hazmat.primitives.serialization")
        ed25519 = _crypto("cryptography.hazmat.primitives.asymmetric.ed25519")
        try:
            key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        except (OSError, ValueError, TypeError) as exc:
            raise UserError(f"the device key {path} is not an unencrypted PEM private key ({exc}); move it away "
                            "to make a new one (the collector then sees a new key for this board)") from None
        if not isinstance(key, ed25519.Ed25519PrivateKey):
            raise UserError(f"the device key {path} holds a {type(key).__name__.replace('PrivateKey', '')} key; "
                            "a board signs with an Ed25519 key")
        return cls(key, path)

    @classmethod
    def load_or_create(cls, path: Path) -> "DeviceKey":
        """The key in `path`, made there (mode 0600, its public key beside it as .pub, for
        `edgeopt fleet pin-key`) when there is none."""
        path = Path(path)
        if os.path.lexists(path):
            return cls.load(path)
        made = cls.generate()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(path, made.private_pem(), mode=0o600, durable=True)
            os.chmod(path, 0o600)
            write_atomically(path.with_suffix(".pub"), made.public_pem(), mode=0o644)
        except OSError as exc:
            raise UserError(f"cannot write the device key {path}: {exc.strerror}; pass a writable --data-dir") from None
        made.path = path
        return made

    def private_pem(self) -> bytes:
        serialization = _crypto("cryptography.hazmat.primitives.serialization")
        return self._key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption())

    def public_pem(self) -> bytes:
        serialization = _crypto("cryptography.hazmat.primitives.serialization")
        return self._key.public_key().public_bytes(serialization.Encoding.PEM,
                                                   serialization.PublicFormat.SubjectPublicKeyInfo)

    def sign_document(self, document: Dict[str, Any]) -> Dict[str, Any]:
        """`document` (an envelope as its JSON reads) with its `sig`."""
        signature = self._key.sign(message_statement(document))
        return {**{k: v for k, v in document.items() if k != SIGNATURE_FIELD},
                SIGNATURE_FIELD: {"alg": ALGORITHM, "public_key": self._public_b64,
                                  "value": base64.b64encode(signature).decode("ascii")}}

    def encode(self, envelope: Envelope) -> bytes:
        """The envelope's bytes on the wire, signed. The statement is taken from the JSON as a reader
        parses it (non-finite numbers as null, tuples as lists), so what is checked is what is sent."""
        return self.sign_payload(envelope.encode())

    def sign_payload(self, payload: bytes) -> bytes:
        """A message's JSON, signed (a `sig` already there is replaced)."""
        document = json.loads(payload.decode("utf-8"))
        return json.dumps(self.sign_document(document), separators=(",", ":")).encode("utf-8")


def is_signed(document: Any) -> bool:
    return isinstance(document, dict) and SIGNATURE_FIELD in document


def verify_message(document: Any) -> bytes:
    """The raw public key that signed `document` (an envelope as its JSON reads); MessageSignatureError
    when it carries no signature, a malformed one, or one that is not over exactly these contents.
    Which key that is, and whether it is the board's, is the caller's to decide."""
    if not is_signed(document):
        raise MessageSignatureError("the message carries no device signature ('sig'); agents sign everything they "
                                    "send since device keys: upgrade the agent", kind=UNSIGNED)
    sig = document[SIGNATURE_FIELD]
    if not isinstance(sig, dict) or tuple(sorted(sig)) != SIGNATURE_KEYS:
        raise MessageSignatureError("message 'sig' must be an object with exactly 'alg', 'public_key' and 'value'",
                                    kind=SIGNATURE_INVALID)
    if sig["alg"] != ALGORITHM:
        raise MessageSignatureError(f"message is signed with {sig['alg']!r}; boards sign with {ALGORITHM}",
                                    kind=SIGNATURE_INVALID)
    public_key = _b64(sig["public_key"], PUBLIC_KEY_BYTES, "'public_key'")
    signature = _b64(sig["value"], ED25519_SIGNATURE_BYTES, "'value'")
    try:
        statement = message_statement(document)
    except (ValueError, TypeError, RecursionError):
        raise MessageSignatureError("the message cannot be put in canonical form to check its signature",
                                    kind=SIGNATURE_INVALID) from None
    exceptions = require("cryptography.exceptions", "fleet", "checking device signatures")
    try:
        _public_key(public_key).verify(signature, statement)
    except exceptions.InvalidSignature:
        raise MessageSignatureError(f"the message does not match its signature (key {fingerprint(public_key)}): "
                                    "it was changed after signing, or signed by someone else", kind=SIGNATURE_INVALID
                                    ) from None
    return public_key


@functools.lru_cache(maxsize=4096)  # a fleet's boards sign with a few keys, one each: made once per key
def _public_key(raw: bytes) -> Any:
    ed25519 = require("cryptography.hazmat.primitives.asymmetric.ed25519", "fleet", "checking device signatures")
    return ed25519.Ed25519PublicKey.from_public_bytes(raw)


def parse_public_key(value: Any) -> bytes:
    """A device key's raw 32 bytes from its base64 form (as `sig.public_key` carries it)."""
    return _b64(value, PUBLIC_KEY_BYTES, "'public_key'")


def _b64(value: Any, size: int, what: str) -> bytes:
    try:
        raw = base64.b64decode(value, validate=True) if isinstance(value, str) else b""
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != size:
        raise MessageSignatureError(f"message signature {what} must be the base64 of {size} bytes",
                                    kind=SIGNATURE_INVALID)
    return raw


def _crypto(module: str) -> Any:
    return require(module, "agent", "signing what this board sends (its device key)")
