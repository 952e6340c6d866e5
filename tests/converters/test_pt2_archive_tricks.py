"""Every known way a .pt2 can make torch run code is refused before torch sees the file.

Each trick is first shown to work against a bare `torch.export.load` (so the test proves
something), then `edgeopt convert` must refuse the file with one line and leave no trace.
"""
import json
import pickle
import zipfile

import pytest
import torch

from edgeopt.cli.main import main
from edgeopt_agent.errors import UserError
from edgeopt_converters.pt2_guard import checked_archive

CONFIG = "data/weights/model_weights_config.json"


class Trap:
    """Unpickling this creates a file: proof that a loader ran pickled code."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


class Branchy(torch.nn.Module):
    """A dynamic batch and a shape branch, so the program carries shape expressions and guards."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3, 3)

    def forward(self, x):
        if x.shape[0] > 4:
            return self.linear(x[:4])
        return self.linear(x)


@pytest.fixture(scope="module")
def good_pt2(tmp_path_factory):
    path = tmp_path_factory.mktemp("pt2") / "good.pt2"
    program = torch.export.export(Branchy().eval(), (torch.randn(8, 3),), dynamic_shapes=({0: torch.export.Dim.AUTO},))
    torch.export.save(program, str(path))
    return path


TOP = "//"  # a member name starting with this is written at the archive's top level, not in its folder


def rewrite(good, evil, edit):
    """Copy `good` to `evil`, letting `edit(relative_name, data)` return the members to write instead."""
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(evil, "w") as dst:
        for info in src.infolist():
            folder, relative = info.filename.split("/", 1)
            for name, data in edit(relative, src.read(info)):
                dst.writestr(name[len(TOP):] if name.startswith(TOP) else f"{folder}/{name}", data)
    return evil


def edit_program(change):
    def edit(name, data):
        if name.endswith("models/model.json"):
            program = json.loads(data)
            change(program)
            data = json.dumps(program).encode()
        return [(name, data)]
    return edit


def pickled_config(marker, good=None, payload="weight_0"):
    def edit(name, data):
        if name == CONFIG:
            config = json.loads(data)
            first = next(iter(config["config"]))
            config["config"][first].update(use_pickle=True, path_name=payload)
            return [(name, json.dumps(config).encode())]
        if name == f"data/weights/{payload}":
            return [(name, pickle.dumps(Trap(marker)))]
        return [(name, data)]
    return edit


def duplicate_config(marker, good):
    """A malicious config as the archive's first member (torch's reader takes it) and the benign one
    in its usual place after it (Python's zipfile takes the last of a name)."""
    evil = pickled_config(marker, payload="weight_999")
    with zipfile.ZipFile(good) as archive:
        first = archive.namelist()[0].split("/", 1)[1]
        malicious = evil(CONFIG, archive.read(archive.namelist()[0].split("/", 1)[0] + "/" + CONFIG))

    def edit(name, data):
        if name == first:
            return malicious + [(name, data), ("data/weights/weight_999", pickle.dumps(Trap(marker)))]
        return [(name, data)]
    return edit


def sympy_expression(marker, good=None):
    def change(program):
        for value in program["graph_module"]["graph"]["tensor_values"].values():
            for size in value["sizes"]:
                if "as_expr" in size:
                    size["as_expr"]["expr_str"] = f"__import__('os').system('touch {marker}') or {size['as_expr']['expr_str']}"
                    return
    return edit_program(change)


def guard_code(marker, good=None):
    def change(program):
        program["guards_code"] = [f"__import__('os').system('touch {marker}') == 0"]
    return edit_program(change)


def enum_treespec(marker, good=None):
    def change(program):
        signature = program["graph_module"]["module_call_graph"][0]["signature"]
        spec = json.loads(signature["out_spec"])
        spec[1] = {"type": "builtins.dict", "context": json.dumps({"__enum__": True, "fqn": "os:PathLike", "name": "x"}),
                   "children_spec": []}
        signature["out_spec"] = json.dumps(spec)
    return edit_program(change)


