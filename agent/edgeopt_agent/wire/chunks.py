"""How an artifact is cut for the trip through the broker: the chunk plan a job carries, and
cutting a file by it (host side)."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Tuple

DEFAULT_CHUNK_BYTES = 256 * 1024
MIN_CHUNK_BYTES = 1024
MAX_CHUNK_BYTES = 4 * 1024 * 1024  # base64 of it stays well under MAX_MESSAGE_BYTES
MAX_CHUNKS = 65536  # keeps the job's list of chunk hashes under 5 MB


@dataclass(frozen=True)
class ChunkPlan:
    """How an artifact is cut for the trip through the broker: fixed-size chunks, each with its sha256."""

    chunk_size: int
    sha256: Tuple[str, ...]

    @property
    def count(self) -> int:
        return len(self.sha256)

    def length(self, index: int, size: int) -> int:
        """Bytes in chunk `index` of a `size`-byte artifact (the last one may be shorter)."""
        return min(self.chunk_size, size - index * self.chunk_size)

    def to_dict(self) -> Dict[str, Any]:
        return {"chunk_size": self.chunk_size, "sha256": list(self.sha256)}


def chunk_count(size: int, chunk_size: int) -> int:
    return max(1, -(-size // chunk_size))


def plan_chunks(path: Path, chunk_size: int) -> Tuple[ChunkPlan, int, str]:
    """(chunk plan, size, sha256) of a file, read once."""
    whole = hashlib.sha256()
    hashes: List[str] = []
    size = 0
    with open(path, "rb") as handle:
        for data in iter(lambda: handle.read(chunk_size), b""):
            whole.update(data)
            hashes.append(hashlib.sha256(data).hexdigest())
            size += len(data)
    if size == 0:
        raise ValueError(f"{path} is empty")
    return ChunkPlan(chunk_size=chunk_size, sha256=tuple(hashes)), size, whole.hexdigest()


def read_chunk(path: Path, plan: ChunkPlan, index: int) -> bytes:
    with open(path, "rb") as handle:
        handle.seek(index * plan.chunk_size)
        return handle.read(plan.chunk_size)
