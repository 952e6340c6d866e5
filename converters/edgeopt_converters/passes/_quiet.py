"""Keeping the exporters' chatter off the terminal: library log levels, and captured output per step."""
from __future__ import annotations

import contextlib
import io
import logging
import os
import tempfile

from edgeopt_agent.native_output import fds_redirected

log = logging.getLogger("edgeopt.convert")
# Libraries that log through Python logging at WARNING for things a user cannot act on.
_CHATTY_LOGGERS = ("torch.onnx", "torch.utils._pytree", "torchao", "onnxscript", "absl")


def quiet_libraries() -> None:
    """Silence the exporters' warnings a user cannot act on; call once before converting.

    TensorFlow reads TF_CPP_MIN_LOG_LEVEL when it is first imported, so this runs before any step.
    A level the user set for TF_CPP_MIN_LOG_LEVEL is kept.
    """
    for name in _CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@contextlib.contextmanager
def captured_output(step: str):
    """Keep exporters' chatter (Python and native) off the terminal; it is logged under -v."""
    buffer = io.StringIO()
    with tempfile.TemporaryFile(mode="w+") as native:
        try:
            with fds_redirected(native.fileno()), contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
                yield
        finally:
            native.seek(0)
            text = (buffer.getvalue() + native.read()).strip()
            if text:
                log.debug("%s output:\n%s", step, text)
