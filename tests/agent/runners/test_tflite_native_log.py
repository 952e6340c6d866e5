"""LiteRT's C++ log line about the XNNPACK delegate stays off stderr unless debug logging is on (-v).

LiteRT prints that line once per process, so each case loads the model in a fresh interpreter
process whose stderr is this process's file descriptor 2, which capfd reads.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

INFO_LINE = "Created TensorFlow Lite XNNPACK delegate for CPU"

LOAD = """
import logging, sys
if sys.argv[2] == "debug":
    logging.basicConfig(level=logging.DEBUG)
from edgeopt_agent.runners import open_runner
with open_runner(sys.argv[1], threads=1) as runner:
    print(runner.describe()["xnnpack"], runner.inputs()[0].name)
"""


def _load_in_fresh_process(path, level: str) -> None:
    subprocess.run([sys.executable, "-c", LOAD, str(path), level], check=True, timeout=120)


def test_delegate_info_line_is_not_printed_by_default(dynamic_batch_tflite, capfd):
    _load_in_fresh_process(dynamic_batch_tflite, "default")
    captured = capfd.readouterr()
    assert captured.out.startswith("True ")  # loaded, with XNNPACK on
    assert INFO_LINE not in captured.err


def test_delegate_info_line_is_printed_with_debug_logging(dynamic_batch_tflite, capfd):
    _load_in_fresh_process(dynamic_batch_tflite, "debug")
    captured = capfd.readouterr()
    assert captured.out.startswith("True ")
    assert INFO_LINE in captured.err


@pytest.mark.parametrize("level", ["default", "debug"])
def test_loading_still_works_after_the_capture(dynamic_batch_tflite, level, capfd):
    """stderr is restored: a Python write after loading reaches file descriptor 2."""
    code = LOAD + "\nsys.stderr.write('after load\\n')\n"
    subprocess.run([sys.executable, "-c", code, str(dynamic_batch_tflite), level], check=True, timeout=120)
    assert "after load" in capfd.readouterr().err
