"""Shared by the .pt2 trick tests: a real exported program, and ways to rewrite its archive."""
import json
import zipfile

import torch

from edgeopt.cli.main import main


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


def save_branchy(path):
    """A real .pt2 with a dynamic batch: shape expressions, guards and a dict in its input spec."""
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


def first_expression(rewrite_text):
    """An edit that rewrites the program's first shape expression: `rewrite_text(original) -> new text`."""
    def change(program):
        for value in program["graph_module"]["graph"]["tensor_values"].values():
            for size in value["sizes"]:
                if "as_expr" in size:
                    size["as_expr"]["expr_str"] = rewrite_text(size["as_expr"]["expr_str"])
                    return
    return edit_program(change)


def convert_trick(build, good_pt2, tmp_path, capsys):
    """`edgeopt convert` of the good archive rewritten by `build(marker, good)`: (exit code, its
    error lines, all of stderr, the marker a payload would create, the output folder)."""
    marker = tmp_path / "PWNED"
    evil = rewrite(good_pt2, tmp_path / "evil.pt2", build(marker, good_pt2))
    out = tmp_path / "out"
    code = main(["convert", str(evil), "--device", "x86-64", "-o", str(out), "--no-timing"])
    err = capsys.readouterr().err
    return code, [line for line in err.splitlines() if line.startswith("error:")], err, marker, out


def load_bare(evil, call=True):
    """torch alone: load (and run) the archive, as edgeopt's walls would not let it."""
    try:
        program = torch.export.load(str(evil))
        if call:
            program.module()(torch.randn(8, 3))
    except Exception:
        pass  # the payload ran before whatever broke afterwards; the marker says so
