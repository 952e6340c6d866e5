"""Read an ExportedProgram archive (.pt2) as data and hand torch only what was checked.

`torch.export.load` can run code from the file in several ways: it unpickles weights or constants
marked `use_pickle`, custom and opaque objects, legacy-format weight files and sample inputs that
`weights_only` cannot load; it loads AOTInductor shared libraries; it passes every `expr_str` of
the program to `sympy.sympify` (which calls `eval`); it compiles the program's `guards_code` into
a Python function that runs on every call; and its tree specs may import modules by name. Zip
readers also disagree (Python's `zipfile` keeps the last member of a name, torch's reader the
first), so checking one view and loading another proves nothing.

So the archive is read once here, by `ZipInfo`: duplicate names, several top-level folders and
any member this module does not know are refused; every known member is checked; every shape
expression and guard is parsed into edgeopt's own tree and written anew (`pt2_expressions`), so
torch never evaluates a string of the file; and torch gets a fresh archive written from exactly
the bytes that were checked and the text edgeopt wrote (`checked_archive`). This is the first
wall; the second is that the archive is only ever loaded in an isolated child
(`isolated_program`).
"""
from __future__ import annotations

import io
import json
import keyword
import re
import zipfile
from pathlib import Path
from typing import Any, Dict, Iterator, Optional

from edgeopt_agent.errors import UserError, require

from .pt2_expressions import ExpressionRefused, regenerate_expression, regenerate_guard

_FOLDER = re.compile(r"^[A-Za-z0-9_.-]+$")
_PAYLOAD = {"data/weights/": re.compile(r"^weight_\d+$"), "data/constants/": re.compile(r"^tensor_\d+$")}
_FIXED_MEMBERS = {"archive_format", "archive_version", "byteorder", ".data/version", ".data/serialization_id"}
_MODEL = re.compile(r"^models/([A-Za-z0-9_.-]+)\.json$")
_EXTRA = re.compile(r"^extra/[A-Za-z0-9_.-]+$")

# Operator namespaces an exported program may call; anything else (custom libraries, extension
# handlers) needs the user's own code, so it comes in as file.py:factory instead.
# An operator is named by its namespace and plain identifiers: torch resolves the name attribute by
# attribute (`torch.os.system` would resolve too), so no other path and no dunder is read.
_OPERATOR = re.compile(r"^(torch\.ops\.(aten|prims|quantized_decomposed|higher_order)\.|_operator\.|math\.|torch\.sym_)"
                       r"_?[A-Za-z0-9]+(_[A-Za-z0-9]+)*(\._?[A-Za-z0-9]+(_[A-Za-z0-9]+)*)?$")
# Names torch writes into the Python code it generates for the graph (placeholders, values, arguments).
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_ATTRIBUTE_PATH = re.compile(r"^[A-Za-z0-9_]{1,128}(\.[A-Za-z0-9_]{1,128}){0,31}$")  # linear.weight, layers.0.bias
_VALUE_TABLES = ("tensor_values", "sym_int_values", "sym_bool_values", "sym_float_values", "custom_obj_values")
_TREESPEC_TYPES = {None, "builtins.tuple", "builtins.list", "builtins.dict", "collections.OrderedDict",
                   "collections.namedtuple", "torch.fx.immutable_collections.immutable_list",
                   "torch.fx.immutable_collections.immutable_dict"}
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


def _read_members(path: Path) -> Dict[str, bytes]:
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise UserError(f"{path} is not a .pt2 archive: {exc}") from None
    members: Dict[str, bytes] = {}
    with archive:
        for info in archive.infolist():
            if info.filename in members:
                raise UserError(f"{path} is refused: it holds two members named {info.filename!r} "
                                f"(zip readers disagree on which one counts)")
            if info.is_dir():
                continue
            try:
                members[info.filename] = archive.read(info)
            except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError) as exc:
                raise UserError(f"{path}: member {info.filename!r} cannot be read ({exc})") from None
    return members


