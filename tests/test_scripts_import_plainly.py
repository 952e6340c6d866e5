"""scripts/ imports its shared code as packages and modules (realbench, hostinfo), never by editing sys.path:
a script run from scripts/ has it on its path already, and pytest adds it (pyproject.toml)."""
import ast
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def path_edits(path: Path):
    """Each `sys.path.<method>(...)` call in the file at `path`, as 'line: sys.path.method'."""
    for node in ast.walk(ast.parse(path.read_text())):
        func = node.func if isinstance(node, ast.Call) else None
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Attribute) and func.value.attr == "path" \
                and isinstance(func.value.value, ast.Name) and func.value.value.id == "sys":
            yield f"{node.lineno}: sys.path.{func.attr}"


def test_no_script_edits_sys_path():
    edits = {str(path.relative_to(SCRIPTS)): list(path_edits(path)) for path in sorted(SCRIPTS.rglob("*.py"))}
    assert {name: found for name, found in edits.items() if found} == {}


def test_the_check_sees_an_edit(tmp_path):
    script = tmp_path / "x.py"
    script.write_text("import sys\nsys.path.insert(0, 'here')\nprint(sys.path)\n")
    assert list(path_edits(script)) == ["2: sys.path.insert"]