def custom_operator(marker, good=None):
    def change(program):
        program["graph_module"]["graph"]["nodes"][0]["target"] = "torch.ops.evil_lib.run.default"
    return edit_program(change)


def extra_member(name):
    def build(marker, good=None):
        def edit(member, data):
            extra = [(name, b"\x7fELF not really a library")] if member == "archive_format" else []
            return [(member, data)] + extra
        return edit
    return build


def custom_object_constant(marker, good=None):
    def edit(name, data):
        if name == "data/constants/model_constants_config.json":
            return [(name, json.dumps({"config": {"obj": {"path_name": "custom_obj_0", "is_param": False,
                                                          "use_pickle": True}}}).encode()),
                    ("data/constants/custom_obj_0", pickle.dumps(Trap(marker)))]
        return [(name, data)]
    return edit


def two_top_folders(marker, good=None):
    evil = pickled_config(marker)

    def edit(name, data):
        return [(f"{TOP}a/{n}", d) for n, d in evil(name, data)] + [(f"{TOP}b/{name}", data)]
    return edit


def legacy_top_level(marker, good=None):
    def edit(name, data):
        extra = [(f"{TOP}version", b"1.0")] if name == "archive_format" else []
        return [(name, data)] + extra
    return edit


TRICKS = {
    "pickled weight": (pickled_config, "unpickle"),
    "duplicate member names": (duplicate_config, "two members named"),
    "sympy expression": (sympy_expression, "shape expression that could run code"),
    "guard code": (guard_code, "guard that could run code"),
    "enum in tree spec": (enum_treespec, "enum"),
    "custom operator": (custom_operator, "outside torch's own operator sets"),
    "AOTInductor library": (extra_member("data/aotinductor/model/model.so"), "AOTInductor"),
    "legacy weights file": (extra_member("data/weights/model.pt"), "unpickle"),
    "custom object constant": (custom_object_constant, "unpickle"),
    "several top-level folders": (two_top_folders, "one top-level folder"),
    "legacy top-level version file": (legacy_top_level, "one top-level folder"),
}


@pytest.mark.parametrize("trick", TRICKS)
def test_trick_is_refused_before_torch_reads_the_file(trick, good_pt2, tmp_path, capsys):
    build, message = TRICKS[trick]
    marker = tmp_path / "PWNED"
    evil = rewrite(good_pt2, tmp_path / "evil.pt2", build(marker, good_pt2))
    out = tmp_path / "out"
    code = main(["convert", str(evil), "--device", "x86-64", "-o", str(out), "--no-timing"])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in err, err
    assert message in errors[0]
    assert not marker.exists()
    assert not (out / "manifest.json").exists()


@pytest.mark.parametrize("trick", ["pickled weight", "duplicate member names", "sympy expression", "guard code"])
def test_trick_runs_code_in_a_bare_torch_load(trick, good_pt2, tmp_path):
    """The refusals above are not hypothetical: torch alone runs the payload."""
    marker = tmp_path / "PWNED"
    evil = rewrite(good_pt2, tmp_path / "evil.pt2", TRICKS[trick][0](marker, good_pt2))
    try:
        torch.export.load(str(evil)).module()(torch.randn(8, 3))
    except Exception:
        pass  # the payload ran before whatever broke afterwards; the marker says so
    assert marker.exists()


def test_a_real_program_with_shape_expressions_and_guards_loads(good_pt2):
    program = torch.export.load(checked_archive(good_pt2))
    assert program._guards_code  # the fixture exercises the guard grammar
    x = torch.randn(9, 3)
    assert torch.allclose(program.module()(x), torch.export.load(str(good_pt2)).module()(x))


def test_archive_must_come_from_torch_export_save(tmp_path):
    plain = tmp_path / "plain.pt2"
    with zipfile.ZipFile(plain, "w") as archive:
        archive.writestr("m/models/model.json", "{}")
    with pytest.raises(UserError, match="archive_format"):
        checked_archive(plain)
