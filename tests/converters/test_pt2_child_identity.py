"""The isolated child owns nothing: an unprivileged user that sees only Python, edgeopt and its own
folder, under limits sized from the model and capped by what this process inherited."""
import json
import os
import resource
import subprocess
import sys
import tempfile
import textwrap

import pytest
import torch

from edgeopt_agent.errors import UserError
from edgeopt_converters.source import sandbox
from edgeopt_converters.source.isolated_program import IsolatedProgram
from edgeopt_converters.source.pt2_guard import checked_archive, tensor_bytes
from pt2_tricks import first_expression, load_bare, rewrite, save_branchy

GIB = 1 << 30
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="only a child started by root changes user")


@pytest.fixture(scope="module")
def good_pt2(tmp_path_factory):
    return save_branchy(tmp_path_factory.mktemp("pt2") / "good.pt2")


def _level_or_skip(level, tmp_path):
    try:
        isolated = sandbox.isolation(tmp_path)
    except UserError as exc:
        pytest.skip(f"no isolation here: {exc}")
    if isolated.level != level:
        pytest.skip(f"{level} cannot start a child on this machine")
    return isolated


def run_child(code, private, limits=None, isolated=None):
    """`code` run by Python in the sandbox with `private` as its folder: its stdout."""
    isolated = isolated or sandbox.isolation(private)
    with tempfile.TemporaryFile() as err:
        child = sandbox.start([sys.executable, "-c", code], private, limits or sandbox.Limits.for_model(0),
                              isolated, err)
        out, _ = child.communicate(timeout=120)
        err.seek(0)
        assert child.returncode == 0, err.read().decode(errors="replace")[-2000:]
    return out.decode()


@pytest.fixture
def private(tmp_path):
    """A child's folder inside a folder of ours, as isolated_program makes it."""
    os.chmod(tmp_path, 0o711)
    folder = tmp_path / "child"
    folder.mkdir()
    return folder


@as_root
def test_the_child_cannot_read_a_root_only_file_it_can_see(private):
    _level_or_skip("bubblewrap", private)
    secret = private / "root-only"
    secret.write_text("root's")
    secret.chmod(0o600)
    assert secret.read_text() == "root's"  # this process, root, reads it
    code = textwrap.dedent(f"""
        import os
        status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
        try:
            open({str(secret)!r}).read(); read = "read"
        except PermissionError:
            read = "denied"
        print(os.getuid(), os.geteuid(), status["CapEff"].strip(), status["NoNewPrivs"].strip(), read)
    """)
    uid = sandbox._sandbox_user()[0]
    assert run_child(code, private).split() == [str(uid), str(uid), "0000000000000000", "1", "denied"]


def test_the_child_sees_only_python_edgeopt_and_its_folder(private, tmp_path):
    _level_or_skip("bubblewrap", private)
    (tmp_path / "beside").write_text("not the child's")
    code = textwrap.dedent(f"""
        import json, os
        print(json.dumps({{"etc": sorted(os.listdir("/etc")),
                           "absent": [p for p in ("/var", "/srv", "/run", "/opt", "/mnt", "/media", "/boot", "/tmp/x")
                                      if os.path.exists(p)],
                           "beside": os.path.exists({str(tmp_path / "beside")!r}),
                           "home": sorted(os.listdir("/home")) if os.path.isdir("/home") else None,
                           "writable": [p for p in ("/usr", "/etc", {str(tmp_path)!r}) if os.access(p, os.W_OK)]}}))
    """)
    seen = json.loads(run_child(code, private))
    assert seen["etc"] == ["ld.so.cache"]
    assert seen["absent"] == [] and seen["beside"] is False
    python_homes = {p.split("/")[2] for p in sandbox._python_folders() if p.startswith("/home/")}
    assert seen["home"] in (None, sorted(python_homes))
    assert seen["writable"] == []


def test_the_child_has_a_process_limit(private):
    _level_or_skip("bubblewrap", private)
    code = textwrap.dedent("""
        import resource, threading, time
        limit = resource.getrlimit(resource.RLIMIT_NPROC)[0]
        started = 0
        try:
            while started < 100000:
                threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
                started += 1
        except RuntimeError:
            pass
        print(limit, started)
    """)
    limit, started = map(int, run_child(code, private).split())
    assert limit != resource.RLIM_INFINITY and started < limit
    assert started >= sandbox.PROCESSES_PER_CPU * (os.cpu_count() or 1)  # room for torch's threads


def test_memory_is_sized_from_the_model(good_pt2):
    archive = checked_archive(good_pt2).getvalue()
    assert 0 < tensor_bytes(archive) < 1 << 16
    floor = sandbox.MEMORY_FLOOR + sandbox.MEMORY_PER_CPU * (os.cpu_count() or 1)
    assert sandbox.Limits.for_model(tensor_bytes(archive)).memory_bytes == floor
    assert sandbox.Limits.for_model(10 * GIB).memory_bytes == sandbox.MEMORY_PER_TENSOR_BYTE * 10 * GIB


