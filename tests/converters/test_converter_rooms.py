"""The converter's rooms (docs/ARCHITECTURE.md) import only what their row there allows, lazy imports
included, so each room can be read and tested without the ones above it."""
import ast
from pathlib import Path

import edgeopt_converters

PACKAGE = Path(edgeopt_converters.__file__).parent
ROOMS = ("source", "passes", "precision", "accuracy", "cost")
# room -> the converter modules and rooms it must never import
FORBIDDEN = {
    "source": {"passes", "precision", "accuracy", "cost", "pipeline", "context", "recipe", "build",
               "validation", "repair", "manifest_build", "recommend", "options"},
    "passes": {"precision", "accuracy", "cost", "pipeline", "context", "recipe", "build", "validation", "repair",
               "manifest_build", "recommend", "options"},
    "accuracy": {"passes", "precision", "cost", "pipeline", "context", "recipe", "build", "validation", "repair",
                 "manifest_build", "recommend", "options"},
    "cost": {"accuracy", "precision", "pipeline", "build", "validation", "repair", "manifest_build", "recommend",
             "options"},
    "precision": {"cost", "pipeline", "build", "validation", "repair", "recommend", "options"},
}


def _imported(path: Path, package_dir: Path = PACKAGE):
    """Converter modules a file imports, relative to the package (e.g. 'passes.base', 'context')."""
    module = path.relative_to(package_dir).with_suffix("").parts
    package = module[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = (*base, *(node.module.split(".") if node.module else ()))
            elif node.module and node.module.startswith("edgeopt_converters"):
                target = tuple(node.module.split(".")[1:])
            else:
                continue
            names = [a.name for a in node.names]
            yield from (".".join((*target, n)) for n in names) if not node.module or not target else [".".join(target)]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("edgeopt_converters."):
                    yield alias.name.split(".", 1)[1]


def _breaks(target: str, forbidden: set) -> bool:
    return any(target == f or target.startswith(f + ".") for f in forbidden)


def test_each_room_imports_only_what_its_row_allows():
    found = []
    for room in ROOMS:
        for path in sorted((PACKAGE / room).glob("*.py")):
            for target in _imported(path):
                if _breaks(target, FORBIDDEN[room]):
                    found.append(f"{path.relative_to(PACKAGE)} imports {target}")
    assert found == []


def test_no_floor_imports_a_room_that_imports_it_back():
    """recipe, the floor the rooms stand on, imports none of the rooms that import it (its INT8 modes for
    an architecture live in precision/architecture); passes' sandboxed .pt2 worker lives in passes."""
    users = {room for room in ROOMS for path in (PACKAGE / room).glob("*.py")
             if any(_breaks(t, {"recipe"}) for t in _imported(path))}
    found = [f"recipe imports {t}" for t in _imported(PACKAGE / "recipe.py") if _breaks(t, users)]
    assert users and found == []


def test_the_rule_sees_relative_absolute_and_lazy_imports(tmp_path):
    sample = tmp_path / "source" / "sample.py"
    sample.parent.mkdir()
    sample.write_text("def f():\n    from ..pipeline import convert\n    import edgeopt_converters.cost.roofline\n"
                      "from .. import recipe\nfrom .tensors import Dataset\n")
    assert sorted(_imported(sample, tmp_path)) == ["cost.roofline", "pipeline", "recipe", "source.tensors"]
