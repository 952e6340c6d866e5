"""The daemon is the board's own: the host (sdk, converters) reaches the board only through
`edgeopt_agent.wire`, which itself needs nothing but the standard library and paho-mqtt."""
from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
HOST_FOLDERS = (ROOT / "sdk", ROOT / "converters")
WIRE = ROOT / "agent" / "edgeopt_agent" / "wire"
WIRE_MAY_IMPORT = ("edgeopt_agent.wire", "edgeopt_agent.errors", "edgeopt_agent.values", "edgeopt_agent.files")


def imported_modules(path: Path) -> Iterator[Tuple[int, str]]:
    """(line, absolute module name) of every import in `path`, relative ones resolved against its
    package, plus the string given to importlib.import_module / __import__."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = _package_of(path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(package, node.module, node.level)
            yield node.lineno, base
            for alias in node.names:  # `from edgeopt_agent import daemon` imports a module too
                yield node.lineno, f"{base}.{alias.name}"
        elif isinstance(node, ast.Call) and _is_dynamic_import(node.func) and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                yield node.lineno, first.value
            elif isinstance(first, ast.JoinedStr):  # f"edgeopt_agent.daemon.{name}"
                yield node.lineno, "".join(
                    part.value for part in first.values if isinstance(part, ast.Constant) and isinstance(part.value, str)
                )


def _is_dynamic_import(func: ast.expr) -> bool:
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    return name in ("import_module", "__import__")


def _package_of(path: Path) -> List[str]:
    for top in ("sdk", "converters", "agent"):
        folder = ROOT / top
        if folder in path.parents:
            return list(path.relative_to(folder).parent.parts)
    return []


def _resolve(package: List[str], module: str, level: int) -> str:
    if level == 0:
        return module or ""
    parts = package[: len(package) - (level - 1)] if level > 1 else list(package)
    return ".".join(parts + ([module] if module else []))


def _is_within(name: str, module: str) -> bool:
    return name == module or name.startswith(module + ".")


def host_files() -> List[Path]:
    return sorted(p for folder in HOST_FOLDERS for p in folder.rglob("*.py"))


def test_the_walk_sees_every_kind_of_import(tmp_path):
    path = tmp_path / "probe.py"
    path.write_text("import edgeopt_agent.daemon.agent\nfrom edgeopt_agent import daemon\n"
                    "from edgeopt_agent.daemon.config import build_config\n"
                    "importlib.import_module('edgeopt_agent.daemon.cli')\n"
                    "importlib.import_module(f'edgeopt_agent.daemon.{name}')\n"
                    "from edgeopt_agent import wire\n")
    lines = {line for line, name in imported_modules(path) if _is_within(name, "edgeopt_agent.daemon")}
    assert lines == {1, 2, 3, 4, 5}
    assert _resolve(["edgeopt", "deploy"], "fleet", 2) == "edgeopt.fleet"
    assert _resolve(["edgeopt_agent", "wire"], "errors", 2) == "edgeopt_agent.errors"
    assert _resolve(["edgeopt_agent", "wire"], "jobs", 1) == "edgeopt_agent.wire.jobs"


def test_host_never_imports_the_daemon():
    files = host_files()
    assert len(files) > 50, "the walk found too few host modules; did the folders move?"
    offenders = [f"{path.relative_to(ROOT)}:{line} imports {name}"
                 for path in files for line, name in imported_modules(path)
                 if _is_within(name, "edgeopt_agent.daemon")]
    assert not offenders, "the host reaches into the board's daemon; use edgeopt_agent.wire:\n" + "\n".join(offenders)


def test_wire_needs_only_the_standard_library_and_paho():
    if not hasattr(sys, "stdlib_module_names"):
        pytest.skip("sys.stdlib_module_names needs Python 3.10+")
    allowed_top = set(sys.stdlib_module_names) | {"__future__", "paho"}
    modules = sorted(WIRE.rglob("*.py"))
    assert len(modules) >= 5
    offenders = []
    for path in modules:
        for line, name in imported_modules(path):
            top = name.split(".")[0]
            if top == "edgeopt_agent":
                if not any(_is_within(name, allowed) for allowed in WIRE_MAY_IMPORT):
                    offenders.append(f"{path.name}:{line} imports {name}")
            elif top not in allowed_top:
                offenders.append(f"{path.name}:{line} imports {name}")
    assert not offenders, "\n".join(offenders)
