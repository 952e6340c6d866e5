"""Ed25519 key pairs for signing jobs: `edgeopt keys init` makes one, deploy signs with it.

The private key stays on the host (PKCS#8 PEM, readable by its owner only); the public key (PEM)
goes to every board, as the agent's `trusted_key`. What is signed is defined once, on the agent's
side: `edgeopt_agent.signing.job_statement`.
"""
from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Union

from edgeopt_agent import signing, wire
from edgeopt_agent.files import write_atomically

from ..errors import UserError, require

KEY_ENV = "EDGEOPT_SIGNING_KEY"
PRIVATE_NAME = "edgeopt-signing.key"
PUBLIC_NAME = "edgeopt-signing.pub"

PathLike = Union[str, Path]


def default_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "edgeopt" / "keys"


@dataclass(frozen=True)
class KeyPair:
    private_key: Path  # the PEM files
    public_key: Path
    key_id: str


def init_keys(folder: Optional[PathLike] = None, overwrite: bool = False) -> KeyPair:
    """Write a new key pair into `folder` (default ~/.config/edgeopt/keys); an existing one stays unless `overwrite`."""
    serialization = _crypto("cryptography.hazmat.primitives.serialization")
    ed25519 = _crypto("cryptography.hazmat.primitives.asymmetric.ed25519")
    folder = Path(folder).expanduser() if folder is not None else default_dir()
    private_path, public_path = folder / PRIVATE_NAME, folder / PUBLIC_NAME
    existing = [p for p in (private_path, public_path) if p.exists()]
    if existing and not overwrite:
        raise UserError(f"{existing[0]} already exists; pass --force to replace the key pair "
                        "(boards that trust the old public key will then refuse new deploys)")
    key = ed25519.Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
    public_pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                               serialization.PublicFormat.SubjectPublicKeyInfo)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_atomically(private_path, private_pem, mode=0o600)
        write_atomically(public_path, public_pem, mode=0o644)
    except OSError as exc:
        raise UserError(f"cannot write the key pair into {folder}: {exc.strerror}; pass a writable --dir") from exc
    raw = signing.parse_public_key_pem(public_pem.decode("ascii"))
    return KeyPair(private_path, public_path, signing.key_id(raw))


def default_private_key() -> Optional[Path]:
    """$EDGEOPT_SIGNING_KEY, else the key `edgeopt keys init` wrote by default, if it exists."""
    if os.environ.get(KEY_ENV):
        return Path(os.environ[KEY_ENV]).expanduser()
    candidate = default_dir() / PRIVATE_NAME
    return candidate if candidate.is_file() else None


class SigningKey:
    def __init__(self, key: Any, path: Optional[Path] = None):
        serialization = _crypto("cryptography.hazmat.primitives.serialization")
        self._key = key
        self.path = path
        raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self.key_id = signing.key_id(raw)

    @classmethod
    def load(cls, path: PathLike) -> "SigningKey":
        path = Path(path).expanduser()
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise UserError(f"cannot read signing key {path}: {exc.strerror}; make one with `edgeopt keys init`") from exc
        return cls(ed25519_private_key(data, path, "edgeopt keys init"), path)

    def sign_job(self, body: Mapping[str, Any]) -> wire.Signature:
        """The signature of a whole job body (all of it but a `signature` already there)."""
        value = self._key.sign(signing.job_statement(body))
        return wire.Signature(alg=signing.ALGORITHM, key_id=self.key_id, value=base64.b64encode(value).decode("ascii"))

    def sign_collector_certificate(self, certificate: Mapping[str, Any]) -> Dict[str, str]:
        """The `signature` of a collector certificate (edgeopt.deploy.collector_keys): its own domain,
        so it can never pass for a job's signature, nor a job's for it."""
        from edgeopt_agent import confirm_signing

        value = self._key.sign(confirm_signing.certificate_statement(certificate))
        return confirm_signing.signature_dict(self.key_id, value)


def ed25519_private_key(data: bytes, path: Path, made_by: str):
    """The Ed25519 private key in PEM `data` read from `path`; `made_by` is the command that writes
    such files, named in the one-line error."""
    serialization = _crypto("cryptography.hazmat.primitives.serialization")
    ed25519 = _crypto("cryptography.hazmat.primitives.asymmetric.ed25519")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise UserError(f"{path} is not an unencrypted PEM private key ({exc}); "
                        f"use the .key file that `{made_by}` wrote") from exc
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise UserError(f"{path} holds a {type(key).__name__.replace('PrivateKey', '')} key; edgeopt's jobs and "
                        f"confirmations are signed with Ed25519 keys, made by `{made_by}`")
    return key


def _crypto(module: str):
    return require(module, "fleet", "signing jobs")
