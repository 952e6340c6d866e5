"""No import circles among the modules of agent/, converters/ and sdk/.

Counted: imports at module level (inside try/if blocks too). Not counted: imports under
`if TYPE_CHECKING:` (never run) and imports inside functions (run late, on purpose).
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"edgeopt_agent": ROOT / "agent", "edgeopt_converters": ROOT / "converters", "edgeopt": ROOT / "sdk"}


def module_files() -> Dict[str, Path]:
    found = {}
    for package, parent in PACKAGES.items():
        for path in (parent / package).rglob("*.py"):
            parts = list(path.relative_to(parent).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def module_level_imports(tree: ast.Module) -> Iterator[ast.stmt]:
    """Import statements run when the module is imported: not in functions or classes' methods,
    not under `if TYPE_CHECKING:`."""
    pending: List[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                pending.extend(node.body)
            pending.extend(node.orelse)
        elif isinstance(node, ast.Try):
            pending.extend(node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body])
        elif isinstance(node, (ast.With, ast.ClassDef)):
            pending.extend(node.body)


def _resolve(name: str, modules: Dict[str, Path]) -> Optional[str]:
    """The longest known module that `name` is, or is inside (a.b.c -> a.b when c is a name in a.b)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imported_modules(module: str, path: Path, modules: Dict[str, Path]) -> Set[str]:
    is_package = path.name == "__init__.py"
    # A package is set up before its modules run, so importing it from inside is no circle.
    ancestors = {module.rsplit(".", n)[0] for n in range(1, module.count(".") + 1)}
    found: Set[str] = set()
    for node in module_level_imports(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            targets = [f"{prefix}.{alias.name}" for alias in node.names] + [prefix]
        for target in targets:
            resolved = _resolve(target, modules)
            if resolved is not None and resolved != module and resolved not in ancestors:
                found.add(resolved)
    return found


def find_cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """One path for each import circle found by a depth-first walk."""
    cycles: List[List[str]] = []
    state: Dict[str, int] = {}  # 1: on the current path, 2: finished
    path: List[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return cycles


def import_graph() -> Dict[str, Set[str]]:
    modules = module_files()
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def test_the_graph_sees_relative_and_absolute_imports():
    graph = import_graph()
    assert "edgeopt_agent.sensors.base" in graph["edgeopt_agent.sensors.suite"]
    assert "edgeopt_agent.wire" in graph["edgeopt.fleet.messages"]


def test_a_circle_is_found():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]


def test_no_import_cycles():
    cycles = find_cycles(import_graph())
    assert cycles == [], "import circles:\n" + "\n".join(" -> ".join(c) for c in cycles)
