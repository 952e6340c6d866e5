"""Chunked artifacts put back together on the board (the host cuts them: edgeopt_agent.wire.chunks).

Received chunks wait on disk until the whole file is there, under
``<data_dir>/transfers/<artifact sha256>/``: ``plan.json`` (size, format, chunk size and the
sha256 of every chunk, from the job) and one ``<index>.chunk`` file per chunk, written under a
temporary name and renamed once on disk. A chunk is kept only if its sha256 is the one the job
lists; the assembled file is checked against the artifact's sha256 before it is moved to its
place, so a file that is not the one the job names never appears there.

Chunks survive restarts and failed transfers, so a job sent again needs only what is missing.
Disk use is bounded: a plan is accepted only when the disk has room for the rest of the file
plus a reserve, at most `keep_partial` other incomplete artifacts are kept (the least recently
active go first), and none untouched for `max_age_s`.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Set, Tuple

from ..files import READ_BYTES, write_atomically
from ..wire import ArtifactRef, ChunkPlan, ProtocolError, chunk_count

log = logging.getLogger(__name__)

PLAN_FILE = "plan.json"
ASSEMBLING_FILE = "assembling.tmp"
DEFAULT_KEEP_PARTIAL = 3
DEFAULT_RESERVE_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_AGE_S = 7 * 24 * 3600.0


class TransferError(ProtocolError):
    """A chunk or a whole artifact that cannot be taken: wrong bytes, no room, unknown artifact."""


@dataclass(frozen=True)
class Plan:
    sha256: str
    size: int
    format: str
    chunks: ChunkPlan

    @classmethod
    def of(cls, ref: ArtifactRef) -> "Plan":
        if ref.chunks is None or ref.size is None:
            raise ValueError("the artifact does not come in chunks")
        return cls(ref.sha256, ref.size, ref.format, ref.chunks)

    def to_json(self) -> str:
        return json.dumps({"sha256": self.sha256, "size": self.size, "format": self.format,
                           "chunks": self.chunks.to_dict()})

    @classmethod
    def from_json(cls, text: str) -> "Plan":
        data = json.loads(text)
        chunks = ChunkPlan(chunk_size=data["chunks"]["chunk_size"], sha256=tuple(data["chunks"]["sha256"]))
        if chunk_count(data["size"], chunks.chunk_size) != chunks.count:
            raise ValueError("chunk count does not match the size")
        return cls(data["sha256"], data["size"], data["format"], chunks)


class ChunkStore:
    """Thread-safe: chunks arrive on the MQTT thread while the job worker waits and assembles."""

    def __init__(
        self,
        root: Path,
        keep_partial: int = DEFAULT_KEEP_PARTIAL,
        reserve_bytes: int = DEFAULT_RESERVE_BYTES,
        max_age_s: float = DEFAULT_MAX_AGE_S,
        free_bytes: Optional[Callable[[Path], int]] = None,
    ):
        self.root = Path(root)
        self.keep_partial = keep_partial
        self.reserve_bytes = reserve_bytes
        self.max_age_s = max_age_s
        self._free_bytes = free_bytes or (lambda folder: shutil.disk_usage(folder).free)
        self._lock = threading.RLock()
        self._plans: Dict[str, Plan] = {}
        self._held: Dict[str, Set[int]] = {}
        self._assembling: Set[str] = set()

    # --- plans --------------------------------------------------------------------------------

    def register(self, ref: ArtifactRef) -> List[int]:
        """Accept (or confirm) the plan of a chunked artifact; returns the chunk indices still missing."""
        plan = Plan.of(ref)
        with self._lock:
            if plan.sha256 in self._assembling:
                return []  # complete, being joined right now
            existing = self._plan(plan.sha256)
            if existing is not None and existing != plan:
                log.info("artifact %s comes in other chunks than before; starting it over", plan.sha256[:12])
                self.discard(plan.sha256)
                existing = None
            self._make_room(plan)
            if existing is None:
                folder = self._folder(plan.sha256)
                folder.mkdir(parents=True, exist_ok=True)
                write_atomically(folder / PLAN_FILE, plan.to_json().encode("utf-8"), durable=True)
                self._plans[plan.sha256] = plan
                self._held[plan.sha256] = self._scan(plan)
            return self.missing(plan.sha256)

    def missing(self, sha256: str) -> List[int]:
        with self._lock:
            plan = self._plan(sha256)
            if plan is None:
                raise TransferError(f"no transfer of artifact {sha256[:12]} is under way", kind="unknown_artifact")
            held = self._held[sha256]
            return [i for i in range(plan.chunks.count) if i not in held]

    def progress(self, sha256: str) -> Tuple[int, int]:
        """(chunks held, chunks in all); (0, 0) for an unknown artifact."""
        with self._lock:
            plan = self._plan(sha256)
            return (len(self._held[sha256]), plan.chunks.count) if plan else (0, 0)

    def complete(self, sha256: str) -> bool:
        with self._lock:
            plan = self._plan(sha256)
            return plan is not None and len(self._held[sha256]) == plan.chunks.count

    def partial(self) -> List[str]:
        """Artifacts with chunks on disk, least recently active first."""
        if not self.root.is_dir():
            return []
        folders = [p for p in self.root.iterdir() if p.is_dir() and (p / PLAN_FILE).is_file()]
        return [p.name for p in sorted(folders, key=_last_active)]

    def discard(self, sha256: str) -> None:
        with self._lock:
            self._plans.pop(sha256, None)
            self._held.pop(sha256, None)
            shutil.rmtree(self._folder(sha256), ignore_errors=True)

    # --- chunks -------------------------------------------------------------------------------

    def put(self, sha256: str, index: int, data: bytes) -> bool:
        """Keep one chunk if it is the one the plan lists; False when it was already held."""
        with self._lock:
            plan = self._plan(sha256)
            if plan is None:
                raise TransferError(f"chunk {index} is of artifact {sha256[:12]}, which no job asked for",
                                    kind="unknown_artifact")
            if index >= plan.chunks.count:
                raise TransferError(f"chunk {index} of artifact {sha256[:12]} is beyond its {plan.chunks.count} chunks",
                                    kind="artifact_mismatch")
            if index in self._held[sha256] or sha256 in self._assembling:
                return False
            expected = plan.chunks.sha256[index]
            actual = hashlib.sha256(data).hexdigest()
            if actual != expected or len(data) != plan.chunks.length(index, plan.size):
                raise TransferError(
                    f"chunk {index} of artifact {sha256[:12]} has sha256 {actual[:12]}…, the job lists "
                    f"{expected[:12]}…: it is not part of the file the job names",
                    kind="artifact_mismatch",
                )
            write_atomically(self._folder(sha256) / f"{index:06d}.chunk", data, durable=True)
            self._held[sha256].add(index)
            return True

    def assemble(self, sha256: str, target: Path) -> Path:
        """Join the chunks into `target`, checked against the artifact's sha256 first.

        Each chunk is deleted once copied, so the disk holds the file about once, not twice; if
        the copy fails half-way, the chunks not yet copied stay and the rest is asked for again.
        The lock is not held while copying, so chunks of other artifacts keep arriving.
        """
        with self._lock:
            if not self.complete(sha256):
                held, total = self.progress(sha256)
                raise TransferError(f"artifact {sha256[:12]} has {held} of {total} chunks", kind="transfer_incomplete")
            plan = self._plans[sha256]
            self._assembling.add(sha256)
        folder = self._folder(sha256)
        partial = folder / ASSEMBLING_FILE
        try:
            digest = hashlib.sha256()
            with open(partial, "wb") as out:
                for index in range(plan.chunks.count):
                    chunk = folder / f"{index:06d}.chunk"
                    with open(chunk, "rb") as handle:
                        for data in iter(lambda: handle.read(READ_BYTES), b""):
                            digest.update(data)
                            out.write(data)
                    with self._lock:
                        self._held.get(sha256, set()).discard(index)
                    chunk.unlink()
                out.flush()
                os.fsync(out.fileno())
            if digest.hexdigest() != sha256:
                raise TransferError(
                    f"the chunks put together have sha256 {digest.hexdigest()}, the job expects {sha256}: "
                    "they are not the file the job names; discarded",
                    kind="artifact_mismatch",
                )
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(partial, target)
            self.discard(sha256)
        except TransferError:
            self.discard(sha256)
            raise
        finally:
            partial.unlink(missing_ok=True)
            with self._lock:
                self._assembling.discard(sha256)
        return target

    # --- internals ----------------------------------------------------------------------------

    def _folder(self, sha256: str) -> Path:
        return self.root / sha256

    def _plan(self, sha256: str) -> Optional[Plan]:
        plan = self._plans.get(sha256)
        if plan is not None:
            return plan
        path = self._folder(sha256) / PLAN_FILE
        if not path.is_file():
            return None
        try:
            plan = Plan.from_json(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("forgetting the damaged transfer of artifact %s: %s", sha256[:12], exc)
            self.discard(sha256)
            return None
        self._plans[sha256] = plan
        self._held[sha256] = self._scan(plan)
        return plan

    def _scan(self, plan: Plan) -> Set[int]:
        held = set()
        for path in self._folder(plan.sha256).glob("*.chunk"):
            index = int(path.stem) if path.stem.isdigit() else -1
            if 0 <= index < plan.chunks.count and path.stat().st_size == plan.chunks.length(index, plan.size):
                held.add(index)
        return held

    def _make_room(self, plan: Plan) -> None:
        now = time.time()
        others = [sha for sha in self.partial() if sha != plan.sha256 and sha not in self._assembling]
        for sha in others:
            if now - _last_active(self._folder(sha)) > self.max_age_s:
                log.info("dropping the chunks of artifact %s: untouched for over %.0f days", sha[:12],
                         self.max_age_s / 86400)
                self.discard(sha)
        others = [sha for sha in self.partial() if sha != plan.sha256 and sha not in self._assembling]
        for sha in others[: max(0, len(others) - self.keep_partial)]:
            log.info("dropping the chunks of artifact %s to make room for %s", sha[:12], plan.sha256[:12])
            self.discard(sha)
        held_bytes = sum(plan.chunks.length(i, plan.size) for i in self._held.get(plan.sha256, ()))
        needed = plan.size - held_bytes + plan.chunks.chunk_size + self.reserve_bytes
        self.root.mkdir(parents=True, exist_ok=True)
        free = self._free_bytes(self.root)
        if free < needed:
            raise TransferError(
                f"artifact of {_mb(plan.size)} needs {_mb(needed)} free in the agent's data dir "
                f"({_mb(self.reserve_bytes)} kept spare) and {_mb(free)} are free; free some space on the board",
                kind="no_space",
            )


def _last_active(folder: Path) -> float:
    try:
        return max(folder.stat().st_mtime, (folder / PLAN_FILE).stat().st_mtime)
    except OSError:
        return 0.0


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"
