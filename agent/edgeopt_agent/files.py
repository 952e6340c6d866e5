"""File helpers shared by board and host: hashing a file, and writing one so readers never see half of it."""
from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import uuid
from pathlib import Path
from typing import IO, Any, Callable, Dict, Iterator, Optional, Union

from .errors import UserError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on boards with Python < 3.11
    import tomli as tomllib

READ_BYTES = 1 << 20


def sha256_file(path: Union[str, Path], chunk: int = READ_BYTES) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


@contextlib.contextmanager
def atomic_writer(path: Union[str, Path], binary: bool = True, mode: Optional[int] = None,
                  durable: bool = False) -> Iterator[IO]:
    """Open a temporary file beside `path`; on a clean exit it replaces `path`, on an error it is removed.

    mode: permission bits asked for, as in os.open (the umask still applies; default 0o666, what a
    plain open() gives). durable: fsync before the rename (state that must survive a power cut).
    """
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    fd = os.open(str(temporary), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666 if mode is None else mode)
    try:
        with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as handle:
            yield handle
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def write_atomically(path: Union[str, Path], data: Union[bytes, str], mode: Optional[int] = None,
                     durable: bool = False) -> None:
    """Write all of `data` to `path` so that a reader sees the old file or the new one, never a part."""
    with atomic_writer(path, binary=isinstance(data, bytes), mode=mode, durable=durable) as handle:
        handle.write(data)



def read_toml(path: Union[str, Path], what: str, error: Callable[[str], Exception] = UserError) -> Dict[str, Any]:
    """The TOML table in `path`, or `error` with one line naming `what` the file was meant to be."""
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{what} {path} is not valid TOML: {exc}") from exc