def test_an_inherited_hard_memory_limit_caps_the_child_s_instead_of_failing(good_pt2, tmp_path):
    """Under `ulimit -v` below the child's size every .pt2 failed with `internal error: SubprocessError`
    (the child tried to raise its limit); now the child gets the hard limit, and works under it."""
    hard = 3 * GIB + GIB // 2
    script = textwrap.dedent(f"""
        import resource, sys, torch
        resource.setrlimit(resource.RLIMIT_AS, ({hard}, {hard}))
        from edgeopt_converters.source.isolated_program import IsolatedProgram
        from edgeopt_converters.source.pt2_guard import checked_archive
        program = IsolatedProgram(checked_archive(sys.argv[1]).getvalue(), "good.pt2")
        try:
            print(program(torch.randn(8, 3))[0].shape == (4, 3))
        finally:
            program.close()
        from edgeopt_converters.source import sandbox
        import tempfile, pathlib
        folder = pathlib.Path(tempfile.mkdtemp()) / "child"
        folder.mkdir()
        child = sandbox.start([sys.executable, "-c", "import resource; print(resource.getrlimit(resource.RLIMIT_AS)[1])"],
                              folder, sandbox.Limits.for_model(0), sandbox.isolation(folder), None)
        print(child.communicate(timeout=60)[0].decode().strip())
    """)
    run = subprocess.run([sys.executable, "-c", script, str(good_pt2)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split()[-2:] == ["True", str(hard)]


# --- A payload past the first wall, loaded on purpose, reads nothing of root's ---

def stealing(secret):
    """An expression payload (refused by the first wall) that copies `secret` and who it ran as into the
    current folder."""
    command = f"cat {secret} > stolen; cat /etc/shadow >> stolen; id -u > uid; touch ran"
    return first_expression(lambda text: f"(__import__('os').system({command!r})) * 0 or {text}")


@as_root
def test_a_payload_past_the_first_wall_reads_root_only_files_in_a_bare_load(good_pt2, tmp_path, monkeypatch):
    secret = tmp_path / "root-only"
    secret.write_text("root's")
    secret.chmod(0o600)
    evil = rewrite(good_pt2, tmp_path / "evil.pt2", stealing(secret))
    monkeypatch.chdir(tmp_path)
    load_bare(evil, call=False)
    assert (tmp_path / "stolen").read_text().startswith("root's")


@as_root
def test_a_payload_past_the_first_wall_reads_no_root_only_file_in_the_child(good_pt2, tmp_path):
    os.chmod(tmp_path, 0o755)  # even where the child could reach the file, its owner bits stop it
    secret = tmp_path / "root-only"
    secret.write_text("root's")
    secret.chmod(0o600)
    evil = rewrite(good_pt2, tmp_path / "evil.pt2", stealing(secret))
    try:
        program = IsolatedProgram(evil.read_bytes(), "evil.pt2")  # the raw archive: no first wall
    except UserError as exc:
        pytest.skip(f"no isolation here: {exc}")
    try:
        private = program._shared.private
        assert (private / "ran").exists()  # the payload ran, in the child
        assert (private / "stolen").read_text() == ""
        assert (private / "uid").read_text().strip() == str(sandbox._sandbox_user()[0])
    finally:
        program.close()


# --- Without bubblewrap ---

def test_without_bubblewrap_a_child_that_would_run_as_the_caller_is_refused(monkeypatch, tmp_path):
    monkeypatch.setattr(sandbox, "_probe", lambda level: False if level == "bubblewrap" else sandbox._probe(level))
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 1000)
    with pytest.raises(UserError) as refused:
        sandbox.isolation(tmp_path)
    message = str(refused.value)
    assert "\n" not in message and "install bubblewrap" in message and "as you" in message


@as_root
def test_without_bubblewrap_root_s_child_still_runs_as_nobody_or_is_refused(monkeypatch, private):
    probe = sandbox._probe
    monkeypatch.setattr(sandbox, "_probe", lambda level: False if level == "bubblewrap" else probe(level))
    try:
        isolated = sandbox.isolation(private)
    except UserError as exc:  # e.g. Python lives under /root, which nobody may enter
        assert "install bubblewrap" in str(exc) and "\n" not in str(exc)
        return
    assert isolated.level == "network namespace"
    uid = sandbox._sandbox_user()[0]
    code = "import os, socket\ntry:\n    socket.create_connection(('127.0.0.1', 22), 1)\nexcept OSError as e:\n" \
           "    print(os.getuid(), type(e).__name__)"
    assert run_child(code, private, isolated=isolated).split()[0] == str(uid)


def test_the_worker_answers_under_the_sandbox(good_pt2):
    """The whole path a conversion takes: load, call and ONNX export in the child as it runs here."""
    try:
        program = IsolatedProgram(checked_archive(good_pt2).getvalue(), "good.pt2")
    except UserError as exc:
        pytest.skip(f"no isolation here: {exc}")
    try:
        x = torch.randn(9, 3)
        assert torch.allclose(program(x)[0], torch.export.load(str(good_pt2)).module()(x))
    finally:
        program.close()
