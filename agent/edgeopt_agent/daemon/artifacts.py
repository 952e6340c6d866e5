"""Where a job's artifact comes from: checked to be inside the data dir and to match its sha256.

Nothing is loaded before both checks pass. Inline artifacts are written (temp name, then rename)
to ``<data_dir>/artifacts/<sha256>.<format>`` and reused when the same file comes again.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from ..protocol import ArtifactRef, ProtocolError

INLINE_DIR = "artifacts"
_CHUNK = 1 << 20


class ArtifactError(ProtocolError):
    """The job's artifact is missing, outside the data dir or not the file the job names."""


def confined_path(data_dir: Path, relative: str, what: str = "artifact") -> Path:
    """`relative` resolved inside `data_dir`; absolute paths, '..' and symlinks out are refused."""
    if "\x00" in relative:
        raise ArtifactError(f"{what} path contains a NUL byte", kind="invalid_path")
    candidate = Path(relative)
    if candidate.is_absolute() or candidate.drive or ".." in candidate.parts:
        raise ArtifactError(
            f"{what} path '{relative}' must be relative to the agent's data dir, without '..'", kind="invalid_path"
        )
    root = Path(data_dir).resolve()
    resolved = (root / candidate).resolve()
    if resolved != root and root not in resolved.parents:
        raise ArtifactError(f"{what} path '{relative}' leads outside the agent's data dir", kind="invalid_path")
    return resolved


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def materialize(ref: ArtifactRef, data_dir: Path) -> Path:
    """The verified local file for `ref` (written first when it came inline)."""
    if ref.path is not None:
        path = confined_path(data_dir, ref.path)
        if not path.is_file():
            raise ArtifactError(f"artifact '{ref.path}' does not exist in the agent's data dir", kind="missing_artifact")
        actual = sha256_file(path)
        if actual != ref.sha256:
            raise ArtifactError(
                f"artifact '{ref.path}' has sha256 {actual}, the job expects {ref.sha256}; "
                "the file is corrupt or not the one the job names",
                kind="artifact_mismatch",
            )
        return path
    data = ref.inline_bytes()
    actual = hashlib.sha256(data).hexdigest()
    if actual != ref.sha256:
        raise ArtifactError(
            f"inline artifact has sha256 {actual}, the job expects {ref.sha256}; it was damaged on the way",
            kind="artifact_mismatch",
        )
    folder = Path(data_dir) / INLINE_DIR
    target = folder / f"{ref.sha256}.{ref.format}"
    if target.is_file() and sha256_file(target) == ref.sha256:
        return target
    folder.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=folder, prefix=".incoming-")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return target
