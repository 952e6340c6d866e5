"""Read an ExportedProgram archive (.pt2) as data and hand torch only what was checked.

`torch.export.load` can run code from the file in several ways: it unpickles weights or constants
marked `use_pickle`, custom and opaque objects, legacy-format weight files and sample inputs that
`weights_only` cannot load; it loads AOTInductor shared libraries; it passes every `expr_str` of
the program to `sympy.sympify` (which calls `eval`); it compiles the program's `guards_code` into
a Python function that runs on every call; its tree specs are JSON whose objects may import
modules by name; and it resolves operators by name. Zip readers also disagree (Python's `zipfile`
keeps the last member of a name, torch's reader the first), so checking one view and loading
another proves nothing.

So the archive is read once here, by `ZipInfo`: member names are plain paths (no `.` or `..`, no
duplicates, one top-level folder), and what the members declare they inflate to is bounded by the
file's own size before a byte is inflated; any member this module does not know is refused; every
known member is checked, and whatever torch would evaluate, decode again or resolve is read into
edgeopt's own small trees and written anew (`pt2_program`, `pt2_expressions`, `pt2_treespec`, the
payload configs below); torch gets a fresh archive written from exactly the bytes that were checked
and the text edgeopt wrote (`checked_archive`). This is the first wall; the second is that the
archive is only ever loaded in an isolated child (`isolated_program`).
"""
from __future__ import annotations

import io
import json
import os
import re
import zipfile
from pathlib import Path
from typing import Any, Dict, List, Optional

from edgeopt_agent.errors import UserError, require

from .pt2_program import ProgramRefused, rewrite_program

_FOLDER = re.compile(r"[A-Za-z0-9_.-]+")
_PAYLOAD = {"data/weights/": re.compile(r"weight_\d+"), "data/constants/": re.compile(r"tensor_\d+")}
_FIXED_MEMBERS = {"archive_format", "archive_version", "byteorder", ".data/version", ".data/serialization_id"}
_MODEL = re.compile(r"models/([A-Za-z0-9_.-]+)\.json")
_EXTRA = re.compile(r"extra/[A-Za-z0-9_.-]+")
# What a file's members may declare they inflate to, in all: torch.export.save stores members
# uncompressed, so a real archive inflates to its own size; a deflated one gets some room.
INFLATION_RATIO = 4
INFLATION_FLOOR = 16 << 20
# Bytes per element of each dtype torch's serializer numbers (torch/_export/serde/schema.py ScalarType).
_ITEMSIZE = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 2, 7: 4, 8: 8, 9: 4, 10: 8, 11: 16, 12: 1, 13: 2, 28: 2,
             29: 1, 30: 1, 31: 1, 32: 1, 33: 1, 34: 4, 35: 8}
# JSON text per object or list at least (torch's programs have about 28).
BYTES_PER_CONTAINER = 8
_STRIDED = 7  # the only layout a payload tensor may have


def checked_archive(path: Path) -> io.BytesIO:
    """The archive's checked members, rewritten as a fresh .pt2 for torch.export.load."""
    members = _read_members(path)
    folder = _check_layout(path, members)
    relative = {name[len(folder) + 1:]: data for name, data in members.items()}
    for name, data in relative.items():
        written = _check_member(path, name, data, relative)
        if written is not None:
            members[f"{folder}/{name}"] = written
    rewritten = io.BytesIO()
    with zipfile.ZipFile(rewritten, "w", zipfile.ZIP_STORED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    rewritten.seek(0)
    return rewritten


def tensor_bytes(archive: bytes) -> int:
    """What the tensors of a checked archive (weights, constants, sample inputs) hold, in bytes."""
    with zipfile.ZipFile(io.BytesIO(archive)) as reader:
        return sum(info.file_size for info in reader.infolist()
                   if "/data/weights/" in info.filename or "/data/constants/" in info.filename
                   or "/data/sample_inputs/" in info.filename)


def _read_members(path: Path) -> Dict[str, bytes]:
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise UserError(f"{path} is not a .pt2 archive: {exc}") from None
    with archive:
        infos = _checked_directory(path, archive.infolist(), os.path.getsize(path))
        members: Dict[str, bytes] = {}
        for info in infos:
            try:
                members[info.filename] = archive.read(info)
            except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError) as exc:
                raise UserError(f"{path}: member {info.filename!r} cannot be read ({exc})") from None
    return members


