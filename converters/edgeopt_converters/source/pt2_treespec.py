"""A .pt2's input/output tree specs, decoded as torch decodes them and written anew by edgeopt.

A tree spec (`in_spec`, `out_spec`) is JSON inside the program's JSON, and each node's `context`
is JSON again, which torch decodes with an `object_hook` that imports a module and walks its
attributes for any object holding `__enum__` (`torch.utils._pytree.enum_object_hook`). Searching
the text for `__enum__` is no wall: JSON escapes (`"\\u005f\\u005fenum\\u005f\\u005f"`) hide the key
from a search and not from the decoder. So each spec is decoded here with the decoder torch uses
(`json.loads`), read into a small tree of edgeopt's own — containers of the few types an
exported program's inputs and outputs take, each with only the context its type has (nothing for
a tuple or list, the keys of a dict, the registered name of a named tuple) — and torch gets only
the JSON `write` makes from that tree: no key torch would read as an object, no module path.
"""
from __future__ import annotations

import json
import keyword
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple, Union

PROTOCOL = 1
MAX_DEPTH = 64
MAX_NODES = 1 << 16
MAX_KEY_CHARS = 256

SEQUENCES = frozenset({"builtins.tuple", "builtins.list", "torch.fx.immutable_collections.immutable_list"})
MAPPINGS = frozenset({"builtins.dict", "collections.OrderedDict", "torch.fx.immutable_collections.immutable_dict"})
NAMED_TUPLE = "collections.namedtuple"
_TYPE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}(\.[A-Za-z][A-Za-z0-9_]{0,63}){0,15}$")
_FIELD = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")

Key = Union[str, int]


class TreeSpecRefused(ValueError):
    """The spec is not one edgeopt reads; the message says why."""


@dataclass(frozen=True)
class Leaf:
    pass


@dataclass(frozen=True)
class Sequence:
    type: str  # one of SEQUENCES
    children: Tuple["Spec", ...]


@dataclass(frozen=True)
class Mapping:
    type: str  # one of MAPPINGS
    keys: Tuple[Key, ...]
    children: Tuple["Spec", ...]


@dataclass(frozen=True)
class NamedTuple:
    name: str  # the name torch registered the type under; torch looks it up, never imports it
    children: Tuple["Spec", ...]


Spec = Union[Leaf, Sequence, Mapping, NamedTuple]


def regenerate(text: object) -> str:
    """A serialized tree spec as edgeopt writes it, or TreeSpecRefused."""
    return write(parse(text))


def parse(text: object) -> Spec:
    outer = _decoded(text, "the spec")
    if not isinstance(outer, list) or len(outer) != 2 or type(outer[0]) is not int or outer[0] != PROTOCOL:
        raise TreeSpecRefused(f"is not [{PROTOCOL}, spec] (torch's tree spec protocol {PROTOCOL})")
    return _Reader().node(outer[1], 0)


class _Reader:
    def __init__(self):
        self.count = 0

    def node(self, value: Any, depth: int) -> Spec:
        self.count += 1
        if depth > MAX_DEPTH or self.count > MAX_NODES:
            raise TreeSpecRefused(f"is deeper than {MAX_DEPTH} or larger than {MAX_NODES} nodes")
        if not isinstance(value, dict) or set(value) != {"type", "context", "children_spec"} \
                or not isinstance(value["children_spec"], list):
            raise TreeSpecRefused("holds a node other than {type, context, children_spec}")
        kind, context, children = value["type"], value["context"], value["children_spec"]
        if kind is None:
            if context is not None or children:
                raise TreeSpecRefused("holds a leaf with a context or children")
            return Leaf()
        parsed = tuple(self.node(child, depth + 1) for child in children)
        if kind in SEQUENCES:
            if _decoded(context, f"a {kind}'s context") is not None:
                raise TreeSpecRefused(f"gives a {kind} a context (it has none)")
            return Sequence(kind, parsed)
        if kind in MAPPINGS:
            keys = _decoded(context, f"a {kind}'s keys")
            if not isinstance(keys, list) or len(keys) != len(parsed) or not all(_is_key(k) for k in keys) \
                    or len(set(keys)) != len(keys):
                raise TreeSpecRefused(f"gives a {kind} keys other than one plain string or whole number per child")
            return Mapping(kind, tuple(keys), parsed)
        if kind == NAMED_TUPLE:
            if not isinstance(context, str) or not _TYPE_NAME.match(context):
                raise TreeSpecRefused("names a named tuple by something other than a dotted name")
            return NamedTuple(context, parsed)
        shown = repr(kind[:80]) if isinstance(kind, str) else type(kind).__name__
        raise TreeSpecRefused(f"has inputs or outputs of type {shown}, which torch would import by name")


def _decoded(text: object, what: str) -> Any:
    if not isinstance(text, str):
        raise TreeSpecRefused(f"holds {what} that is not JSON text")
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise TreeSpecRefused(f"holds {what} that is not valid JSON") from None


def _is_key(key: Any) -> bool:
    if isinstance(key, str):
        return len(key) <= MAX_KEY_CHARS
    return type(key) is int and abs(key) < 1 << 63


def write(spec: Spec) -> str:
    """The JSON torch receives, every part of it written by edgeopt."""
    return json.dumps([PROTOCOL, _node(spec)])


def _node(spec: Spec) -> Dict[str, Any]:
    if isinstance(spec, Leaf):
        return {"type": None, "context": None, "children_spec": []}
    if isinstance(spec, Sequence):
        context: Optional[str] = json.dumps(None)
    elif isinstance(spec, Mapping):
        context = json.dumps([k if isinstance(k, str) else int(k) for k in spec.keys])
    elif isinstance(spec, NamedTuple):
        context = str(spec.name)
    else:
        raise TypeError(f"not a tree spec node: {spec!r}")
    kind = NAMED_TUPLE if isinstance(spec, NamedTuple) else spec.type
    return {"type": kind, "context": context, "children_spec": [_node(child) for child in spec.children]}


def regenerate_namedtuple_fields(table: object) -> Dict[str, Dict[str, List[str]]]:
    """The program's `treespec_namedtuple_fields` ({type name: {"field_names": [...]}}), written anew."""
    if not isinstance(table, dict) or len(table) > MAX_NODES:
        raise TreeSpecRefused("holds a malformed table of named tuple fields")
    rebuilt = {}
    for name, entry in table.items():
        fields = entry.get("field_names") if isinstance(entry, dict) and set(entry) == {"field_names"} else None
        if not _TYPE_NAME.match(name) or not isinstance(fields, list) or len(fields) > 4096 \
                or not all(isinstance(f, str) and _FIELD.match(f) and not keyword.iskeyword(f) for f in fields):
            raise TreeSpecRefused("holds a named tuple whose name or fields are not plain identifiers")
        rebuilt[str(name)] = {"field_names": [str(f) for f in fields]}
    return rebuilt
