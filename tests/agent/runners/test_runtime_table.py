"""The runtime table is the one list of runtimes: everything else is read from it."""
import pytest

from edgeopt_agent import profiles, runtimes
from edgeopt_agent.runners import base, detect_format


@pytest.mark.parametrize("runtime", runtimes.TABLE, ids=lambda r: r.name)
def test_every_row_names_a_runner_and_a_check_that_exist(runtime):
    assert issubclass(runtime.runner_class(), base.Runner)
    assert callable(runtime.available)
    assert runtime.formats and set(runtime.formats) <= set(runtimes.FORMATS)
    for hook in (runtime.spec_options, runtime.profiler):
        assert hook is None or callable(hook)
    assert (runtime.profiler is None) != (runtime.no_profiler == ""), "a profiler, or the reason there is none"


@pytest.mark.parametrize("runtime", runtimes.TABLE, ids=lambda r: r.name)
def test_every_row_points_at_its_backend_folder_not_at_a_string(runtime):
    hooks = [runtime.runner, runtime.available, runtime.spec_options, runtime.profiler]
    for hook in filter(None, hooks):
        assert callable(hook) and not isinstance(hook, str)
        assert hook.__module__.startswith("edgeopt_agent.runners."), hook
    backend = runtime.runner.__module__
    assert backend.count(".") == 2, f"{backend}: a backend is a folder of edgeopt_agent.runners"
    assert runtime.available.__module__ == backend
    assert runtime.runner_class().__module__.startswith(backend + ".")


def test_importing_the_table_imports_no_runtime_and_no_numpy():
    import json
    import subprocess
    import sys

    heavy = ("numpy", "onnxruntime", "tensorrt", "ai_edge_litert", "tflite_runtime", "ncnn", "executorch",
             "executorch_numpy_runtime", "torch", "cuda")
    code = ("import json, sys\nimport edgeopt_agent.runtimes\n"
            f"print(json.dumps(sorted(n for n in sys.modules if n.split('.')[0] in {heavy!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == []


def test_the_lists_are_read_from_the_table():
    assert runtimes.RUNTIMES == tuple(r.name for r in runtimes.TABLE)
    assert set(runtimes.ENGINE_RUNTIMES) == {"tensorrt", "onnxruntime-tensorrt"}
    assert set(runtimes.GPU_RUNTIMES) == {"tensorrt", "onnxruntime-tensorrt", "onnxruntime-cuda"}
    assert runtimes.FORMAT_RUNTIMES["onnx"][0] == "onnxruntime" and runtimes.FORMAT_RUNTIMES["tflite"] == ("tflite",)
    assert runtimes.FORMAT_RUNTIMES["ncnn"] == ("ncnn",) and runtimes.FORMAT_RUNTIMES["pte"] == ("executorch",)
    assert set(runtimes.PROFILE_RUNTIMES) == {"onnxruntime", "tflite", "tensorrt", "ncnn", "executorch"}
    assert runtimes.FORMATS == ("onnx", "tflite", "ncnn", "pte") and profiles.PRECISIONS == runtimes.PRECISIONS


def test_each_format_is_defined_once_with_its_own_suffix_and_magic():
    defined = [f for r in runtimes.TABLE for f in r.defines]
    assert len({f.name for f in defined}) == len(defined) == len(runtimes.FORMATS)
    assert len({f.suffix for f in defined}) == len(defined)
    magics = [f.magic for f in defined if f.magic is not None]
    assert len(set(magics)) == len(magics)
    for fmt in defined:
        assert fmt.suffix == "." + fmt.name  # the agent's store keeps an artifact as <sha256>.<format>
        assert set(fmt.precisions) <= set(runtimes.PRECISIONS) and "fp32" in fmt.precisions
        assert fmt.roofline in ("own", "onnx", None)
        assert fmt.export_base is None or fmt.export_base.split("-")[0] in runtimes.FORMATS


def test_the_converter_has_each_rows_steps():
    from edgeopt_converters.passes.base import step_class

    for fmt in runtimes.FORMAT_TABLE.values():
        if fmt.export_step is not None:
            for precision in fmt.precisions:
                assert step_class(fmt.export_step)(precision=precision).label()


def test_what_a_runtime_does_not_offer_is_said_in_its_row():
    assert "INT8" in runtimes.BY_NAME["ncnn"].notes
    assert runtimes.format_of("ncnn").precisions == ("fp32", "fp16")


@pytest.mark.parametrize("name, head, fmt", [
    ("model.fp32.ncnn", b"PK\x03\x04", "ncnn"),
    ("model.int8.pte", b"\x3c\x00\x00\x00ET12", "pte"),
    ("renamed.bin", b"\x3c\x00\x00\x00ET12", "pte"),
    ("renamed.dat", b"\x1c\x00\x00\x00TFL3", "tflite"),
])
def test_detect_format_reads_the_rows_suffixes_and_magic_bytes(tmp_path, name, head, fmt):
    path = tmp_path / name
    path.write_bytes(head + bytes(32))
    assert detect_format(path) == fmt


def _imports_outside_type_checking(tree):
    import ast

    pending = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", "")) == "TYPE_CHECKING":
            pending.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        pending.extend(ast.iter_child_nodes(node))


def test_a_backend_never_reads_the_table_that_points_at_it():
    """The table sits above the backends: a backend imports what the backends share, never the table nor the
    modules that read it (lazy imports included; type hints aside)."""
    import ast
    from pathlib import Path

    import edgeopt_agent.runners as package

    readers = {"runtimes", "formats", "availability", "opening"}
    backends = [p for p in Path(package.__file__).parent.iterdir() if (p / "__init__.py").is_file()]
    assert {p.name for p in backends} == {"onnxruntime", "tensorrt", "tflite", "ncnn", "executorch"}
    found = []
    for path in (f for backend in backends for f in backend.glob("*.py")):
        for node in _imports_outside_type_checking(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level >= 2:
                names = [node.module] if node.module else [a.name for a in node.names]
                found += [f"{path.parent.name}/{path.name} imports {n}" for n in names if n.split(".")[0] in readers]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("edgeopt_agent"):
                parts = set(node.module.split("."))
                found += [f"{path.parent.name}/{path.name} imports {node.module}" for _ in [1] if parts & readers]
    assert found == []
