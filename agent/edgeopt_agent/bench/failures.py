"""How a benchmark fails: a short list of kinds, each with a message naming the cause."""
from __future__ import annotations

import signal
from typing import Any, Dict

from ..errors import MissingExtraError, UserError
from ..runners.errors import ArtifactError, InputError, UnsupportedModelError, looks_like_out_of_memory

BAD_ARTIFACT = "bad_artifact"  # not a model, or a model the runtime cannot parse
BAD_INPUT = "bad_input"  # the input file or generated data does not fit the model
UNSUPPORTED = "unsupported"  # valid model this runtime/build/board cannot run (op, dtype, batch, extra)
OUT_OF_MEMORY = "out_of_memory"
CRASH = "crash"  # the benchmark process died (signal or exit) without saying why
TIMEOUT = "timeout"
RUNTIME_ERROR = "runtime_error"  # the runtime raised something else during inference

_MAX_MESSAGE = 2000


def failure(kind: str, message: str) -> Dict[str, str]:
    message = message.strip() or kind
    if len(message) > _MAX_MESSAGE:
        message = message[: _MAX_MESSAGE - 3] + "..."
    return {"kind": kind, "message": message}


def classify(exc: BaseException) -> Dict[str, str]:
    """The failure an exception raised inside the benchmark process stands for."""
    text = str(exc)
    if isinstance(exc, MemoryError) or looks_like_out_of_memory(text):
        return failure(OUT_OF_MEMORY, text or "out of memory")
    if isinstance(exc, ArtifactError):
        return failure(BAD_ARTIFACT, text)
    if isinstance(exc, (UnsupportedModelError, MissingExtraError)):
        return failure(UNSUPPORTED, text)
    if isinstance(exc, (InputError, UserError)):
        return failure(BAD_INPUT, text)
    if type(exc).__name__ == "InvalidArgument":  # onnxruntime rejecting the feeds at run time
        return failure(BAD_INPUT, text)
    return failure(RUNTIME_ERROR, f"{type(exc).__name__}: {text}")


def describe_exit(returncode: int, log_tail: str = "") -> Dict[str, str]:
    """The failure a benchmark process that exited without a result stands for."""
    detail = f"; its last output: {log_tail}" if log_tail else ""
    if returncode < 0:
        name = _signal_name(-returncode)
        cause = {
            "SIGSEGV": "segmentation fault",
            "SIGBUS": "bus error",
            "SIGILL": "illegal instruction (a build for another CPU?)",
            "SIGFPE": "arithmetic fault",
            "SIGABRT": "aborted",
            "SIGKILL": "killed; the kernel's out-of-memory killer sends this",
        }.get(name, "")
        return failure(CRASH, f"the benchmark process was killed by {name}" + (f" ({cause})" if cause else "") + detail)
    if looks_like_out_of_memory(log_tail):
        return failure(OUT_OF_MEMORY, f"the benchmark process ran out of memory and exited with status {returncode}{detail}")
    return failure(CRASH, f"the benchmark process exited with status {returncode} without a result{detail}")


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def error_result(kind: str, message: str, **context: Any) -> Dict[str, Any]:
    return {"ok": False, **context, "error": failure(kind, message)}

