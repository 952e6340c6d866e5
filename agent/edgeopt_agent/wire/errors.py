"""The error a message that breaks the protocol raises, on either side."""
from __future__ import annotations

from typing import Optional

from ..errors import UserError


class ProtocolError(UserError):
    """A message that breaks the protocol; `kind` is the error kind reported back to the sender."""

    def __init__(self, message: str, kind: str = "malformed_message", job_id: Optional[str] = None):
        super().__init__(message)
        self.kind = kind
        self.job_id = job_id