def _checked_directory(path: Path, infos: List[zipfile.ZipInfo], size: int) -> List[zipfile.ZipInfo]:
    """The members to read, once their names and the sizes they declare are checked: nothing is inflated
    before this (a 3 MB file that inflates to gigabytes is refused here, at the cost of its directory)."""
    seen = set()
    for info in infos:
        if info.filename in seen:
            raise UserError(f"{path} is refused: it holds two members named {info.filename!r} "
                            f"(zip readers disagree on which one counts)")
        seen.add(info.filename)
        parts = info.filename.rstrip("/").split("/") if info.is_dir() else info.filename.split("/")
        if any(part in ("", ".", "..") for part in parts) or "\\" in info.filename:
            raise UserError(f"{path} is refused: member {info.filename[:120]!r} is not a plain path "
                            f"(empty, '.' or '..' parts, or a backslash)")
    files = [info for info in infos if not info.is_dir()]
    _check_inflation(path, sum(info.file_size for info in files), size, "a .pt2")
    return files


def _check_inflation(path: Any, declared: int, size: int, what: str) -> None:
    limit = max(INFLATION_FLOOR, INFLATION_RATIO * size)
    if declared > limit:
        raise UserError(f"{path} is refused: its members declare {declared} bytes in all, more than {what} of "
                        f"{size} bytes inflates to ({INFLATION_RATIO}x its size, at least {INFLATION_FLOOR >> 20} MiB); "
                        f"save it again with torch.export.save, which stores members uncompressed")


def _check_layout(path: Path, members: Dict[str, bytes]) -> str:
    folders = {name.split("/", 1)[0] if "/" in name else "" for name in members}
    if len(folders) != 1 or "" in folders:
        shown = ", ".join(sorted(repr(f or "(top level)") for f in folders)) or "none"
        raise UserError(f"{path} is refused: a .pt2 from torch.export.save keeps every member in one "
                        f"top-level folder; this one has {shown}")
    folder = folders.pop()
    if not _FOLDER.fullmatch(folder):
        raise UserError(f"{path} is refused: unexpected top-level folder name {folder!r}")
    if members.get(f"{folder}/archive_format") != b"pt2":
        raise UserError(f"{path} is not a .pt2 from torch.export.save (no archive_format 'pt2')")
    if not any(_MODEL.fullmatch(name[len(folder) + 1:]) for name in members):
        raise UserError(f"{path} holds no exported program (no models/*.json); is it a .pt2 from torch.export.save?")
    return folder


def _check_member(path: Path, name: str, data: bytes, members: Dict[str, bytes]) -> Optional[bytes]:
    """Refuses a member edgeopt does not read; returns a program's or payload config's JSON as edgeopt
    rewrote it."""
    refuse = f"{path} is refused: {name}"
    folder, _, leaf = name.rpartition("/")
    folder += "/"
    if name in _FIXED_MEMBERS or _EXTRA.fullmatch(name):
        _utf8(path, name, data)
        return None
    model = _MODEL.fullmatch(name)
    if model:
        try:
            program = rewrite_program(_json(path, name, data))
        except ProgramRefused as exc:
            raise UserError(f"{refuse} {exc}; give file.py:factory or an .onnx file") from None
        for required in (f"data/sample_inputs/{model.group(1)}.pt", f"data/weights/{model.group(1)}_weights_config.json",
                         f"data/constants/{model.group(1)}_constants_config.json"):
            if required not in members:
                raise UserError(f"{path} is refused: {name} has no {required} (only current torch.export.save "
                                f"archives are read; legacy formats would be unpickled)")
        return json.dumps(program).encode()
    if folder == "data/sample_inputs/" and leaf.endswith(".pt"):
        _check_tensors_only(data, f"{path}: {name}")
        return None
    if folder in _PAYLOAD and leaf.endswith(("_weights_config.json", "_constants_config.json")):
        config = _payload_config(path, name, _json(path, name, data), _PAYLOAD[folder], members, folder)
        return json.dumps(config).encode()
    if folder in _PAYLOAD and _PAYLOAD[folder].fullmatch(leaf):
        return None  # raw tensor bytes, named by a checked config
    if name.endswith(".pt") or "custom_obj_" in leaf or "opaque_obj_" in leaf:
        raise UserError(f"{refuse} would make torch unpickle it; export the model without custom objects "
                        f"or give file.py:factory")
    raise UserError(f"{refuse} is not part of an exported program that edgeopt reads (AOTInductor "
                    f"libraries and other extras are refused); give file.py:factory or an .onnx file")


