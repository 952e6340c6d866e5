"""What can go wrong between a model file and an inference, in words the user can act on."""
from __future__ import annotations

from ..errors import ArtifactError, UserError  # ArtifactError lives below the runners: bundle.py raises it too

__all__ = ["ArtifactError", "FreeSizeError", "InputError", "UnsupportedModelError", "looks_like_out_of_memory"]


class UnsupportedModelError(UserError):
    """The model is valid but this runtime, build or board cannot run it (op, dtype, provider)."""


class InputError(UserError):
    """The inputs given do not match what the model declares (names, shapes, dtypes)."""


class FreeSizeError(InputError):
    """An input has a dynamic size that nothing given fixes; `name` and `axis` say which, so a caller
    can name its own option for giving it."""

    def __init__(self, message: str, name: str, axis: int):
        super().__init__(message)
        self.name, self.axis = name, axis


# How runtimes and the C library word an allocation that failed (ORT's arena, std::bad_alloc,
# mmap under RLIMIT_AS, OpenBLAS buffers).
_OUT_OF_MEMORY_PHRASES = (
    "failed to allocate memory",
    "bad_alloc",
    "cannot allocate memory",
    "out of memory",
    "failed to map segment",
    "memory allocation still failed",
    "unable to allocate",
)


def looks_like_out_of_memory(message: str) -> bool:
    lowered = message.lower()
    return any(phrase in lowered for phrase in _OUT_OF_MEMORY_PHRASES)
