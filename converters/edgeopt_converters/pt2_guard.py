"""Refuse ExportedProgram archives (.pt2) that would make torch unpickle anything.

`torch.export.load` unpickles weights or constants marked `use_pickle`, custom and opaque
objects, legacy-format weight files, and sample inputs that `weights_only` cannot load. A model
file from elsewhere is untrusted, so the archive is read as plain data first and loaded only
when every payload is a raw tensor buffer.
"""
from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import List

from edgeopt_agent.errors import UserError, require

_TENSOR_PREFIXES = ("weight_", "tensor_")


def _members(archive: zipfile.ZipFile) -> List[str]:
    """Member names without the archive's top folder (torch writes `<name>/data/...`)."""
    return [name.split("/", 1)[1] if "/" in name else name for name in archive.namelist()]


def check_pt2(path: Path) -> None:
    refuse = f"{path} is refused: it would make torch unpickle"
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise UserError(f"{path} is not a .pt2 archive: {exc}") from None
    with archive:
        full = dict(zip(_members(archive), archive.namelist()))
        if not any(n.startswith("models/") and n.endswith(".json") for n in full):
            raise UserError(f"{path} holds no exported program (no models/*.json); is it a .pt2 from torch.export.save?")
        for name, member in full.items():
            folder = name.rsplit("/", 1)[0] + "/" if "/" in name else ""
            if folder in ("data/weights/", "data/constants/") and name.endswith(".pt"):
                raise UserError(f"{refuse} its legacy-format {name}; re-save it with a current torch.export.save")
            if folder in ("data/weights/", "data/constants/") and name.endswith("_config.json"):
                try:
                    config = json.loads(archive.read(member)).get("config", {})
                except (ValueError, AttributeError) as exc:
                    raise UserError(f"{path}: {name} is not valid JSON ({exc})") from None
                for key, meta in config.items():
                    if meta.get("use_pickle") or not str(meta.get("path_name", "")).startswith(_TENSOR_PREFIXES):
                        raise UserError(f"{refuse} '{key}' ({meta.get('path_name')}); "
                                        f"export it without custom objects or give file.py:factory")
            if folder == "data/sample_inputs/":
                _check_tensors_only(archive.read(member), f"{path}: {name}")


def _check_tensors_only(data: bytes, what: str) -> None:
    torch = require("torch", "convert")
    try:
        torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception as exc:
        raise UserError(f"{what} is not plain tensors (weights_only load failed: {str(exc).splitlines()[0]}); "
                        f"refusing to unpickle it") from None