def _payload_config(path: Path, name: str, config: Any, allowed: "re.Pattern[str]",
                    members: Dict[str, bytes], folder: str) -> Dict[str, Any]:
    """A weights or constants config written anew: per tensor its file, whether it is a parameter and its
    strided layout, each tensor reaching no byte past its file (torch makes zeros of the declared size
    for an empty file, so an empty file holds an empty tensor)."""
    entries = config.get("config") if isinstance(config, dict) else None
    if not isinstance(entries, dict):
        raise UserError(f"{path}: {name} has no 'config' table")
    rebuilt: Dict[str, Any] = {}
    for key, meta in entries.items():
        path_name = meta.get("path_name") if isinstance(meta, dict) else None
        if not isinstance(meta, dict) or meta.get("use_pickle") is not False or not isinstance(path_name, str) \
                or not allowed.fullmatch(path_name):
            raise UserError(f"{path} is refused: it would make torch unpickle '{key}' ({path_name}); "
                            f"export it without custom objects or give file.py:factory")
        if folder + path_name not in members:
            raise UserError(f"{path}: {name} names {path_name}, which the archive does not hold")
        tensor = _tensor_meta(meta.get("tensor_meta"), len(members[folder + path_name]))
        if tensor is None or type(meta.get("is_param")) is not bool:
            raise UserError(f"{path} is refused: {name} describes '{str(key)[:80]}' as something other than a "
                            f"plain CPU tensor within {path_name}")
        rebuilt[key] = {"path_name": path_name, "is_param": meta["is_param"], "use_pickle": False,
                        "tensor_meta": tensor}
    return {"config": rebuilt}


def _tensor_meta(meta: Any, file_bytes: int) -> Optional[Dict[str, Any]]:
    if not isinstance(meta, dict):
        return None
    sizes, strides, offset = (_whole_numbers(meta.get(k)) for k in ("sizes", "strides", "storage_offset"))
    device = meta.get("device")
    itemsize = _ITEMSIZE.get(meta.get("dtype")) if type(meta.get("dtype")) is int else None
    if sizes is None or strides is None or offset is None or len(offset) != 1 or len(sizes) != len(strides) \
            or itemsize is None or meta.get("layout") != _STRIDED or type(meta.get("requires_grad")) is not bool \
            or not isinstance(device, dict) or device.get("type") != "cpu" or device.get("index") is not None:
        return None
    if any(n < 0 for n in (*sizes, *strides, *offset)) or len(sizes) > 64:
        return None
    empty = 0 in sizes
    reach = 0 if empty else (offset[0] + sum((n - 1) * s for n, s in zip(sizes, strides)) + 1) * itemsize
    if reach > file_bytes or (file_bytes == 0 and not empty) or file_bytes % itemsize:
        return None
    return {"dtype": meta["dtype"], "sizes": [{"as_int": n} for n in sizes], "requires_grad": meta["requires_grad"],
            "device": {"type": "cpu", "index": None}, "strides": [{"as_int": n} for n in strides],
            "storage_offset": {"as_int": offset[0]}, "layout": _STRIDED}


def _whole_numbers(items: Any) -> Optional[List[int]]:
    """[{"as_int": n}, ...] (or one {"as_int": n}) as the numbers, else None."""
    if isinstance(items, dict):
        items = [items]
    if not isinstance(items, list):
        return None
    numbers = []
    for item in items:
        value = item.get("as_int") if isinstance(item, dict) and set(item) == {"as_int"} else None
        if type(value) is not int or abs(value) >= 1 << 62:
            return None
        numbers.append(value)
    return numbers


def _json(path: Path, name: str, data: bytes) -> Any:
    """The member decoded, when decoding it costs memory in proportion to its size: an exported program
    spends some 28 bytes of text per JSON object or list, each of which costs Python about 64 bytes."""
    containers = data.count(b"{") + data.count(b"[")
    if containers > len(data) // BYTES_PER_CONTAINER + 1024:
        raise UserError(f"{path} is refused: {name} holds {containers} JSON objects and lists in {len(data)} bytes, "
                        f"more than one per {BYTES_PER_CONTAINER} bytes (decoding it would cost far more memory "
                        f"than its size)")
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise UserError(f"{path}: {name} is not valid JSON ({exc})") from None


def _utf8(path: Path, name: str, data: bytes) -> None:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{path}: {name} is not text") from None


def _check_tensors_only(data: bytes, what: str) -> None:
    """Sample inputs are a torch.save zip inside the archive: its records' declared sizes are bounded
    like the archive's own before torch (whose reader inflates deflated records) reads it."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as inner:
            declared = sum(info.file_size for info in inner.infolist())
    except (zipfile.BadZipFile, ValueError) as exc:
        raise UserError(f"{what} is not plain tensors in torch.save's zip format ({exc}); refusing to read it") from None
    _check_inflation(what, declared, len(data), "a torch.save file")
    torch = require("torch", "convert")
    try:
        torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception as exc:
        raise UserError(f"{what} is not plain tensors (weights_only load failed: {str(exc).splitlines()[0]}); "
                        f"refusing to unpickle it") from None

