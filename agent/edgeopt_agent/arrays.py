"""Reading user array files (.npy, .npz) with a size cap checked before anything is inflated.

`numpy.load` trusts a file's own description of itself: a deflated .npz of 2 MB can declare a
member of gigabytes and numpy allocates and inflates it. Every reader of user arrays (calibration
and evaluation data on the host, a job's input file on the board) goes through `read_arrays`,
which checks, before reading a member's data:

- its declared uncompressed size in the zip directory (`ZipInfo.file_size`),
- its .npy header: shape x itemsize (what numpy would allocate),

each against what is left of the cap (`MAX_ARRAY_BYTES`, 4 GiB by default, or
``$EDGEOPT_MAX_ARRAY_BYTES``), and then inflates no more than that: Python's zip reader stops
at the declared size, and the array is read as exactly the bytes its header declares. Before
any of that, what all members declare together must be what a file of its size can sensibly hold:
at most INFLATION_RATIO times its size on disk, or INFLATION_FLOOR (a zip of zeros deflates about
1000:1, real data a few times at most), so a small file cannot make the reader inflate gigabytes
under the cap. Pickled (object) arrays are refused as before (`allow_pickle=False`).

Standard library and numpy only: the board and the host share it.
"""
from __future__ import annotations

import collections

import ast
import os
import struct
import zipfile
from pathlib import Path
from typing import IO, Callable, Dict, Optional, Tuple, Union

import numpy as np

from .errors import UserError

MAX_ARRAY_BYTES = 4 << 30
MAX_ARRAY_BYTES_ENV = "EDGEOPT_MAX_ARRAY_BYTES"
NPY_MAGIC = b"\x93NUMPY"
ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
_MAX_HEADER_BYTES = 1 << 16
# What an .npz's members may declare together: INFLATION_RATIO times the file's size, at least
# INFLATION_FLOOR (np.savez stores members as they are; np.savez_compressed of real data deflates
# them a few times at most).
INFLATION_RATIO = 64
INFLATION_FLOOR = 256 << 20
_READ_BYTES = 1 << 20


class ArrayFileTooLarge(UserError):
    """An array file declares more data than the cap allows."""


def max_array_bytes() -> int:
    """The cap: $EDGEOPT_MAX_ARRAY_BYTES when set (bytes, a positive integer), else MAX_ARRAY_BYTES."""
    value = os.environ.get(MAX_ARRAY_BYTES_ENV)
    if value is None or not value.strip():
        return MAX_ARRAY_BYTES
    try:
        cap = int(value)
    except ValueError:
        cap = 0
    if cap <= 0:
        raise UserError(f"${MAX_ARRAY_BYTES_ENV} is {value!r}; give the most bytes an array file may hold "
                        f"as a positive integer (default {MAX_ARRAY_BYTES})")
    return cap


def read_arrays(path: Union[str, Path], what: str = "array file", max_bytes: Optional[int] = None,
                too_large: Callable[[str], Exception] = ArrayFileTooLarge) -> Tuple[bool, Dict[str, np.ndarray]]:
    """(is_npz, arrays) from a .npy (one array, key "") or .npz (member name without ".npy" -> array).

    Over the cap: `too_large(message)` (one line naming the member, its size and the cap). A file
    that is not a readable array file raises ValueError, OSError, EOFError or zipfile.BadZipFile,
    as numpy.load does, for the caller to word.
    """
    cap = max_array_bytes() if max_bytes is None else max_bytes
    path = Path(path)
    with open(path, "rb") as handle:
        magic = handle.read(len(NPY_MAGIC))
        if magic == NPY_MAGIC:
            handle.seek(0)
            return False, {"": _read_member(handle, "", what, path, cap, None, too_large)}
    if magic[:4] not in ZIP_MAGIC:
        # Neither .npy nor .npz: numpy.load says what it is not (and never unpickles it).
        loaded = np.load(path, allow_pickle=False)
        raise ValueError(f"not a .npy or .npz file (numpy read a {type(loaded).__name__})")
    arrays: Dict[str, np.ndarray] = {}
    left = cap
    with zipfile.ZipFile(path) as archive:
        names = [info.filename for info in archive.infolist()]
        duplicated = sorted(n for n, count in collections.Counter(names).items() if count > 1)
        if duplicated:
            raise ValueError(f"member {duplicated[0]!r} is in the archive more than once")
        declared, size = sum(i.file_size for i in archive.infolist() if not i.is_dir()), path.stat().st_size
        if declared > max(INFLATION_FLOOR, INFLATION_RATIO * size):
            raise too_large(f"{what} {path}: its members declare {_size(declared)} in all, more than a file of "
                            f"{_size(size)} holds ({INFLATION_RATIO}x its size, at least {_size(INFLATION_FLOOR)}); "
                            f"save it uncompressed (numpy.savez) if it is meant")
        for info in archive.infolist():
            if info.is_dir():
                continue
            name = info.filename
            if info.file_size > left:
                raise too_large(_too_large(what, path, name, info.file_size, "as declared in the zip directory",
                                           cap, cap - left))
            with archive.open(info) as member:
                array = _read_member(member, name, what, path, left, info.file_size, too_large, cap - left)
            key = name[:-4] if name.endswith(".npy") else name
            arrays[key] = array
            left -= array.nbytes
    return True, arrays


