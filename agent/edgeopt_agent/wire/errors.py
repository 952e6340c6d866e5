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


# Error kinds of a job the agent answered without running it: refused by admission (signature,
# validity, replay, target, downgrade), refused as a message (broken, oversized, another schema,
# device or job type, an invalid option, a full inbox), or whose artifact never arrived whole
# (too large, bad path, missing, changed, transfer cut, no room, download failed). Such an answer
# says nothing about how the artifact runs on the board, so the fleet's "latest result" of a
# (device, model, artifact) never lets one hide the last measured result.
REFUSED_BEFORE_RUNNING = frozenset({
    "unsigned_job", "signature_invalid", "expired", "not_yet_valid", "replayed", "wrong_target", "downgrade",
    "malformed_message", "oversized", "unsupported_schema", "wrong_device", "unknown_job_type", "invalid_job",
    "inbox_full", "artifact_too_large", "invalid_path", "missing_artifact", "artifact_mismatch",
    "transfer_incomplete", "no_space", "download_failed",
})
