"""Where a job's artifact comes from: checked to be inside the data dir and to match its sha256.

Nothing is loaded before both checks pass. Files named by path must lie under
``<data_dir>/models/``, never in the agent's own state (transfers, artifacts, agent.db). Every
artifact is run from the worker's own copy, ``<data_dir>/artifacts/<sha256>.<format>``, written
under a temp name and hashed on the way in, so the file run is exactly the file checked; the
copy is reused when the same file comes again.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Iterable

from ..files import READ_BYTES, atomic_writer, sha256_file
from ..wire import ArtifactRef, ProtocolError

INLINE_DIR = "artifacts"
MODELS_DIR = "models"  # the only place jobs may name files by path


class ArtifactDeliveryError(ProtocolError):
    """The job's artifact is missing, outside the data dir or not the file the job names."""


def confined_path(data_dir: Path, relative: str, what: str = "artifact") -> Path:
    """`relative` resolved inside `data_dir`; absolute paths, '..' and symlinks out are refused."""
    if "\x00" in relative:
        raise ArtifactDeliveryError(f"{what} path contains a NUL byte", kind="invalid_path")
    candidate = Path(relative)
    if candidate.is_absolute() or candidate.drive or ".." in candidate.parts:
        raise ArtifactDeliveryError(
            f"{what} path '{relative}' must be relative to the agent's data dir, without '..'", kind="invalid_path"
        )
    root = Path(data_dir).resolve()
    resolved = (root / candidate).resolve()
    if resolved != root and root not in resolved.parents:
        raise ArtifactDeliveryError(f"{what} path '{relative}' leads outside the agent's data dir", kind="invalid_path")
    return resolved


def model_path(data_dir: Path, relative: str, what: str = "artifact") -> Path:
    """`relative` resolved inside `<data_dir>/models/`, the only folder jobs may name files in."""
    resolved = confined_path(data_dir, relative, what)
    models = (Path(data_dir) / MODELS_DIR).resolve()
    if models not in resolved.parents:
        raise ArtifactDeliveryError(
            f"{what} path '{relative}' is not under {MODELS_DIR}/ in the agent's data dir; copy the file there",
            kind="invalid_path",
        )
    return resolved


def artifact_path(data_dir: Path, ref: ArtifactRef) -> Path:
    """Where the worker keeps its own copy of `ref`, however it arrived."""
    return Path(data_dir) / INLINE_DIR / f"{ref.sha256}.{ref.format}"


def held(target: Path, sha256: str) -> bool:
    """Whether `target` is already there with the expected contents."""
    return target.is_file() and sha256_file(target) == sha256


def materialize(ref: ArtifactRef, data_dir: Path) -> Path:
    """The verified local copy of `ref` (copied or written first unless already held)."""
    target = artifact_path(data_dir, ref)
    if ref.path is not None:
        source = model_path(data_dir, ref.path)
        if not source.is_file():
            raise ArtifactDeliveryError(f"artifact '{ref.path}' does not exist in the agent's data dir", kind="missing_artifact")
        if held(target, ref.sha256):
            return target
        with open(source, "rb") as handle:
            _store(iter(lambda: handle.read(READ_BYTES), b""), target, ref)
        return target
    data = ref.inline_bytes()
    actual = hashlib.sha256(data).hexdigest()
    if actual != ref.sha256:
        raise ArtifactDeliveryError(
            f"inline artifact has sha256 {actual}, the job expects {ref.sha256}; it was damaged on the way",
            kind="artifact_mismatch",
        )
    if not held(target, ref.sha256):
        _store([data], target, ref)
    return target


def _store(blocks: Iterable[bytes], target: Path, ref: ArtifactRef) -> None:
    """Write `blocks` to `target` through a temp file, renamed only if their sha256 is the job's."""
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    with atomic_writer(target, mode=0o600, durable=True) as out:
        for block in blocks:
            digest.update(block)
            out.write(block)
        if digest.hexdigest() != ref.sha256:
            raise ArtifactDeliveryError(
                f"artifact '{ref.path}' has sha256 {digest.hexdigest()}, the job expects {ref.sha256}; "
                "the file is corrupt or not the one the job names",
                kind="artifact_mismatch",
            )
