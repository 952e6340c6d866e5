"""Which file a deploy sends: an artifact of a convert output folder, checked against its manifest.

The job's `meta` carries the manifest's facts about it (model, precision, accuracy drop, the build:
its id and version...) so the fleet files each result under them; the signature covers the same facts. Its `release` (the
model's source and the manifest's creation time) is what agents compare to refuse a rollback.
"""
from __future__ import annotations

import datetime
import hashlib
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

from edgeopt_agent import wire
from edgeopt_agent.wire import plan_chunks
from edgeopt_converters.manifest import FILE_NAME as MANIFEST_FILE
from edgeopt_converters.manifest import bench_inputs, build_of, check_build_version
from edgeopt_converters.manifest import read as read_manifest

from ..errors import UserError

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class DeployArtifact:
    key: str
    path: Path
    format: str
    precision: Optional[str]
    sha256: str
    size: int
    chunks: wire.ChunkPlan
    meta: Dict[str, Any]
    release: Optional[wire.Release] = None
    inputs: Optional[List[Dict[str, Any]]] = None  # how the board feeds each input (the `inputs` bench option)
    entry: Optional[Dict[str, Any]] = None  # the manifest's entry (its "board": runtime, precision, threads...)


def choose_artifact(outdir: Path, key: Optional[str] = None, chunk_size: int = wire.DEFAULT_CHUNK_BYTES,
                    build_version: Optional[str] = None) -> DeployArtifact:
    """The manifest's recommended artifact (or `key`), its file read once and checked against the manifest;
    `build_version` names the build in place of the version the manifest gives it."""
    outdir = Path(outdir)
    if build_version is not None:
        check_build_version(build_version)
    if not outdir.is_dir():  # a folder, not the manifest file: the artifacts are found beside it
        raise UserError(f"{outdir} has no {MANIFEST_FILE}; give the output folder of `edgeopt convert`")
    listed = read_manifest(outdir, require_schema=False)
    manifest_path, manifest = listed.path, listed.data
    if any(a.key is None for a in listed.artifacts):
        raise UserError(f"{manifest_path} has no \"artifacts\" list with keys; re-run `edgeopt convert`")
    keys = listed.keys
    wanted = key or manifest.get("recommended")
    if wanted is None:
        raise UserError(f"{manifest_path} recommends no artifact; pick one with --artifact: {', '.join(keys)}")
    found = listed.artifact(wanted)
    if found is None:
        raise UserError(f"no artifact '{wanted}' in {manifest_path}; available: {', '.join(keys)}")
    entry = dict(found.data)
    fmt = entry.get("format")
    if fmt not in wire.ARTIFACT_FORMATS:
        raise UserError(f"artifact '{wanted}' is {fmt!r}; agents run {', '.join(wire.ARTIFACT_FORMATS)} "
                        f"artifacts: pick another with --artifact ({', '.join(keys)})")
    path = outdir / str(entry.get("path", ""))
    if not entry.get("path") or not path.is_file():
        raise UserError(f"artifact '{wanted}' is listed as {entry.get('path')!r} but {path} does not exist")
    if not wire.MIN_CHUNK_BYTES <= chunk_size <= wire.MAX_CHUNK_BYTES:
        raise UserError(f"chunk size must be {wire.MIN_CHUNK_BYTES // 1024}-{wire.MAX_CHUNK_BYTES // 1024} KiB, "
                        f"got {chunk_size / 1024:g} KiB")
    if wire.chunk_count(path.stat().st_size, chunk_size) > wire.MAX_CHUNKS:
        raise UserError(f"{path} needs more than {wire.MAX_CHUNKS} chunks of {chunk_size // 1024} KiB; "
                        "use bigger chunks")
    chunks, size, sha256 = plan_chunks(path, chunk_size)
    if sha256 != entry.get("sha256") or size != entry.get("size_bytes", size):
        raise UserError(f"{path} is not the file the manifest lists (sha256 {sha256[:12]}…, manifest "
                        f"{str(entry.get('sha256'))[:12]}…): it changed after `edgeopt convert`; convert again")
    model = manifest.get("model") if isinstance(manifest.get("model"), dict) else {}
    accuracy = entry.get("accuracy") if isinstance(entry.get("accuracy"), dict) else {}
    drop = accuracy.get("drop_points")
    build = build_of(manifest)
    meta = {
        "model": model.get("source"),
        "model_sha256": model.get("sha256"),
        "artifact_key": wanted,
        "format": fmt,
        "precision": entry.get("precision"),
        "accuracy_drop_points": drop if _is_finite_number(drop) else None,
        "manifest_sha256": hashlib.sha256(listed.raw).hexdigest(),
        "build_id": build["id"],
        "build_version": build_version or build["version"],
    }
    return DeployArtifact(key=wanted, path=path, format=fmt, precision=entry.get("precision"), sha256=sha256,
                          size=size, chunks=chunks, meta=meta, release=release_of(manifest, manifest_path),
                          inputs=_inputs(entry), entry=entry)


def release_of(manifest: Dict[str, Any], where: Path) -> Optional[wire.Release]:
    """The model's source and the manifest's creation time: an agent refuses an older one for the same model."""
    model = manifest.get("model") if isinstance(manifest.get("model"), dict) else {}
    source, created = model.get("source"), manifest.get("created")
    try:
        when = datetime.datetime.fromisoformat(created) if isinstance(created, str) else None
    except ValueError:
        when = None
    if not isinstance(source, str) or not source or when is None or when.tzinfo is None:
        log.warning("%s has no model source or creation time: devices cannot tell this build from an older one",
                    where)
        return None
    return wire.Release(model=source[:1024], version=when.timestamp())


def _inputs(entry: Dict[str, Any]) -> Optional[List[Dict[str, Any]]]:
    inputs = bench_inputs(entry)
    if inputs is not None:
        try:
            wire.check_input_description(inputs)
        except UserError as exc:
            raise UserError(f"the manifest's inputs of artifact '{entry.get('key')}' are not usable: {exc}") from None
    return inputs


def _is_finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
