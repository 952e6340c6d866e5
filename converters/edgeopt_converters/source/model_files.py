"""What a model file is, told from its bytes; nothing in it is unpickled or run.

torch.save writes two formats: the zip archive (PyTorch 1.6 and later: `NAME/data.pkl` and the
tensors under `NAME/data/`) and the legacy one (before 1.6, still in many released weights, such as
torchvision's `.pth` files): four pickles in a row (a magic number, the protocol version, system
facts, the object) and then the raw tensors. TorchScript is a zip with `code/`; an ExportedProgram
(`.pt2`) a zip whose `archive_format` says `pt2`. A pickle is told apart by its opcodes, read as data
with `pickletools.genops` (which never builds an object): the classes it names and the strings it
holds say whether it is a state_dict, a checkpoint holding one, or a pickled nn.Module.
"""
from __future__ import annotations

import io
import json
import pickletools
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterable, List, Optional

from edgeopt_agent import runtimes

ONNX = "onnx"
EXPORTED = "exported"  # an ExportedProgram archive (.pt2)
TORCHSCRIPT = "torchscript"
STATE_DICT = "state_dict"  # tensors by name, or a checkpoint dict holding them
PICKLED_MODULE = "pickled_module"
PICKLE = "pickle"  # some other pickled object
ARTIFACT = "artifact"  # already a runtime's file (TFLite, ExecuTorch, ...)
SAFETENSORS = "safetensors"
ARRAYS = "arrays"  # NumPy's .npy / .npz: data, not a model
UNKNOWN = "unknown"

LEGACY_MAGIC = 0x1950A86A20F9469CFC6C  # torch.serialization.MAGIC_NUMBER, the legacy format's first pickle
_MAX_OPCODES = 5_000_000  # a state_dict of 10,000 tensors is about 300,000
# Names a state_dict's (or a plain checkpoint's) pickle refers to: containers, tensor rebuilders, storages.
_DATA_GLOBALS = ("collections OrderedDict", "torch._utils _rebuild_", "torch.storage _load_from_bytes",
                 "torch.serialization _get_layout", "torch device", "torch Size", "torch.torch_version", "numpy",
                 "_codecs encode", "builtins set", "__builtin__ set", "builtins slice", "__builtin__ slice")
_CHECKPOINT_KEYS = ("state_dict", "model_state_dict", "model_state", "model", "net", "network", "weights", "params",
                    "optimizer", "optimizer_state_dict", "epoch", "global_step")
_MODULE_ATTRIBUTES = {"_parameters", "_buffers", "_modules"}  # every nn.Module's __dict__ has them


@dataclass(frozen=True)
class ModelFile:
    kind: str
    what: str = ""  # what it holds, in words: "a state_dict", "a pickled nn.Module (my.Net)", "TFLite"
    legacy: bool = False  # torch.save's pre-1.6 format

    @property
    def described(self) -> str:
        """`what`, with the legacy format named."""
        return ", ".join(filter(None, (self.what, "legacy torch.save format" if self.legacy else "")))


def identify(path: Path) -> ModelFile:
    """The kind of file at `path`, from its bytes alone."""
    with path.open("rb") as handle:
        head = handle.read(64)
        handle.seek(0)
        if zipfile.is_zipfile(handle):
            return _zip_kind(path)
        handle.seek(0)
        if head[:1] == b"\x80":  # a pickle's PROTO opcode: torch.save's legacy format or a plain pickle
            return _pickled_kind(handle)
    if head.startswith(b"PK\x03\x04"):
        return ModelFile(UNKNOWN, "a damaged zip archive: cut short, or not written to the end")
    if head.startswith(b"\x93NUMPY"):
        return ModelFile(ARRAYS, "a NumPy array (.npy)")
    artifact = _artifact_format(head)
    if artifact:
        return ModelFile(ARTIFACT, artifact)
    if _looks_like_safetensors(path, head):
        return ModelFile(SAFETENSORS, "safetensors")
    if _looks_like_onnx(head):
        return ModelFile(ONNX, "ONNX protobuf")
    return ModelFile(UNKNOWN)


def _zip_kind(path: Path) -> ModelFile:
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            leaves = {name.split("/", 1)[1] if "/" in name else name: name for name in names}
            if "archive_format" in leaves:
                if archive.read(leaves["archive_format"])[:16].strip() == b"pt2":
                    return ModelFile(EXPORTED, "ExportedProgram archive")
            if any(leaf.startswith("code/") for leaf in leaves) or "constants.pkl" in leaves:
                return ModelFile(TORCHSCRIPT, "TorchScript archive")
            if names and all(name.endswith(".npy") for name in names):
                return ModelFile(ARRAYS, "NumPy arrays (.npz)")
            if "data.pkl" in leaves:
                with archive.open(leaves["data.pkl"]) as pickled:
                    kind = _classify_pickle(io.BufferedReader(pickled))
                return ModelFile(kind.kind, kind.what or "torch.save archive")
    except (zipfile.BadZipFile, OSError, KeyError):
        pass
    return ModelFile(UNKNOWN, "a zip archive")


