"""The collector's own key: it signs every delivery confirmation, and the fleet key certifies it.

An agent with a trusted (fleet) key forgets a measurement only on a confirm signed by a collector
key that the fleet key certified (`edgeopt_agent.confirm_signing` defines the bytes and checks
them on the board). `edgeopt keys collector NAME` issues one: a new Ed25519 private key (PKCS#8
PEM, mode 0600) and its certificate (JSON: the public key, NAME, issued/expiry, the fleet key's
signature) beside it. `edgeopt fleet serve` signs with it (`--collector-key`, or
$EDGEOPT_COLLECTOR_KEY, or the one in ~/.config/edgeopt/keys); on a host that holds the fleet
signing key and no collector key, it certifies a fresh key of its own in memory at each start.
"""
from __future__ import annotations

import base64
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Union

from edgeopt_agent import confirm_signing, signing, wire
from edgeopt_agent.files import write_atomically

from ..errors import UserError
from .keys import SigningKey, _crypto, default_dir, default_private_key, ed25519_private_key

COLLECTOR_KEY_ENV = "EDGEOPT_COLLECTOR_KEY"
PRIVATE_NAME = "edgeopt-collector.key"
CERTIFICATE_SUFFIX = ".cert"
DEFAULT_DAYS = 365.0
EPHEMERAL_LIFETIME_S = 30 * 86400.0  # a key certified in memory by `fleet serve`
RENEW_BEFORE_S = 86400.0  # an in-memory certificate is renewed this long (at most half its life) before it expires

PathLike = Union[str, Path]


def certificate_path(private_key: PathLike) -> Path:
    """Where the certificate of a collector key lives: beside it, `.cert` for `.key`."""
    return Path(private_key).with_suffix(CERTIFICATE_SUFFIX)


@dataclass(frozen=True)
class CollectorKeyFiles:
    private_key: Path
    certificate: Path
    collector: str
    key_id: str  # the collector key's
    fleet_key_id: str  # the key that certified it: the boards' trusted key
    expires_at: float


def issue_certificate(fleet_key: SigningKey, name: str, raw_public_key: bytes, lifetime_s: float,
                      now: Optional[float] = None) -> Dict[str, Any]:
    """A collector certificate: `raw_public_key` is collector `name`'s, signed by the fleet key."""
    if not 0 < lifetime_s <= confirm_signing.MAX_CERTIFICATE_LIFETIME_S:
        raise UserError(f"a collector certificate is valid for more than 0 and at most "
                        f"{confirm_signing.MAX_CERTIFICATE_LIFETIME_S / 86400:.0f} days; got {lifetime_s / 86400:g}")
    if not name or len(name) > confirm_signing.MAX_COLLECTOR_NAME or not name.isprintable():
        raise UserError(f"a collector name is 1-{confirm_signing.MAX_COLLECTOR_NAME} printable characters; "
                        f"got {name!r}")
    issued = round(time.time() if now is None else now, 3)
    certificate: Dict[str, Any] = {
        "collector": name,
        "public_key": _b64(raw_public_key),
        "issued_at": issued,
        "expires_at": round(issued + lifetime_s, 3),
    }
    certificate["signature"] = fleet_key.sign_collector_certificate(certificate)
    return certificate


def issue_collector_key(name: str, folder: Optional[PathLike] = None, fleet_key: Optional[PathLike] = None,
                        days: float = DEFAULT_DAYS, overwrite: bool = False) -> CollectorKeyFiles:
    """Write a new collector key and its certificate from the fleet key into `folder` (default
    ~/.config/edgeopt/keys); existing files stay unless `overwrite`, and symlinks are never written."""
    fleet_path = Path(fleet_key).expanduser() if fleet_key is not None else default_private_key()
    if fleet_path is None:
        raise UserError("no fleet signing key to certify the collector with; make one with `edgeopt keys init` "
                        "or pass --key FILE (the private key that signs your jobs)")
    signer = SigningKey.load(fleet_path)
    folder = Path(folder).expanduser() if folder is not None else default_dir()
    private_path = folder / PRIVATE_NAME
    cert_path = certificate_path(private_path)
    for path in (private_path, cert_path):
        if path.is_symlink():
            raise UserError(f"{path} is a symbolic link; refusing to write a key through it (remove it, or "
                            "pass another --dir)")
    existing = [p for p in (private_path, cert_path) if p.exists()]
    if existing and not overwrite:
        raise UserError(f"{existing[0]} already exists; pass --force to replace the collector key")
    serialization = _crypto("cryptography.hazmat.primitives.serialization")
    ed25519 = _crypto("cryptography.hazmat.primitives.asymmetric.ed25519")
    key = ed25519.Ed25519PrivateKey.generate()
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    certificate = issue_certificate(signer, name, raw, days * 86400.0)
    private_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_atomically(private_path, private_pem, mode=0o600)
        write_atomically(cert_path, json.dumps(certificate, indent=2, sort_keys=True) + "\n", mode=0o644)
    except OSError as exc:
        raise UserError(f"cannot write the collector key into {folder}: {exc.strerror}; pass a writable --dir") from exc
    return CollectorKeyFiles(private_path, cert_path, name, signing.key_id(raw), signer.key_id,
                             certificate["expires_at"])


