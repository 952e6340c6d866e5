"""Every known way a .pt2 can make torch run code is refused before torch sees the file.

Each trick is first shown to work against a bare `torch.export.load` (so the test proves
something), then `edgeopt convert` must refuse the file with one line and leave no trace.
"""
import json
import os
import pickle
import socket
import subprocess
import sys
import tempfile
import time
import zipfile

import pytest
import torch

from edgeopt_agent.errors import UserError
from edgeopt_converters.source import sandbox
from edgeopt_converters.source.isolated_program import IsolatedProgram
from edgeopt_converters.source.pt2_guard import checked_archive
from pt2_tricks import TOP, Trap, convert_trick, edit_program, first_expression, load_bare, rewrite, save_branchy


@pytest.fixture(scope="module")
def good_pt2(tmp_path_factory):
    return save_branchy(tmp_path_factory.mktemp("pt2") / "good.pt2")


CONFIG = "data/weights/model_weights_config.json"


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
    return first_expression(lambda text: f"__import__('os').system('touch {marker}') or {text}")


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
    "sympy expression": (sympy_expression, "shape expression edgeopt does not read"),
    "guard code": (guard_code, "guard edgeopt does not read"),
    "enum in tree spec": (enum_treespec, "input/output spec edgeopt does not read"),
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
    code, errors, err, marker, out = convert_trick(build, good_pt2, tmp_path, capsys)
    assert code == 2 and len(errors) == 1 and "Traceback" not in err, err
    assert message in errors[0]
    assert not marker.exists()
    assert not (out / "manifest.json").exists()


@pytest.mark.parametrize("trick", ["pickled weight", "duplicate member names", "sympy expression", "guard code"])
def test_trick_runs_code_in_a_bare_torch_load(trick, good_pt2, tmp_path):
    """The refusals above are not hypothetical: torch alone runs the payload."""
    marker = tmp_path / "PWNED"
    load_bare(rewrite(good_pt2, tmp_path / "evil.pt2", TRICKS[trick][0](marker, good_pt2)))
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


# --- The first wall: shape expressions and guards are parsed and written anew, never passed on ---

def sympy_string_argument(marker, good=None):
    """sympy's floor() re-parses a string argument with eval: a grammar of allowed calls let it through."""
    return first_expression(lambda text: f"floor(\"__import__('os').system('touch {marker}')\") + 0*{text}")


def guard_string_constant(marker, good=None):
    """A string constant closes the quotes of the message torch writes around each guard."""
    def change(program):
        program["guards_code"] = [f"L['x'].size()[0] == \"+str(__import__('os').system('touch {marker}'))+\""]
    return edit_program(change)


def power_tower(marker=None, good=None):
    return first_expression(lambda text: f"Pow(Integer(10), Pow(Integer(10), Integer(10))) + {text}")


SECOND_ROUND = {
    "string argument to a sympy function": (sympy_string_argument, "shape expression edgeopt does not read"),
    "string constant in a guard": (guard_string_constant, "guard edgeopt does not read"),
    "power tower": (power_tower, "power that is not a plain number"),
}


@pytest.mark.parametrize("trick", SECOND_ROUND)
def test_second_round_tricks_are_refused_at_once(trick, good_pt2, tmp_path, capsys):
    build, message = SECOND_ROUND[trick]
    started = time.monotonic()
    code, errors, err, marker, _ = convert_trick(build, good_pt2, tmp_path, capsys)
    assert code == 2 and len(errors) == 1 and message in errors[0], err
    assert time.monotonic() - started < 30
    assert not marker.exists()


@pytest.mark.parametrize("trick", ["string argument to a sympy function", "string constant in a guard"])
def test_second_round_tricks_run_code_in_a_bare_torch_load(trick, good_pt2, tmp_path):
    marker = tmp_path / "PWNED"
    load_bare(rewrite(good_pt2, tmp_path / "evil.pt2", SECOND_ROUND[trick][0](marker, good_pt2)))
    assert marker.exists()


def test_power_tower_hangs_a_bare_torch_load(good_pt2, tmp_path):
    evil = rewrite(good_pt2, tmp_path / "evil.pt2", power_tower())
    code = f"import torch; torch.export.load({str(evil)!r})"
    bare = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            bare.wait(timeout=20)  # torch imports in ~3 s, then sympy computes 10**(10**10)
    finally:
        bare.kill()
        bare.wait()