def _pickled_kind(handle: BinaryIO) -> ModelFile:
    try:
        first = list(_opcodes(handle))
    except ValueError:
        return ModelFile(UNKNOWN)
    values = [arg for op, arg in first if op in ("LONG1", "LONG4")]
    if values != [LEGACY_MAGIC]:
        handle.seek(0)
        kind = _classify_pickle(handle)
        return ModelFile(PICKLE if kind.kind == STATE_DICT else kind.kind, kind.what or "a Python pickle")
    try:
        list(_opcodes(handle))  # the protocol version
        list(_opcodes(handle))  # system facts (byte order, type sizes)
    except ValueError:
        return ModelFile(UNKNOWN, "cut short", legacy=True)
    kind = _classify_pickle(handle)
    return ModelFile(kind.kind, kind.what, legacy=True)


def _classify_pickle(handle: BinaryIO) -> ModelFile:
    """A state_dict (or a checkpoint holding one), a pickled nn.Module, or another object."""
    try:
        ops = list(_opcodes(handle))
    except ValueError:
        return ModelFile(UNKNOWN, "a pickle that does not parse")
    names = _globals(ops)
    strings = {arg for op, arg in ops if isinstance(arg, str) and ("UNICODE" in op or "STRING" in op)}
    foreign = [n for n in names if not _is_data(n)]
    if foreign and (_MODULE_ATTRIBUTES <= strings or any(n.startswith("torch.nn.modules") for n in names)):
        return ModelFile(PICKLED_MODULE, f"a pickled nn.Module ({_class_name(foreign)})")
    tensors = any(n.startswith("torch._utils _rebuild_") for n in names)
    if not tensors:
        return ModelFile(PICKLE, f"a pickled {_class_name(foreign)}" if foreign else "")
    wrapped = [key for key in _CHECKPOINT_KEYS if key in strings]
    if wrapped:
        return ModelFile(STATE_DICT, f"a checkpoint with {', '.join(repr(k) for k in wrapped[:3])}")
    return ModelFile(STATE_DICT, "a state_dict")


def _opcodes(handle: BinaryIO) -> Iterable:
    """(opcode name, argument) of one pickle, up to its STOP; ValueError where it is not one."""
    for count, (op, arg, _) in enumerate(pickletools.genops(handle)):
        if count > _MAX_OPCODES:
            raise ValueError("too many opcodes")
        yield op.name, arg


def _globals(ops: List) -> List[str]:
    """'module name' of every class or function the pickle refers to, in order of first mention. GLOBAL
    carries it; STACK_GLOBAL (protocol 4+) takes the two strings pushed last, directly or from the memo."""
    names, pushed, memo = {}, [], {}
    for op, arg in ops:
        if op == "GLOBAL":
            names[arg] = None
        elif op in ("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "SHORT_BINSTRING", "BINSTRING"):
            pushed.append(arg)
        elif op == "MEMOIZE" and pushed:
            memo[len(memo)] = pushed[-1]
        elif op in ("BINPUT", "LONG_BINPUT", "PUT") and pushed:
            memo[arg] = pushed[-1]
        elif op in ("BINGET", "LONG_BINGET", "GET") and isinstance(memo.get(arg), str):
            pushed.append(memo[arg])
        elif op == "STACK_GLOBAL" and len(pushed) >= 2:
            names[f"{pushed[-2]} {pushed[-1]}"] = None
    return list(names)


def _is_data(name: str) -> bool:
    module, _, attribute = name.partition(" ")
    return name.startswith(_DATA_GLOBALS) or (module == "torch" and (attribute.endswith("Storage") or
                                                                      attribute in _TORCH_DTYPES))


_TORCH_DTYPES = {"float32", "float16", "bfloat16", "float64", "int8", "uint8", "int16", "int32", "int64", "bool",
                 "float", "half", "double", "long", "int", "short", "complex64"}


def _class_name(names: List[str]) -> str:
    """The most telling class a pickle names: a model's own class before torch's building blocks."""
    own = [n for n in names if not n.startswith(("torch.", "builtins", "__builtin__", "collections"))]
    shown = (own or names or ["object"])[0]
    return shown.replace(" ", ".")


def _artifact_format(head: bytes) -> Optional[str]:
    for fmt in runtimes.FORMAT_TABLE.values():
        if fmt.magic is not None and head[fmt.magic[0]:fmt.magic[0] + len(fmt.magic[1])] == fmt.magic[1]:
            return fmt.title
    return None


def _looks_like_safetensors(path: Path, head: bytes) -> bool:
    """safetensors: an 8-byte little-endian header length, then that many bytes of JSON."""
    if len(head) < 10:
        return False
    (length,) = struct.unpack("<Q", head[:8])
    if head[8:9] != b"{" or length > min(path.stat().st_size - 8, 100 * 2**20):
        return False
    with path.open("rb") as handle:
        handle.seek(8)
        try:
            return isinstance(json.loads(handle.read(length)), dict)
        except (ValueError, UnicodeDecodeError):
            return False


def _looks_like_onnx(head: bytes) -> bool:
    """An ONNX ModelProto starts with field 1, ir_version (a small varint), then another field."""
    return len(head) >= 4 and head[0] == 0x08 and 1 <= head[1] <= 20 and head[2] in _MODEL_FIELDS


# ModelProto's fields as their first byte on the wire: producer_name, producer_version, domain,
# model_version, doc_string, graph, opset_import, metadata_props.
_MODEL_FIELDS = (0x12, 0x1A, 0x22, 0x28, 0x32, 0x3A, 0x42, 0x72)
