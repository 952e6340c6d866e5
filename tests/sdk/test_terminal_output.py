"""What a user sees of `edgeopt convert`: on a terminal, bars and no library noise; in a log, a line
per step as it starts and as it finishes."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EDGEOPT = str(Path(sys.executable).with_name("edgeopt"))
NOISE = ("torch/_guards.py", "ConstraintViolationError", "torchvision::", "Traceback")


@pytest.mark.slow
def test_a_terminal_shows_no_library_noise(tmp_path):
    if shutil.which("script") is None:
        pytest.skip("util-linux `script` (a pseudo-terminal) is not installed")
    command = f"{EDGEOPT} convert example:digits-cnn --device rpi4 -o {tmp_path / 'out'} --no-timing"
    log = tmp_path / "terminal.log"
    run = subprocess.run(["script", "-qec", command, str(log)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         env=dict(os.environ, COLUMNS="120"), timeout=600)
    shown = log.read_text(errors="replace")
    assert run.returncode == 0, shown[-2000:]
    assert "recommended:" in shown
    for noise in NOISE:
        assert noise not in shown, f"{noise!r} reached the terminal"


@pytest.mark.slow
def test_a_log_gets_one_line_per_step_as_it_ends(tmp_path):
    run = subprocess.run([EDGEOPT, "convert", "example:digits-cnn", "--device", "rpi4", "-o", str(tmp_path / "out"),
                          "--no-timing"], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    steps = [line for line in run.stderr.splitlines() if ": done in " in line]
    assert any(line.startswith("export ONNX FP32: done in ") for line in steps)
    assert any(line.startswith("validate tflite-int8: done in ") and line.endswith("(397/397)") for line in steps)
    assert "━" not in run.stderr  # no bar drawn into a file
    for noise in NOISE:
        assert noise not in run.stderr


def test_a_step_that_fails_says_so_in_a_log():
    import io

    from edgeopt_converters.progress import LineProgress

    log = io.StringIO()
    progress = LineProgress(log)
    with pytest.raises(RuntimeError):
        with progress.step("export TFLite FP32", 1):
            raise RuntimeError("exporter gave up")
    with progress.step("validate onnx-fp32", 4) as advance:
        advance(4)
    lines = log.getvalue().splitlines()
    assert lines[0] == "export TFLite FP32: started"
    assert lines[1].startswith("export TFLite FP32: failed after ") and "done" not in lines[1]
    assert lines[2] == "validate onnx-fp32: started (4 samples)"
    assert lines[3].startswith("validate onnx-fp32: done in ") and lines[3].endswith("(4/4)")
