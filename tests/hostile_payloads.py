"""Hostile MQTT payloads for the fuzz tests: seeded, so a failure names a case that can be replayed.

`hostile_payloads(rng, template, count)` yields (label, bytes): the template message (a valid
envelope, as a dict) with one field swapped for a hostile value, keys dropped or added, its
serialisation cut, flipped or re-encoded, plus messages no template could produce (deep nesting,
huge number literals, invalid UTF-8, random bytes, oversized). The label says which.
"""
from __future__ import annotations

import copy
import json
import random
from typing import Any, Callable, Dict, Iterator, List, Tuple

from edgeopt_agent import wire

OVERSIZED_BYTES = wire.MAX_MESSAGE_BYTES + 1


def hostile_values(rng: random.Random) -> List[Any]:
    return [
        None, True, False, 0, -1, 2 ** 31, 2 ** 63, 2 ** 64, -(2 ** 63) - 1, 10 ** 40,
        1e308, -1e-308, float("inf"), float("-inf"), float("nan"), 0.5,
        "", " ", "x" * rng.choice((65, 1000, 70_000)), "\x00", "\ud800", "\udfff\ud800", "\u202e\u0000\u2028",
        "../../etc/passwd", "/etc/passwd", "%s%n", "\u00e9" * 40, "0" * 64, "f" * 63,
        [], {}, [None], [[[[[]]]]], {"": None}, {"a": {"b": {"c": {"d": [1, {"e": 2}]}}}},
        list(range(rng.randint(1, 50))), {str(i): i for i in range(rng.randint(1, 30))},
        _nested(rng.randint(20, 200)),
    ]


def _nested(depth: int) -> Any:
    value: Any = 0
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def _paths(value: Any, prefix: Tuple = ()) -> List[Tuple]:
    """Every path to a node of a JSON document (dict keys and list indices)."""
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found.extend(_paths(item, prefix + (key,)))
    elif isinstance(value, list):
        for index, item in enumerate(value[:8]):
            found.extend(_paths(item, prefix + (index,)))
    return found


def _set(document: Any, path: Tuple, value: Any) -> Any:
    if not path:
        return value
    parent = document
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = value
    return document


def _delete(document: Any, path: Tuple) -> Any:
    if not path:
        return {}
    parent = document
    for step in path[:-1]:
        parent = parent[step]
    del parent[path[-1]]
    return document


def _dumps(document: Any) -> bytes:
    return json.dumps(document, ensure_ascii=False, allow_nan=True).encode("utf-8", "surrogatepass")


def _structural(rng: random.Random, template: Dict[str, Any]) -> Tuple[str, bytes]:
    document = copy.deepcopy(template)
    path = rng.choice(_paths(document))
    shown = "/".join(map(str, path)) or "<root>"
    action = rng.choice(("replace", "replace", "replace", "delete", "add", "wrap"))
    if action == "replace":
        value = rng.choice(hostile_values(rng))
        return f"replace {shown} with {type(value).__name__}", _dumps(_set(document, path, value))
    if action == "delete":
        return f"delete {shown}", _dumps(_delete(document, path))
    if action == "add":
        node = document
        for step in path:
            node = node[step]
        if isinstance(node, dict):
            node[rng.choice(("extra", "__proto__", "body", "id", "\u0000", "x" * 300))] = rng.choice(hostile_values(rng))
            return f"add a key under {shown}", _dumps(document)
        return f"wrap {shown} in a list", _dumps(_set(document, path, [node]))
    node = document
    for step in path:
        node = node[step]
    return f"wrap {shown} in an object", _dumps(_set(document, path, {"value": node}))


def _textual(rng: random.Random, template: Dict[str, Any]) -> Tuple[str, bytes]:
    raw = bytearray(_dumps(template))
    action = rng.choice(("truncate", "flip", "invalid_utf8", "bom", "utf16", "duplicate_keys", "trailing"))
    if action == "truncate":
        return "truncated", bytes(raw[: rng.randrange(len(raw))])
    if action == "flip":
        for _ in range(rng.randint(1, 6)):
            index = rng.randrange(len(raw))
            raw[index] ^= 1 << rng.randrange(8)
        return "bit flips", bytes(raw)
    if action == "invalid_utf8":
        quotes = [i for i, byte in enumerate(raw) if byte == ord('"')]
        index = rng.choice(quotes) + 1
        raw[index:index] = rng.choice((b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80"))
        return "invalid UTF-8 in a string", bytes(raw)
    if action == "bom":
        return "UTF-8 byte order mark", b"\xef\xbb\xbf" + bytes(raw)
    if action == "utf16":
        return "UTF-16", bytes(raw).decode("utf-8").encode("utf-16")
    if action == "duplicate_keys":
        return "duplicate keys", bytes(raw[:-1]) + b', "body": [], "seq": -1, "id": null}'
    return "trailing garbage", bytes(raw) + rng.choice((b"x", b"{}", b"\x00", b"\n\n{"))


def _raw(rng: random.Random) -> Tuple[str, bytes]:
    makers: List[Tuple[str, Callable[[], bytes]]] = [
        ("empty", lambda: b""),
        ("random bytes", lambda: bytes(rng.randrange(256) for _ in range(rng.randint(1, 2000)))),
        ("deeply nested lists", lambda: b"[" * rng.randint(1000, 200_000) + b"]" * 10),
        ("deeply nested objects", lambda: b'{"a":' * rng.randint(1000, 50_000) + b"1" + b"}" * 10),
        ("huge integer literal", lambda: b'{"id": 1' + b"0" * rng.randint(4000, 100_000) + b"}"),
        ("huge exponent", lambda: b'{"seq": 1e999999, "ts": -1e999999}'),
        ("NaN and Infinity", lambda: b'{"seq": NaN, "ts": Infinity, "schema": -Infinity}'),
        ("a bare value", lambda: rng.choice((b"null", b"true", b"0", b'"text"', b"[]", b"{}"))),
        ("whitespace", lambda: b" \t\r\n" * rng.randint(1, 1000)),
        ("NUL bytes", lambda: b"\x00" * rng.randint(1, 1000)),
        ("lone surrogate escapes", lambda: b'{"id": "\\ud800", "device_id": "\\udfff", "type": "\\ud83d"}'),
    ]
    label, make = rng.choice(makers)
    return label, make()


def oversized(template: Dict[str, Any], tag: str) -> bytes:
    """A valid-looking envelope just over the protocol's size limit (the tag keeps each one distinct)."""
    document = copy.deepcopy(template)
    document["body"] = dict(document.get("body") or {}, pad=tag)
    raw = _dumps(document)
    return raw[:-2] + b"x" * (OVERSIZED_BYTES - len(raw)) + raw[-2:]


def hostile_payloads(rng: random.Random, template: Dict[str, Any], count: int) -> Iterator[Tuple[str, bytes]]:
    for number in range(count):
        roll = rng.random()
        if roll < 0.55:
            label, payload = _structural(rng, template)
        elif roll < 0.85:
            label, payload = _textual(rng, template)
        else:
            label, payload = _raw(rng)
        yield f"#{number} {label}", payload
