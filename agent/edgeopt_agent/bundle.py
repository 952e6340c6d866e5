"""An artifact made of several files (an ncnn `.param` and `.bin`) as one file: an uncompressed zip.

Manifest, signing, chunked transfer and the agent's store see one file with one hash; a user gets
the files back with `unzip model.fp32.ncnn`. Reading treats the archive as untrusted data: members
must be plain files with plain names (no folders, no `..`, no links, no duplicates), stored without
compression, and within `MAX_BUNDLE_BYTES` (4 GiB, or `$EDGEOPT_MAX_BUNDLE_BYTES`) in all, all
checked from the zip directory before a byte is read.

    write_bundle({"model.param": param_bytes, "model.bin": weights_path}, out / "model.fp32.ncnn")
    folder = extract(out / "model.fp32.ncnn", ("model.param", "model.bin"))  # a private temporary folder
    ...
    shutil.rmtree(folder)                                               # or: with extracted(...) as folder

`under=` extracts into a folder named for this process inside a root the caller owns (the agent's
`<data_dir>/bundles`), after removing what ended processes left there (extraction_folders.py): a
benchmark child killed while loading leaves nothing behind for good.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import tempfile
import zipfile
import zlib
from pathlib import Path
from typing import Dict, Iterator, Mapping, Sequence, Union

from . import extraction_folders
from .files import atomic_writer
from .errors import ArtifactError

MAX_BUNDLE_BYTES = 4 << 30
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # the same members give the same bytes, so the same hash


def max_bundle_bytes() -> int:
    value = os.environ.get("EDGEOPT_MAX_BUNDLE_BYTES")
    return int(value) if value and value.isdigit() else MAX_BUNDLE_BYTES


def write_bundle(members: Mapping[str, Union[bytes, Path]], target: Union[str, Path]) -> Path:
    """Write `members` (name: bytes, or a file to copy) as one uncompressed zip at `target`, atomically."""
    target = Path(target)
    for name in members:
        if not _PLAIN_NAME.match(name):
            raise ValueError(f"bundle member names are plain file names, got {name!r}")
    with atomic_writer(target) as handle, zipfile.ZipFile(handle, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, content in members.items():
            info = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
            info.external_attr = (stat.S_IFREG | 0o644) << 16
            data = content.read_bytes() if isinstance(content, Path) else bytes(content)
            archive.writestr(info, data)
    return target


def member_sizes(path: Union[str, Path]) -> Dict[str, int]:
    """The members of a bundle and their sizes, checked (see the module's rules); nothing is extracted."""
    path = Path(path)
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise ArtifactError(f"{path.name} is not an edgeopt bundle (an uncompressed zip): {exc}") from None
    with archive:
        return _checked(path.name, archive.infolist(), path.stat().st_size)


def _checked(where: str, infos: Sequence[zipfile.ZipInfo], file_size: int) -> Dict[str, int]:
    sizes: Dict[str, int] = {}
    for info in infos:
        name = info.filename
        if not _PLAIN_NAME.match(name):
            raise ArtifactError(f"{where} holds {name!r}: bundle members must be plain file names (no folders or '..')")
        if name in sizes:
            raise ArtifactError(f"{where} holds {name!r} twice")
        if stat.S_IFMT(info.external_attr >> 16) not in (0, stat.S_IFREG):  # 0: the writer gave no file type
            raise ArtifactError(f"{where}: member {name!r} is not a plain file (a link or a device)")
        if info.flag_bits & 0x1:
            raise ArtifactError(f"{where}: member {name!r} is encrypted; edgeopt bundles are not")
        if info.compress_type != zipfile.ZIP_STORED or info.compress_size != info.file_size:
            raise ArtifactError(f"{where}: member {name!r} is compressed; edgeopt bundles store their files as they are")
        sizes[name] = info.file_size
    total, limit = sum(sizes.values()), max_bundle_bytes()
    if total > min(limit, file_size):
        raise ArtifactError(f"{where} claims {total} bytes of members; the file has {file_size} and the limit is {limit}")
    return sizes


def extract(path: Union[str, Path], required: Sequence[str] = (), under: Union[str, Path, None] = None) -> Path:
    """The bundle's members in a new private folder (the caller removes it): in the system's
    temporary folder, or in `under` (see the module's notes); `required` names the members that must be there."""
    path = Path(path)
    sizes = member_sizes(path)
    missing = [name for name in required if name not in sizes]
    if missing:
        raise ArtifactError(f"{path.name} lacks {', '.join(missing)} (it holds {', '.join(sizes) or 'nothing'})")
    folder = _new_folder(under)
    try:
        with zipfile.ZipFile(path) as archive:
            for name, size in sizes.items():
                with archive.open(name) as source, open(folder / name, "xb") as target:
                    shutil.copyfileobj(source, target, 1 << 20)
                if (folder / name).stat().st_size != size:
                    raise ArtifactError(f"{path.name}: member {name!r} is not the size its directory entry says")
    except (zipfile.BadZipFile, zlib.error, RuntimeError, EOFError) as exc:  # a damaged or foreign zip
        shutil.rmtree(folder, ignore_errors=True)
        raise ArtifactError(f"{path.name} is not an intact edgeopt bundle: {exc}") from exc
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder


def _new_folder(under: Union[str, Path, None]) -> Path:
    """Mode 0700, from mkdtemp."""
    if under is None:
        return Path(tempfile.mkdtemp(prefix="edgeopt-bundle-"))
    return extraction_folders.new_folder(under)


@contextlib.contextmanager
def extracted(path: Union[str, Path], required: Sequence[str] = (),
              under: Union[str, Path, None] = None) -> Iterator[Path]:
    """`extract`, removed when the block ends."""
    folder = extract(path, required, under)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