def _check_layout(path: Path, members: Dict[str, bytes]) -> str:
    folders = {name.split("/", 1)[0] if "/" in name else "" for name in members}
    if len(folders) != 1 or "" in folders:
        shown = ", ".join(sorted(repr(f or "(top level)") for f in folders)) or "none"
        raise UserError(f"{path} is refused: a .pt2 from torch.export.save keeps every member in one "
                        f"top-level folder; this one has {shown}")
    folder = folders.pop()
    if not _FOLDER.match(folder):
        raise UserError(f"{path} is refused: unexpected top-level folder name {folder!r}")
    if members.get(f"{folder}/archive_format") != b"pt2":
        raise UserError(f"{path} is not a .pt2 from torch.export.save (no archive_format 'pt2')")
    if not any(_MODEL.match(name[len(folder) + 1:]) for name in members):
        raise UserError(f"{path} holds no exported program (no models/*.json); is it a .pt2 from torch.export.save?")
    return folder


def _check_member(path: Path, name: str, data: bytes, members: Dict[str, bytes]) -> Optional[bytes]:
    """Refuses a member edgeopt does not read; returns a program's JSON as edgeopt rewrote it."""
    refuse = f"{path} is refused: {name}"
    folder, _, leaf = name.rpartition("/")
    folder += "/"
    if name in _FIXED_MEMBERS or _EXTRA.match(name):
        _utf8(path, name, data)
        return
    model = _MODEL.match(name)
    if model:
        program = _json(path, name, data)
        _check_program(path, name, program)
        for required in (f"data/sample_inputs/{model.group(1)}.pt", f"data/weights/{model.group(1)}_weights_config.json",
                         f"data/constants/{model.group(1)}_constants_config.json"):
            if required not in members:
                raise UserError(f"{path} is refused: {name} has no {required} (only current torch.export.save "
                                f"archives are read; legacy formats would be unpickled)")
        return json.dumps(program).encode()
    if folder == "data/sample_inputs/" and leaf.endswith(".pt"):
        _check_tensors_only(data, f"{path}: {name}")
        return
    if folder in _PAYLOAD and leaf.endswith(("_weights_config.json", "_constants_config.json")):
        _check_payload_config(path, name, _json(path, name, data), _PAYLOAD[folder], members, folder)
        return
    if folder in _PAYLOAD and _PAYLOAD[folder].match(leaf):
        return  # raw tensor bytes, named by a checked config
    if name.endswith(".pt") or "custom_obj_" in leaf or "opaque_obj_" in leaf:
        raise UserError(f"{refuse} would make torch unpickle it; export the model without custom objects "
                        f"or give file.py:factory")
    raise UserError(f"{refuse} is not part of an exported program that edgeopt reads (AOTInductor "
                    f"libraries and other extras are refused); give file.py:factory or an .onnx file")


def _check_payload_config(path: Path, name: str, config: Any, allowed: "re.Pattern[str]",
                          members: Dict[str, bytes], folder: str) -> None:
    entries = config.get("config") if isinstance(config, dict) else None
    if not isinstance(entries, dict):
        raise UserError(f"{path}: {name} has no 'config' table")
    for key, meta in entries.items():
        path_name = meta.get("path_name") if isinstance(meta, dict) else None
        if not isinstance(meta, dict) or meta.get("use_pickle") is not False or not isinstance(path_name, str) \
                or not allowed.match(path_name):
            raise UserError(f"{path} is refused: it would make torch unpickle '{key}' ({path_name}); "
                            f"export it without custom objects or give file.py:factory")
        if folder + path_name not in members:
            raise UserError(f"{path}: {name} names {path_name}, which the archive does not hold")


