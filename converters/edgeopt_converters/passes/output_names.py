"""Names for the ONNX outputs of a PyTorch model, from what its forward returns.

The exporter names outputs after the last op that made them (`unsqueeze_9`, `relu_9`), which change
with every edit of the model and say nothing of what an output is. A forward that returns a dict
names its outputs by the keys, a namedtuple (or any class torch's pytree knows) by its fields; a bare
tensor or a tuple gives stable `output_0`, `output_1`, ...; nested containers join the parts
(`boxes_0`). These are the names the manifest, the accuracy table and `--output-kind` use.
"""
from __future__ import annotations

import re
from typing import List, Sequence

_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]+")


def model_output_names(torch, module, args, input_names: Sequence[str] = ()) -> List[str]:
    """One name per tensor `module(*args)` returns, in the order the exporter flattens them."""
    from torch.utils import _pytree as pytree
    with torch.no_grad():
        result = module(*args)
    leaves, _ = pytree.tree_flatten_with_path(result)
    names = [_path_name(path, pytree) for path, leaf in leaves if isinstance(leaf, torch.Tensor)]
    return _unique(names, set(input_names))


def _path_name(path, pytree) -> str:
    if not path:  # the forward returns one tensor
        return "output_0"
    parts = []
    for key in path:
        if isinstance(key, pytree.MappingKey):
            parts.append(_UNSAFE.sub("_", str(key.key)).strip("_") or "output")
        elif isinstance(key, pytree.GetAttrKey):
            parts.append(key.name)
        else:  # a position in a tuple or list
            parts.append(str(getattr(key, "idx", key)))
    if parts[0].isdigit():
        parts.insert(0, "output")
    return "_".join(parts)


def _unique(names: List[str], taken: set) -> List[str]:
    """Each name once, none an input's (ONNX names every value once)."""
    unique = []
    for name in names:
        candidate, n = name, 1
        while candidate in taken:
            n += 1
            candidate = f"{name}_{n}"
        taken.add(candidate)
        unique.append(candidate)
    return unique
