"""Engines built on this machine, kept on disk so a second job with the same model reuses them.

A TensorRT engine is valid only for the TensorRT version and the GPU it was built with, so the
key is the model's sha256, the TensorRT version, the GPU (name and compute capability), the
precision, and every builder option that changes the engine. The timing cache (layer timings,
which make a rebuild at another precision faster) is shared per TensorRT version and GPU.

    cache = EngineCache(data_dir / "engines")
    key = EngineKey(model_sha256, "10.3.0", "Orin", (8, 7), "int8", {"max_batch": 1})
    path = cache.lookup(key)                      # None: build it, then cache.store(key, plan, 12.5)

Files are written to a temporary name and renamed, so a crash never leaves half an engine.
Stdlib only.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Tuple, Union

from ..files import write_atomically
from .precision import PRECISIONS

# Where engines go when the caller names no folder (`edgeopt bench` on a workstation); the agent
# passes a folder under its own data dir.
DEFAULT_CACHE_ENV = "EDGEOPT_ENGINE_CACHE"


def default_cache_dir() -> Path:
    if os.environ.get(DEFAULT_CACHE_ENV):
        return Path(os.environ[DEFAULT_CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return Path(base).expanduser() / "edgeopt" / "engines"


@dataclass(frozen=True)
class EngineKey:
    model_sha256: str
    tensorrt_version: str
    gpu_name: str
    compute_capability: Tuple[int, int]
    precision: str
    # Builder options that change the engine (optimization profile, workspace, ...): JSON values.
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if len(self.model_sha256) != 64:
            raise ValueError(f"model_sha256 must be 64 hex digits, got {self.model_sha256!r}")
        object.__setattr__(self, "compute_capability", tuple(int(x) for x in self.compute_capability))
        object.__setattr__(self, "options", dict(self.options))

    def to_dict(self) -> Dict[str, Any]:
        return {
            "model_sha256": self.model_sha256,
            "tensorrt_version": self.tensorrt_version,
            "gpu_name": self.gpu_name,
            "compute_capability": list(self.compute_capability),
            "precision": self.precision,
            "options": dict(self.options),
        }

    @property
    def digest(self) -> str:
        """sha256 of the key's canonical JSON: equal keys, equal digests, whatever the dict order."""
        canonical = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    @property
    def filename(self) -> str:
        return f"{self.model_sha256[:12]}-{self.precision}-{self.digest[:16]}.engine"

    def timing_cache_filename(self) -> str:
        """One timing cache per TensorRT version and GPU, whatever the model or precision."""
        scope = json.dumps(
            [self.tensorrt_version, self.gpu_name, list(self.compute_capability)], separators=(",", ":")
        )
        return f"timing-{hashlib.sha256(scope.encode('utf-8')).hexdigest()[:16]}.cache"


@dataclass(frozen=True)
class CachedEngine:
    path: Path
    build_s: Optional[float]  # how long the build that made it took
    built_at: Optional[float]  # time.time() of that build


class EngineCache:
    def __init__(self, folder: Union[str, Path, None] = None):
        self.folder = Path(folder) if folder is not None else default_cache_dir()

    def engine_path(self, key: EngineKey) -> Path:
        return self.folder / key.filename

    def lookup(self, key: EngineKey) -> Optional[CachedEngine]:
        """The cached engine for `key`, or None. An engine whose record does not match the key is not it."""
        path = self.engine_path(key)
        record = self._read_record(path)
        if not path.is_file() or record is None or record.get("key") != key.to_dict():
            return None
        return CachedEngine(path, record.get("build_s"), record.get("built_at"))

    def store(self, key: EngineKey, plan: bytes, build_s: float) -> CachedEngine:
        """Write a freshly built engine and its record; returns where it went."""
        path = self.engine_path(key)
        built_at = time.time()
        _write_atomically(path, plan)
        record = {"key": key.to_dict(), "build_s": round(build_s, 6), "built_at": built_at, "size_bytes": len(plan)}
        _write_atomically(_record_path(path), json.dumps(record, indent=1).encode("utf-8"))
        return CachedEngine(path, round(build_s, 6), built_at)

    def discard(self, key: EngineKey) -> None:
        """Forget an engine that turned out to be unusable (the runtime refused to load it)."""
        path = self.engine_path(key)
        for victim in (_record_path(path), path):
            try:
                victim.unlink()
            except FileNotFoundError:
                pass

    def load_timing_cache(self, key: EngineKey) -> bytes:
        """The serialized timing cache for this TensorRT version and GPU; b"" when there is none yet."""
        try:
            return (self.folder / key.timing_cache_filename()).read_bytes()
        except FileNotFoundError:
            return b""

    def store_timing_cache(self, key: EngineKey, data: bytes) -> None:
        _write_atomically(self.folder / key.timing_cache_filename(), data)

    @staticmethod
    def _read_record(engine_path: Path) -> Optional[Dict[str, Any]]:
        try:
            record = json.loads(_record_path(engine_path).read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError):
            return None
        return record if isinstance(record, dict) else None


def _record_path(engine_path: Path) -> Path:
    return engine_path.with_suffix(".json")


def _write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, data, mode=0o600, durable=True)