def _read_member(handle: IO[bytes], name: str, what: str, path: Path, left: int, declared: Optional[int],
                 too_large: Callable[[str], Exception], used: int = 0) -> np.ndarray:
    """One .npy stream: header checked against `left`, then exactly the data it declares."""
    dtype, shape, fortran, header_bytes = _header(handle, name)
    count = 1
    for dim in shape:
        count *= dim
    nbytes = count * dtype.itemsize
    if nbytes > left:
        raise too_large(_too_large(what, path, name, nbytes, f"by its .npy header (shape {list(shape)} x {dtype.itemsize} bytes)",
                                   used + left, used))
    if declared is not None and header_bytes + nbytes > declared:
        raise ValueError(f"member {name!r} declares {declared} bytes in the zip directory but its header "
                         f"{header_bytes + nbytes}")
    data = bytearray(nbytes)
    view, got = memoryview(data), 0
    while got < nbytes:
        block = handle.read(min(_READ_BYTES, nbytes - got))
        if not block:
            raise EOFError(f"{'member ' + repr(name) if name else 'the array'} ends after {got} of the {nbytes} data bytes its header declares")
        view[got:got + len(block)] = block
        got += len(block)
    array = np.frombuffer(data, dtype=dtype, count=count) if count else np.empty(0, dtype=dtype)
    if fortran:
        return array.reshape(shape[::-1]).transpose()
    return array.reshape(shape)


def _header(handle: IO[bytes], name: str) -> Tuple[np.dtype, Tuple[int, ...], bool, int]:
    """dtype, shape, fortran_order and the header's length, read and checked as data."""
    start = handle.read(8)
    name = name or "the array"
    if len(start) < 8 or start[:6] != NPY_MAGIC:
        raise ValueError(f"member {name!r} is not a .npy array")
    major = start[6]
    if major == 1:
        size_bytes, fmt, encoding = handle.read(2), "<H", "latin1"
    elif major in (2, 3):
        size_bytes, fmt, encoding = handle.read(4), "<I", "latin1" if major == 2 else "utf8"
    else:
        raise ValueError(f"member {name!r} has .npy format version {major}.{start[7]}, which numpy does not write")
    if len(size_bytes) != struct.calcsize(fmt):
        raise EOFError(f"member {name!r} ends inside its .npy header")
    length = struct.unpack(fmt, size_bytes)[0]
    if length > _MAX_HEADER_BYTES:
        raise ValueError(f"member {name!r} has a .npy header of {length} bytes")
    raw = handle.read(length)
    if len(raw) != length:
        raise EOFError(f"member {name!r} ends inside its .npy header")
    try:
        header = ast.literal_eval(raw.decode(encoding))
    except (ValueError, SyntaxError, UnicodeDecodeError, MemoryError, RecursionError) as exc:
        raise ValueError(f"member {name!r} has an unreadable .npy header ({type(exc).__name__})") from None
    if not isinstance(header, dict) or set(header) != {"descr", "fortran_order", "shape"}:
        raise ValueError(f"member {name!r} has a .npy header without exactly descr, fortran_order and shape")
    shape, fortran = header["shape"], header["fortran_order"]
    if (not isinstance(shape, tuple) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                for d in shape) or len(shape) > 64 or not isinstance(fortran, bool)):
        raise ValueError(f"member {name!r} has a .npy header with a bad shape or fortran_order")
    try:
        dtype = np.lib.format.descr_to_dtype(header["descr"])
    except (TypeError, ValueError) as exc:
        raise ValueError(f"member {name!r} has a .npy header with a bad dtype ({exc})") from None
    if dtype.hasobject:
        raise ValueError(f"member {name!r} holds Python objects, which are read only by unpickling "
                         "(allow_pickle=False)")
    return dtype, shape, fortran, 8 + len(size_bytes) + length


def _too_large(what: str, path: Path, name: str, size: int, how: str, cap: int, used: int) -> str:
    already = f", after {_size(used)} of earlier members" if used else ""
    member = f"member '{name}'" if name else "its array"
    return (f"{what} {path}: {member} holds {_size(size)} {how}{already}, over the cap of {_size(cap)} "
            f"for an array file; give a smaller file, or raise ${MAX_ARRAY_BYTES_ENV} (bytes) if it is meant")


def _size(count: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit} ({count} bytes)"
    return f"{count} bytes"
