"""Ctrl-C or SIGTERM during `edgeopt convert`: the log says `interrupted` (not `failed`), the command exits
130 / 143, and the output folder keeps no `.edgeopt-build-*` folder."""
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from model_files import write_slow_export_factory

EDGEOPT = str(Path(sys.executable).with_name("edgeopt"))



def _until(process, text, timeout_s=180):
    seen = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line:
            break
        seen.append(line)
        if text in line:
            return seen
    pytest.fail(f"never saw {text!r}: {''.join(seen)}")


@pytest.mark.slow
@pytest.mark.parametrize("signum, code, said", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")])
def test_a_signal_mid_conversion_leaves_no_build_folder(tmp_path, signum, code, said):
    model = write_slow_export_factory(tmp_path / "stuck.py", 120)  # stopped by the signal long before
    np.save(tmp_path / "calib.npy", np.zeros((4, 8), np.float32))
    out = tmp_path / "out"
    out.mkdir()  # the user's own folder: it stays, only what the run made goes
    (out / "notes.txt").write_text("mine")
    process = subprocess.Popen(
        [EDGEOPT, "convert", model, "--device", "x86-64", "-o", str(out), "--format", "onnx",
         "--precision", "fp32", "--calibration", str(tmp_path / "calib.npy"), "--no-timing"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # a background job would ignore SIGINT
    try:
        _until(process, "export ONNX FP32: started")
        assert list(out.glob(".edgeopt-build-*")), "the build folder should exist while the export runs"
        time.sleep(0.5)
        process.send_signal(signum)
        rest = process.stderr.read()  # to its end: the process has exited
        process.wait(timeout=60)
    finally:
        process.kill()
    lines = rest.strip().splitlines()
    assert process.returncode == code, rest
    assert lines[-1] == said, rest
    assert any(line.startswith("export ONNX FP32: interrupted after ") for line in lines), rest
    assert "failed" not in rest and "Traceback" not in rest, rest
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
