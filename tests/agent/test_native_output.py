"""native_output: what native code writes to file descriptor 2 is captured and logged, not printed."""
from __future__ import annotations

import logging
import os

import pytest

from edgeopt_agent.native_output import native_stderr_logged


@pytest.fixture
def log():
    logger = logging.getLogger("edgeopt_agent.tests.native_output")
    logger.setLevel(logging.INFO)  # below DEBUG: the CLI's level without -v
    yield logger
    logger.setLevel(logging.NOTSET)


def _native_write(text: str) -> None:
    os.write(2, text.encode())  # below Python's sys.stderr, as a C++ library writes


def test_native_text_is_not_printed_by_default(log, capfd, caplog):
    with native_stderr_logged(log, "library"):
        _native_write("INFO: chatter\n")
    assert "chatter" not in capfd.readouterr().err
    assert not caplog.records  # kept at DEBUG, which this logger does not emit


def test_native_text_is_kept_as_a_warning_when_the_block_fails(log, capfd, caplog):
    with caplog.at_level(logging.WARNING, logger=log.name), pytest.raises(RuntimeError, match="boom"):
        with native_stderr_logged(log, "library"):
            _native_write("ERROR: the reason\n")
            raise RuntimeError("boom")
    assert "the reason" not in capfd.readouterr().err
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [(logging.WARNING, "library wrote:\nERROR: the reason")]


def test_debug_logging_lets_the_text_through(log, capfd):
    log.setLevel(logging.DEBUG)
    with native_stderr_logged(log, "library"):
        _native_write("INFO: chatter\n")
    assert "INFO: chatter" in capfd.readouterr().err
