from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def update_with_weights(digest, module) -> None:
    """Feed every tensor of a PyTorch module's state_dict to `digest`, in state_dict order."""
    for tensor in module.state_dict().values():
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
