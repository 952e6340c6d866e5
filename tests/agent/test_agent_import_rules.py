"""The agent package must stay light (no torch, onnx, tensorflow or litert-torch, no host packages,
not the host CLI's click, rich or Pygments, which a board does not install) and run on Python 3.8+
(JetPack 5 ships 3.8; its TensorRT bindings exist for 3.8 only)."""
import ast
import json
import subprocess
import sys
from pathlib import Path

import edgeopt_agent

HOST_CLI = ("click", "rich", "pygments")  # the `cli` extra, which no board extra installs
FORBIDDEN = ("torch", "onnx", "tensorflow", "litert_torch", "edgeopt", "edgeopt_converters", "onnxscript", "torchao",
             *HOST_CLI)
AGENT_ROOT = Path(edgeopt_agent.__file__).parent
# The one documented exception: ExecuTorch's own Python runtime (the executorch package) takes and
# returns torch tensors, so its backend imports torch when a .pte is loaded there. torch comes with the
# executorch package, never with an agent extra (agent-executorch is the torch-free numpy runtime).
ALLOWED = {("runners/executorch/pybind_runtime.py", "torch")}


# Calls that import the module named by their first argument: a string literal there is an import too.
IMPORTING_CALLS = ("import_module", "require", "__import__")


def _called_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def imported_top_levels(source: str, filename: str = "<source>"):
    """(top-level module, line) for each import statement and each importing call with a literal name."""
    tree = ast.parse(source, filename=filename)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name.split(".")[0], node.lineno
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0], node.lineno
        elif isinstance(node, ast.Call) and _called_name(node) in IMPORTING_CALLS and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str) and not first.value.startswith("."):
                yield first.value.split(".")[0], node.lineno


def _imported_top_levels(path: Path):
    return imported_top_levels(path.read_text(encoding="utf-8"), str(path))


def test_the_checker_sees_modules_named_in_strings():
    source = (
        "import importlib\n"
        "from importlib import import_module\n"
        "from .errors import require\n"
        "tf = importlib.import_module('tensorflow')\n"
        "torch = import_module('torch.nn')\n"
        "onnx = require('onnx', 'agent')\n"
        "ts = __import__('litert_torch')\n"
        "local = importlib.import_module('.base', __name__)\n"
    )
    found = [(name, line) for name, line in imported_top_levels(source) if name in FORBIDDEN]
    assert found == [("tensorflow", 4), ("torch", 5), ("onnx", 6), ("litert_torch", 7)]


def test_no_agent_module_imports_host_or_heavy_packages():
    offences = [
        f"{path.relative_to(AGENT_ROOT.parent)}:{line} imports {name}"
        for path in AGENT_ROOT.rglob("*.py")
        for name, line in _imported_top_levels(path)
        if name in FORBIDDEN and (path.relative_to(AGENT_ROOT).as_posix(), name) not in ALLOWED
    ]
    assert not offences, "\n".join(offences)


def test_importing_every_agent_module_loads_none_of_them():
    modules = sorted(
        ".".join(("edgeopt_agent",) + p.relative_to(AGENT_ROOT).with_suffix("").parts).replace(".__init__", "")
        for p in AGENT_ROOT.rglob("*.py")
        if "__main__" not in p.name
    )
    code = (
        "import importlib, json, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        f"print(json.dumps(sorted(n for n in sys.modules if n.split('.')[0] in {FORBIDDEN!r})))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


def test_edgeopt_agent_runs_without_the_host_cli_packages():
    blocked = "".join(f"sys.modules[{name!r}] = None\n" for name in HOST_CLI)
    code = (
        "import sys\n" + blocked
        + "from edgeopt_agent.daemon.cli import main\n"
        "sys.exit(main(['--help']))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "usage: edgeopt-agent" in result.stdout


def test_agent_and_device_profiles_parse_as_python_3_8():
    """Syntax only (parenthesized context managers, match, except*); 3.9+ library calls need a 3.8 run."""
    import edgeopt_device_profiles

    roots = (AGENT_ROOT, Path(edgeopt_device_profiles.__file__).parent)
    offences = []
    for path in (p for root in roots for p in root.rglob("*.py")):
        try:
            ast.parse(path.read_text(encoding="utf-8"), filename=str(path), feature_version=(3, 8))
        except SyntaxError as exc:
            offences.append(f"{path}:{exc.lineno}: {exc.msg}")
    assert not offences, "\n".join(offences)