class CollectorKey:
    """Signs confirms (`sign`, a `wire.ConfirmSigner`) and attaches its certificate."""

    def __init__(self, key: Any, certificate: Dict[str, Any], path: Optional[Path] = None,
                 fleet_key: Optional[SigningKey] = None):
        serialization = _crypto("cryptography.hazmat.primitives.serialization")
        self._key = key
        self.path = path
        self._fleet_key = fleet_key  # set for an in-memory key: renews its own certificate
        raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self.key_id = signing.key_id(raw)
        self._raw = raw
        self._set_certificate(certificate)

    def _set_certificate(self, certificate: Dict[str, Any]) -> None:
        try:
            parsed = confirm_signing.parse_certificate(certificate)
        except wire.ProtocolError as exc:
            raise UserError(f"collector certificate {self._where()} is not valid: {exc}; issue a new one with "
                            "`edgeopt keys collector`") from None
        if parsed.public_key != self._raw:
            raise UserError(f"collector certificate {self._where()} certifies key {parsed.key_id}, not this "
                            f"collector key ({self.key_id}); issue them together with `edgeopt keys collector`")
        self.certificate = certificate
        self.collector = parsed.collector
        self.fleet_key_id = parsed.fleet_key_id
        self.expires_at = parsed.expires_at

    def _where(self) -> str:
        return str(certificate_path(self.path)) if self.path else "(in memory)"

    @classmethod
    def load(cls, path: PathLike) -> "CollectorKey":
        """The private key at `path` and its certificate beside it (`.cert`)."""
        path = Path(path).expanduser()
        cert_path = certificate_path(path)
        try:
            data = path.read_bytes()
            certificate = json.loads(cert_path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise UserError(f"cannot read collector key {exc.filename}: {exc.strerror}; issue one with "
                            "`edgeopt keys collector NAME`") from exc
        except ValueError as exc:
            raise UserError(f"{cert_path} is not a collector certificate (JSON): {exc}") from exc
        return cls(ed25519_private_key(data, path, "edgeopt keys collector"), certificate, path)

    @classmethod
    def ephemeral(cls, fleet_key: SigningKey, name: str, lifetime_s: float = EPHEMERAL_LIFETIME_S) -> "CollectorKey":
        """A fresh key certified in memory by the fleet key, renewed by itself before it expires."""
        ed25519 = _crypto("cryptography.hazmat.primitives.asymmetric.ed25519")
        serialization = _crypto("cryptography.hazmat.primitives.serialization")
        key = ed25519.Ed25519PrivateKey.generate()
        raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return cls(key, issue_certificate(fleet_key, name, raw, lifetime_s), fleet_key=fleet_key)

    @property
    def expired(self) -> bool:
        """Past its certificate's expiry, with no fleet key here to renew it."""
        return self._fleet_key is None and time.time() > self.expires_at

    def sign(self, envelope: wire.Envelope) -> Dict[str, Any]:
        """The `auth` of a confirm envelope (its body as it is, without `auth`)."""
        lifetime = self.expires_at - float(self.certificate["issued_at"])
        if self._fleet_key is not None and time.time() > self.expires_at - min(RENEW_BEFORE_S, lifetime / 2):
            self._set_certificate(issue_certificate(self._fleet_key, self.collector, self._raw, lifetime))
        value = self._key.sign(confirm_signing.confirm_statement(envelope.device_id, envelope.seq, envelope.body))
        return {"certificate": self.certificate, "signature": confirm_signing.signature_dict(self.key_id, value)}

    def describe(self) -> str:
        days = (self.expires_at - time.time()) / 86400
        source = f"{self.path}" if self.path else "in memory"
        return (f"collector '{self.collector}' key {self.key_id} ({source}), certified by fleet key "
                f"{self.fleet_key_id}, " + (f"valid {days:.0f} more days" if days >= 0 else "EXPIRED"))


def default_collector_key() -> Optional[Path]:
    """$EDGEOPT_COLLECTOR_KEY, else the key `edgeopt keys collector` wrote by default, if it exists."""
    if os.environ.get(COLLECTOR_KEY_ENV):
        return Path(os.environ[COLLECTOR_KEY_ENV]).expanduser()
    candidate = default_dir() / PRIVATE_NAME
    return candidate if candidate.is_file() else None


def collector_key(path: Optional[PathLike], name: str) -> Optional[CollectorKey]:
    """The key `edgeopt fleet serve` signs confirms with: `path`, else the default collector key,
    else a key certified in memory by the fleet signing key on this host (named `name`); None when
    there is none: then its confirms are plain, and agents with a trusted key ignore them."""
    found = Path(path).expanduser() if path is not None else default_collector_key()
    if found is not None:
        return CollectorKey.load(found)
    fleet = default_private_key()
    if fleet is None:
        return None
    return CollectorKey.ephemeral(SigningKey.load(fleet), name)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")