def test_real_guards_of_a_resizing_model_are_read(tmp_path):
    """Guards with math.trunc and torch.sym_float (interpolation at a dynamic size) are regenerated, not refused."""
    class Resize(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.interpolate(x, scale_factor=0.5)

    program = torch.export.export(Resize(), (torch.randn(1, 3, 16, 16),),
                                  dynamic_shapes=({2: torch.export.Dim.AUTO, 3: torch.export.Dim.AUTO},))
    path = tmp_path / "resize.pt2"
    torch.export.save(program, str(path))
    assert any("math.trunc" in g for g in program._guards_code)
    loaded = torch.export.load(checked_archive(path)).module()
    x = torch.randn(1, 3, 20, 12)
    assert torch.equal(loaded(x), Resize()(x))


# --- The second wall: the program is only ever loaded in an isolated child ---

def _isolated(tmp_path):
    """The isolation a .pt2 child gets here; skips where edgeopt refuses to load a .pt2 at all."""
    try:
        return sandbox.isolation(tmp_path)
    except UserError as exc:
        pytest.skip(f"this machine offers no isolation edgeopt accepts for a .pt2 child: {exc}")


def _bubblewrap(tmp_path):
    if _isolated(tmp_path).level != "bubblewrap":
        pytest.skip("bubblewrap cannot start a sandbox on this machine (scripts/setup.sh installs it when run as root)")


def _expression_payload(python):
    """An expression trick that the first wall would refuse, for loading past it on purpose."""
    return first_expression(lambda text: f"({python}) * 0 or {text}")


def test_a_payload_past_the_first_wall_cannot_write_outside_its_folder(good_pt2, tmp_path):
    _bubblewrap(tmp_path)
    marker = tmp_path / "PWNED"
    evil = rewrite(good_pt2, tmp_path / "evil.pt2",
                   _expression_payload(f"__import__('os').system('touch ran; touch {marker}')"))
    program = IsolatedProgram(evil.read_bytes(), "evil.pt2")  # the raw archive: no first wall
    try:
        assert (program._shared.private / "ran").exists()  # the payload did run, in the child's folder
        assert not marker.exists()
        assert program(torch.randn(8, 3))[0].shape == (4, 3)  # and the program still works
    finally:
        program.close()
    assert not marker.exists()


def test_a_payload_past_the_first_wall_has_no_network(good_pt2, tmp_path, monkeypatch):
    _bubblewrap(tmp_path)
    monkeypatch.chdir(tmp_path)  # the bare load below runs the payload here
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(3)
    script = tmp_path / "connect.py"
    script.write_text(f"import socket\nsocket.create_connection(('127.0.0.1', {server.getsockname()[1]}), 2)\n")
    evil = rewrite(good_pt2, tmp_path / "evil.pt2",
                   _expression_payload(f"__import__('os').system('{sys.executable} {script}; touch ran')"))
    with server:
        program = IsolatedProgram(evil.read_bytes(), "evil.pt2")
        try:
            assert (program._shared.private / "ran").exists()  # the payload ran in the child
        finally:
            program.close()
        with pytest.raises(socket.timeout):
            server.accept()
        load_bare(evil, call=False)  # without the walls the same payload reaches the listener
        connection, _ = server.accept()
        connection.close()


def test_a_payload_past_the_first_wall_is_stopped_at_the_time_limit(good_pt2, tmp_path):
    _isolated(tmp_path)
    evil = rewrite(good_pt2, tmp_path / "evil.pt2", power_tower())
    started = time.monotonic()
    with pytest.raises(UserError, match="took more than 5 s in the isolated child"):
        IsolatedProgram(evil.read_bytes(), "evil.pt2", load_seconds=5)
    assert time.monotonic() - started < 60


def test_the_child_runs_under_limits_in_its_own_folder(tmp_path):
    limits = sandbox.Limits(cpu_seconds=77, memory_bytes=6 << 30, file_bytes=1 << 30)
    isolated = _isolated(tmp_path)
    code = ("import resource, os, sys; print(resource.getrlimit(resource.RLIMIT_CPU)[0], "
            "resource.getrlimit(resource.RLIMIT_AS)[0], os.getcwd() == os.environ['HOME'] == os.environ['TMPDIR'])")
    with tempfile.TemporaryFile() as err:
        child = sandbox.start([sys.executable, "-c", code], tmp_path, limits, isolated, err)
        out, _ = child.communicate(timeout=60)
    assert out.decode().split() == ["77", str(6 << 30), "True"]


def test_without_bubblewrap_the_caveat_says_what_is_missing(monkeypatch, tmp_path):
    monkeypatch.setattr(sandbox, "_probe", lambda level: level != "bubblewrap")
    if os.geteuid() != 0:  # the child could only run as this user, with this user's files
        with pytest.raises(UserError, match="install bubblewrap"):
            sandbox.isolation(tmp_path)
        return
    isolated = sandbox.isolation(tmp_path)
    assert isolated.level == "network namespace" and isolated.user == sandbox._sandbox_user()
    assert "bubblewrap" in isolated.caveat and "\n" not in isolated.caveat


# --- Third round (review): names torch writes into code, operator paths, powers in disguise ---

def input_name_payload(marker, good=None):
    """A placeholder's name becomes a parameter of the `def forward(...)` torch generates and runs."""
    evil = f"x=__import__('os').system('touch {marker}')"

    def change(program):
        text = json.dumps(program).replace('"x"', json.dumps(evil))
        program.clear()
        program.update(json.loads(text))
    return edit_program(change)


def operator_path(marker=None, good=None):
    def change(program):
        program["graph_module"]["graph"]["nodes"][0]["target"] = "torch.os.system"
    return edit_program(change)


THIRD_ROUND = {
    "code in an input's name": (input_name_payload, "not a plain identifier"),
    "an attribute path posing as an operator": (operator_path, "outside torch's own operator sets"),
}


@pytest.mark.parametrize("trick", THIRD_ROUND)
def test_third_round_tricks_are_refused(trick, good_pt2, tmp_path, capsys):
    build, message = THIRD_ROUND[trick]
    code, errors, err, marker, _ = convert_trick(build, good_pt2, tmp_path, capsys)
    assert code == 2 and len(errors) == 1 and message in errors[0], err
    assert not marker.exists()


def test_code_in_an_input_name_runs_in_a_bare_torch_load(good_pt2, tmp_path):
    marker = tmp_path / "PWNED"
    load_bare(rewrite(good_pt2, tmp_path / "evil.pt2", input_name_payload(marker)), call=False)
    assert marker.exists()


@pytest.mark.parametrize("text", [
    "Pow(Integer(2), Integer(1000000000000), Integer(1))",  # a third argument is sympy's evaluate flag
    "(FloorToInt(1e308)**4096)**4096",  # a float made whole, then raised
    "Mod((floor(1e308)**4096)**4096, s0)",
    "floor(2.0**1e300)",
    "atan2 + 1",  # a bare name sympy reads as its own function
])
def test_expressions_that_hang_or_mislead_sympy_are_refused(text):
    from edgeopt_converters.source.pt2_expressions import ExpressionRefused, regenerate_expression

    with pytest.raises(ExpressionRefused):
        regenerate_expression(text)


def test_a_guard_with_a_float_made_whole_and_raised_is_refused():
    from edgeopt_converters.source.pt2_expressions import ExpressionRefused, regenerate_guard

    with pytest.raises(ExpressionRefused, match="more than 65536 bits"):
        regenerate_guard("(int(1e308) ** 4096) ** 4096 > L['x'].size()[0]")


def test_the_child_sees_no_host_socket_secret_or_token(tmp_path, monkeypatch):
    """/tmp, /run and home folders are empty inside; the environment carries no tokens."""
    _bubblewrap(tmp_path)
    listener = socket.socket(socket.AF_UNIX)
    path = f"/tmp/edgeopt-test-{time.monotonic_ns()}.sock"
    listener.bind(path)
    listener.listen(1)
    monkeypatch.setenv("SSH_AUTH_SOCK", path)
    monkeypatch.setenv("EDGEOPT_BROKER_PASSWORD", "secret")
    code = ("import os, socket\n"
            f"s = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect({path!r}); print('connected')\n"
            "except OSError:\n    print('refused')\n"
            "print(os.path.exists(os.path.expanduser('~root/.config')), 'SSH_AUTH_SOCK' in os.environ,"
            " 'EDGEOPT_BROKER_PASSWORD' in os.environ)")
    private = tmp_path / "private"
    private.mkdir()
    try:
        with tempfile.TemporaryFile() as err:
            child = sandbox.start([sys.executable, "-c", code], private, sandbox.Limits(),
                                  sandbox.isolation(private), err)
            out, _ = child.communicate(timeout=60)
    finally:
        listener.close()
        os.unlink(path)
    assert out.decode().split() == ["refused", "False", "False", "False"]


def test_the_parent_reads_no_link_the_child_leaves(good_pt2, tmp_path):
    _isolated(tmp_path)
    program = IsolatedProgram(checked_archive(good_pt2).getvalue(), "good.pt2")
    try:
        (program._shared.private / "export.onnx").symlink_to("/etc/passwd")
        with pytest.raises(UserError, match="plain file"):
            program._shared.receive_file("export.onnx", tmp_path / "copy.onnx")
    finally:
        program.close()
    assert not (tmp_path / "copy.onnx").exists()


def test_without_bubblewrap_what_the_child_left_running_dies_with_it(tmp_path):
    marker = f"edgeopt-orphan-{time.monotonic_ns()}"
    isolated = sandbox.Isolation("limits only", (), "test: no wrapper")
    with tempfile.TemporaryFile() as err:
        child = sandbox.start(["sh", "-c", f"sleep 300 {marker} & exit 0"], tmp_path, sandbox.Limits(), isolated, err)
        child.wait(timeout=30)
        sandbox.stop(child, isolated)
    time.sleep(0.3)
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.strip()
    assert left == "", f"processes left running: {left}"
