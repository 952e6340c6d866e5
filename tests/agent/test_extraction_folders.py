"""A bundle extracted under the agent's data dir leaves nothing behind for good: a benchmark child
killed while loading leaves its folder, and the agent's start or the next extraction removes it,
never following a link and never touching anything outside that folder."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap

import pytest

from edgeopt_agent import bundle, extraction_folders
from edgeopt_agent.processes import boot_id

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to tell processes apart")

RELU_PARAM = "7767517\n2 2\nInput in0 0 1 in0 0=4\nReLU relu 1 1 in0 out0\n"


def _left_by_a_killed_process(root) -> str:
    """The folder a process made in `root` before it was SIGKILLed (so it never removed it)."""
    code = textwrap.dedent(f"""
        import os, signal
        from edgeopt_agent import extraction_folders
        folder = extraction_folders.new_folder({str(root)!r})
        (folder / "model.bin").write_bytes(b"weights")
        print(folder.name, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == -9, done.stderr
    name = done.stdout.strip()
    assert (root / name / "model.bin").is_file()
    return name


def _stale_name(pid=4_194_000, start=1) -> str:
    """A made-up folder of this boot whose process (that pid at that start time) is not running."""
    return f"{boot_id().replace('-', '')[:8]}-{pid}-{start}-abcd1234"


def _bundle(tmp_path):
    return bundle.write_bundle({"model.param": RELU_PARAM.encode(), "model.bin": b""}, tmp_path / "m.fp32.ncnn")


def test_the_next_extraction_removes_what_a_killed_process_left(tmp_path):
    root = tmp_path / "bundles"
    killed = _left_by_a_killed_process(root)
    (root / _stale_name()).mkdir()
    with bundle.extracted(_bundle(tmp_path), ("model.param",), under=root) as folder:
        assert folder.parent == root and folder.name.startswith(extraction_folders.owner_prefix())
        assert sorted(p.name for p in root.iterdir()) == [folder.name]
        assert (folder / "model.param").read_text() == RELU_PARAM
    assert list(root.iterdir()) == [], f"{killed} and the made-up stale folder were swept"


def test_folders_of_running_processes_and_foreign_entries_stay(tmp_path):
    root = tmp_path / "bundles"
    root.mkdir()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = root / (extraction_folders.owner_prefix(sleeper.pid) + "live0001")
        live.mkdir()
        mine = root / (extraction_folders.owner_prefix() + "mine0001")
        mine.mkdir()
        foreign = root / "notes"
        foreign.mkdir()
        (root / "README").write_text("not an extraction")
        stale = root / _stale_name(pid=sleeper.pid, start=1)  # that pid, but not the process that made it
        stale.mkdir()
        assert extraction_folders.sweep(root) == [stale.name]
        assert sorted(p.name for p in root.iterdir()) == sorted([live.name, mine.name, "notes", "README"])
    finally:
        sleeper.kill()
        sleeper.wait()
    assert extraction_folders.sweep(root) == [live.name]  # its process has ended now


def test_the_sweep_never_follows_a_link_nor_deletes_outside_its_folder(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("precious")
    root = tmp_path / "bundles"
    root.mkdir()
    link_named_like_an_extraction = root / _stale_name(start=2)
    link_named_like_an_extraction.symlink_to(outside, target_is_directory=True)
    stale = root / _stale_name(start=3)
    stale.mkdir()
    (stale / "escape").symlink_to(outside, target_is_directory=True)
    (stale / "keep-link").symlink_to(outside / "keep.txt")

    assert extraction_folders.sweep(root) == [stale.name]
    assert (outside / "keep.txt").read_text() == "precious"
    assert link_named_like_an_extraction.is_symlink()  # not ours: left alone, its target untouched

    linked_root = tmp_path / "linked-bundles"
    linked_root.symlink_to(outside, target_is_directory=True)
    (outside / _stale_name(start=4)).mkdir()
    assert extraction_folders.sweep(linked_root) == []  # a root that is a link is not swept
    assert (outside / _stale_name(start=4)).is_dir()
    with pytest.raises(OSError, match="not a link"):
        extraction_folders.new_folder(linked_root)


def test_the_agent_sweeps_its_bundle_folder_when_it_starts(tmp_path):
    from edgeopt_agent.daemon.agent import Agent
    from edgeopt_agent.daemon.config import build_config
    from edgeopt_agent.daemon.jobs import BUNDLES_DIR

    data_dir = tmp_path / "data"
    root = data_dir / BUNDLES_DIR
    _left_by_a_killed_process(root)
    (root / _stale_name()).mkdir()
    agent = Agent(build_config({"device_id": "dev-1", "data_dir": str(data_dir)}))
    try:
        assert list(root.iterdir()) == []
    finally:
        agent.store.close()
        agent._lock.close()


def test_an_ncnn_benchmark_extracts_under_the_spec_bundle_dir_and_cleans_up(tmp_path):
    pytest.importorskip("ncnn", reason="the ncnn runner needs the agent-ncnn extra")
    from edgeopt_agent.bench import BenchmarkSpec, run_benchmark

    root = tmp_path / "bundles"
    killed = _left_by_a_killed_process(root)
    spec = BenchmarkSpec(artifact=str(_bundle(tmp_path)), bundle_dir=str(root), runs=2, duration_s=0,
                         warmup_runs=0, warmup_s=0, idle_s=0, timeout_s=120, threads=1)  # runtime: from the file
    assert dataclasses.replace(spec, runtime="ncnn").runner_options() == {"extract_dir": str(root)}
    result = run_benchmark(spec)
    assert result["runtime"] == "ncnn"
    assert result["ok"] is True, result.get("error")
    assert not (root / killed).exists() and list(root.iterdir()) == []
    assert os.stat(root).st_mode & 0o777 == 0o700


def test_an_agent_job_extracts_under_the_data_dirs_bundle_folder(tmp_path):
    pytest.importorskip("ncnn", reason="the ncnn runner needs the agent-ncnn extra")
    import hashlib

    from edgeopt_agent import wire
    from edgeopt_agent.daemon.jobs import BUNDLES_DIR, JobHandler

    data_dir = tmp_path / "data"
    (data_dir / "models").mkdir(parents=True)
    path = bundle.write_bundle({"model.param": RELU_PARAM.encode(), "model.bin": b""}, data_dir / "models" / "m.ncnn")
    stale = data_dir / BUNDLES_DIR / _stale_name()
    stale.mkdir(parents=True)
    job = wire.benchmark_job("dev-1", 1, "job-ncnn", hashlib.sha256(path.read_bytes()).hexdigest(), "ncnn",
                             path="models/m.ncnn", runs=2, duration_s=0, warmup_runs=0, warmup_s=0, idle_s=0)
    body = JobHandler("dev-1", data_dir).handle(job.encode())
    assert body["ok"] is True, body["error"]
    assert not stale.exists() and list((data_dir / BUNDLES_DIR).iterdir()) == []


def test_odd_names_never_stop_the_sweep(tmp_path):
    """Pid 0 (kill(0) would reach our own group) and an earlier boot's folder are stale; a pid past
    Linux's limit is not a name the sweep wrote, so it stays, and nothing raises."""
    root = tmp_path / "bundles"
    root.mkdir()
    (root / _stale_name(pid=0)).mkdir()
    (root / f"00000000-{os.getpid()}-1-abcd1234").mkdir()
    huge = root / "x-9999999999-x-abcd1234"
    huge.mkdir()
    extraction_folders.sweep(root)
    assert sorted(p.name for p in root.iterdir()) == [huge.name]


def test_the_runners_floor_does_not_reach_back_to_the_benchmark_engine():
    """bench runs the runners, and the runners extract bundles: bundle and extraction_folders stand on
    edgeopt_agent.processes and errors, never on bench nor on the runners above them."""
    import ast

    from pathlib import Path

    import edgeopt_agent

    root = Path(edgeopt_agent.__file__).parent
    for name in ("bundle.py", "extraction_folders.py", "processes.py"):
        tree = ast.parse((root / name).read_text(encoding="utf-8"))
        imported = [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
        assert not [m for m in imported if m == "bench" or m.startswith("bench.") or "edgeopt_agent.bench" in m], name
        assert not [m for m in imported if m == "runners" or m.startswith("runners.") or "edgeopt_agent.runners" in m], name
