"""Ctrl-C (or SIGTERM) while the suite runs stops pytest with its summary: a test that was inside
`edgeopt`'s command when the signal came is not counted as failed, and no later test runs."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

CONFTEST = Path(__file__).with_name("conftest.py")

SLOW_FACTORY = """
import os
import time
from pathlib import Path

import torch


def build():
    Path(os.environ["EDGEOPT_TEST_MARKER"]).write_text("inside the command")
    time.sleep(120)
    return torch.nn.Linear(4, 2)
"""

TESTS = """
from pathlib import Path

from edgeopt.cli.main import main


def test_before():
    pass


def test_inside_the_command(tmp_path):
    code = main(["convert", f"{Path(__file__).with_name('slow.py')}:build", "--device", "x86-64",
                 "-o", str(tmp_path / "out"), "--input-shape", "1,4", "--no-timing"])
    assert code == 0


def test_after():
    pass
"""

# The suite's own conftest hooks, loaded into the small suite under test.
CONFTEST_LINK = f"""
import importlib.util
import sys

sys.path.insert(0, {str(CONFTEST.parent)!r})
_spec = importlib.util.spec_from_file_location("edgeopt_suite_conftest", {str(CONFTEST)!r})
_suite = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_suite)
pytest_configure = _suite.pytest_configure
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_the_suite_with_its_summary(tmp_path, signum):
    (tmp_path / "slow.py").write_text(SLOW_FACTORY)
    (tmp_path / "test_small_suite.py").write_text(TESTS)
    (tmp_path / "conftest.py").write_text(CONFTEST_LINK)
    marker = tmp_path / "marker"
    pytest_run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path, env=dict(os.environ, EDGEOPT_TEST_MARKER=str(marker)), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as a terminal's foreground job has it
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and pytest_run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.exists(), pytest_run.communicate()[0]
        started = time.monotonic()
        pytest_run.send_signal(signum)
        output, _ = pytest_run.communicate(timeout=60)
    finally:
        pytest_run.kill()
    assert time.monotonic() - started < 30, output  # stopped, not left to finish the 120 s call
    assert pytest_run.returncode == pytest.ExitCode.INTERRUPTED, output
    assert "KeyboardInterrupt" in output, output
    summary = output.strip().splitlines()[-1]
    assert "1 passed" in summary and "failed" not in summary, output
    assert "test_after" not in output, output
