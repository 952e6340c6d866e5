"""A manifest from elsewhere cannot make the host open, hash or send a file outside OUTDIR.

Every host command that opens a manifest's artifacts (bench, deploy, report, profile, analyze)
reads the manifest through edgeopt_converters.manifest.read, which refuses an artifact path that
is absolute, has '..', or leads through a symlink out of the manifest's folder.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from edgeopt.deploy.artifact import choose_artifact
from edgeopt_agent.errors import UserError
from edgeopt_converters.manifest import read

SECRET = b"the host's private key, or any file the user can read"


def outdir_with(tmp_path, path, **entry):
    """OUTDIR whose one artifact is listed as `path`, and a file outside it that `path` may reach."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "secret.onnx").write_bytes(SECRET)
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    artifact = {"key": "onnx-fp32", "path": str(path) if isinstance(path, os.PathLike) else path, "format": "onnx", "precision": "fp32",
                "sha256": hashlib.sha256(SECRET).hexdigest(), "size_bytes": len(SECRET), **entry}
    (out / "manifest.json").write_text(json.dumps({"schema": "edgeopt.manifest/1", "recommended": "onnx-fp32",
                                                   "artifacts": [artifact]}))
    return out


def escapes(tmp_path):
    """Each way a listed path can point outside OUTDIR: name -> OUTDIR."""
    out = {}
    out["dotdot"] = outdir_with(tmp_path / "a", "../secret.onnx")
    out["absolute"] = outdir_with(tmp_path / "b", tmp_path / "b" / "secret.onnx")
    linked = outdir_with(tmp_path / "c", "model.onnx")
    os.symlink(tmp_path / "c" / "secret.onnx", linked / "model.onnx")
    out["symlink"] = linked
    folder = outdir_with(tmp_path / "d", "sub/model.onnx")
    os.symlink(tmp_path / "d", folder / "sub")  # a folder on the way leads out
    out["symlinked-folder"] = folder
    return out


@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlink", "symlinked-folder"])
def test_reading_a_manifest_refuses_paths_outside_its_folder(tmp_path, how):
    out = escapes(tmp_path)[how]
    with pytest.raises(UserError, match="refusing to open files outside it") as caught:
        read(out)
    assert "artifact 'onnx-fp32'" in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlink", "symlinked-folder"])
def test_deploy_does_not_send_a_file_outside_outdir(tmp_path, how):
    with pytest.raises(UserError, match="outside"):
        choose_artifact(escapes(tmp_path)[how])


def test_a_path_that_is_not_a_string_is_refused(tmp_path):
    with pytest.raises(UserError, match="has a \"path\" that is not a string"):
        read(outdir_with(tmp_path, 7))


def test_paths_inside_outdir_are_fine_symlinks_included(tmp_path):
    out = outdir_with(tmp_path, "models/model.onnx")
    (out / "models").mkdir()
    (out / "models" / "real.onnx").write_bytes(SECRET)
    os.symlink("real.onnx", out / "models" / "model.onnx")  # stays inside
    assert read(out).artifacts[0].path == "models/model.onnx"
    assert choose_artifact(out).path == out / "models" / "model.onnx"


def test_edgeopt_bench_refuses_with_one_line(tmp_path):
    out = escapes(tmp_path)["dotdot"]
    run = subprocess.run([sys.executable, "-m", "edgeopt.cli.main", "bench", str(out), "--runs", "1"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr
    assert "'../secret.onnx'" in run.stderr and "refusing to open files outside it" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "Traceback" not in run.stderr