def _check_program(path: Path, name: str, program: Any) -> None:
    """Checks the program's specs, operators and names, and replaces each shape expression and guard
    by the text edgeopt writes from its own parse of it."""
    for parent, owner, key, value in _items(program):
        if key == "expr_str":
            owner[key] = _regenerated(path, name, value, regenerate_expression, "shape expression")
        elif key == "guards_code":
            if not isinstance(value, list):
                raise UserError(f"{path}: {name} has a malformed guards_code")
            owner[key] = [_regenerated(path, name, guard, regenerate_guard, "guard") for guard in value]
        elif key in ("in_spec", "out_spec"):
            _check_treespec(path, name, value)
        elif key in ("target", "as_operator") and isinstance(value, str) and not _is_module_path(parent, value):
            if not _OPERATOR.match(value) or "__" in value:
                raise UserError(f"{path} is refused: {name} calls {value[:80]!r}, outside torch's own operator sets; "
                                f"give file.py:factory so the operator's library is your code")
        elif key in ("name", "as_name") and not _is_name(value, keyword_allowed=parent == "inputs"):
            _refuse_name(path, name, value)
        elif (key == "fqn" or key.endswith("_name")) and isinstance(value, str) and value \
                and not (_ATTRIBUTE_PATH.match(value) and "__" not in value):
            _refuse_name(path, name, value)
        if parent in _VALUE_TABLES and not _is_name(key, keyword_allowed=False):
            _refuse_name(path, name, key)


def _is_module_path(parent: Any, value: str) -> bool:
    """A signature's `target` names a parameter or buffer by its attribute path, not an operator."""
    return parent in ("parameter", "buffer", "tensor_constant", "custom_obj", "constant_input") and \
        bool(_ATTRIBUTE_PATH.match(value)) and "__" not in value


def _is_name(value: Any, keyword_allowed: bool) -> bool:
    return isinstance(value, str) and bool(_IDENTIFIER.match(value)) and (keyword_allowed or not keyword.iskeyword(value))


def _refuse_name(path: Path, name: str, value: Any) -> None:
    shown = repr(value[:80]) if isinstance(value, str) else type(value).__name__
    raise UserError(f"{path} is refused: {name} names a value {shown}, which is not a plain identifier (torch "
                    f"writes these names into Python code); give file.py:factory or an .onnx file")


def _items(node: Any) -> Iterator[tuple]:
    """(the key of the dict's own entry, the dict holding it, key, value) for every dict entry inside `node`."""
    stack = [(None, node)]
    while stack:
        parent, current = stack.pop()
        if isinstance(current, dict):
            for key, value in list(current.items()):
                yield parent, current, key, value
                stack.append((key, value))
        elif isinstance(current, list):
            stack.extend((parent, item) for item in current)


def _regenerated(path: Path, name: str, text: Any, regenerate, what: str) -> str:
    try:
        return regenerate(text)
    except ExpressionRefused as exc:
        shown = repr(text[:80]) if isinstance(text, str) else type(text).__name__
        raise UserError(f"{path} is refused: {name} holds a {what} edgeopt does not read ({exc}): {shown}; "
                        f"give file.py:factory or an .onnx file") from None


def _check_treespec(path: Path, name: str, text: Any) -> None:
    try:
        spec = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        spec = None
    if not isinstance(spec, list) or len(spec) != 2:
        raise UserError(f"{path}: {name} holds a malformed input/output spec")
    for _, _, key, value in _items(spec[1]):
        if key == "__enum__" or (key == "type" and value not in _TREESPEC_TYPES):
            raise UserError(f"{path} is refused: {name} has inputs or outputs of type {value!r}, which torch "
                            f"would import by name; give file.py:factory")
        if key == "context" and isinstance(value, str) and "__enum__" in value:
            raise UserError(f"{path} is refused: {name} has an input/output spec that imports an enum by name")


def _json(path: Path, name: str, data: bytes) -> Any:
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
    torch = require("torch", "convert")
    try:
        torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception as exc:
        raise UserError(f"{what} is not plain tensors (weights_only load failed: {str(exc).splitlines()[0]}); "
                        f"refusing to unpickle it") from None

