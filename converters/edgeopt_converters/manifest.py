"""OUTDIR/manifest.json, the contract between convert, bench, deploy and report: its name, its
schema, and the one reader and writer of it (stdlib only; manifest_build.py makes its content).

    manifest = read("out/")            # or read("out/manifest.json"); a UserError says what is wrong
    manifest.artifact("onnx-int8").precision, manifest.data["tool_versions"]
    write(content, "out/manifest.json")  # atomically

The dataclasses name the facts every reader relies on; `data` keeps the whole JSON object as
written (accuracy figures, quantization details, inputs...), so nothing the converter records is
out of reach and the file on disk stays plain JSON.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from edgeopt_agent.errors import UserError
from edgeopt_agent.files import write_atomically
from edgeopt_agent import runtimes
from edgeopt_agent.wire.bench_options import BenchOptions, as_json

FILE_NAME = "manifest.json"
SCHEMA_PREFIX = "edgeopt.manifest/"
SCHEMA = SCHEMA_PREFIX + "1"
_GIVE_OUTDIR = "give the output folder of `edgeopt convert`"


@dataclass(frozen=True)
class ArtifactEntry:
    key: Optional[str]
    path: Optional[str]  # relative to the manifest's folder
    format: Optional[str]
    precision: Optional[str]
    sha256: Optional[str]
    size_bytes: Optional[int]
    recommended: bool
    data: Mapping[str, Any]  # the whole entry as written

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ArtifactEntry":
        def text(name: str) -> Optional[str]:
            value = data.get(name)
            return value if isinstance(value, str) else None

        size = data.get("size_bytes")
        return cls(key=text("key"), path=text("path"), format=text("format"), precision=text("precision"),
                   sha256=text("sha256"), size_bytes=size if isinstance(size, int) and not isinstance(size, bool) else None,
                   recommended=data.get("recommended") is True, data=data)


@dataclass(frozen=True)
class Manifest:
    path: Path  # the manifest file
    schema: Optional[str]
    created: Optional[str]
    recommended: Optional[str]
    artifacts: Tuple[ArtifactEntry, ...]
    data: Dict[str, Any]  # the whole JSON object as written
    raw: bytes  # the file's bytes, for hashing

    @property
    def folder(self) -> Path:
        return self.path.parent

    @property
    def keys(self) -> List[str]:
        return [a.key for a in self.artifacts if a.key is not None]

    def artifact(self, key: str) -> Optional[ArtifactEntry]:
        return next((a for a in self.artifacts if a.key == key), None)


def manifest_file(where: Union[str, Path]) -> Path:
    """OUTDIR/manifest.json; a path to the manifest file itself works too."""
    path = Path(where)
    if path.is_dir():
        path = path / FILE_NAME
        if not path.is_file():
            raise UserError(f"{where} has no {FILE_NAME}; {_GIVE_OUTDIR}")
    elif not path.is_file():
        raise UserError(f"conversion output not found: {where} has no {FILE_NAME}; {_GIVE_OUTDIR}")
    return path


def read(where: Union[str, Path], require_schema: bool = True) -> Manifest:
    """The manifest in folder `where` (or the file `where`), checked; UserError names the file and the fault.

    require_schema=False accepts a hand-made manifest without "schema" (one with another schema is refused).
    """
    path = manifest_file(where)
    try:
        raw = path.read_bytes()
        data = json.loads(raw.decode("utf-8"))
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise UserError(f"cannot read {path}: it is not valid JSON: {exc}") from None
    schema = data.get("schema") if isinstance(data, dict) else None
    if not isinstance(data, dict) or (schema is not None or require_schema) and not (
            isinstance(schema, str) and schema.startswith(SCHEMA_PREFIX)):
        raise UserError(f"{path} is not an edgeopt manifest (its \"schema\" is {schema!r}, "
                        f"expected {SCHEMA_PREFIX}N); {_GIVE_OUTDIR}")
    entries = data.get("artifacts")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise UserError(f"{path} has no \"artifacts\" list; re-run `edgeopt convert`")
    for number, entry in enumerate(entries, start=1):
        _check_artifact_path(path, entry, number)
    created, recommended = data.get("created"), data.get("recommended")
    return Manifest(path=path, schema=schema, created=created if isinstance(created, str) else None,
                    recommended=recommended if isinstance(recommended, str) else None,
                    artifacts=tuple(ArtifactEntry.from_dict(e) for e in entries), data=data, raw=raw)


def _check_artifact_path(manifest_path: Path, entry: Mapping[str, Any], number: int) -> None:
    """An artifact's path must name a file inside the manifest's folder: relative, no '..', and
    no symlink (of the file or a folder on the way) leading out of it. Every reader of the
    manifest (bench, deploy, report, profile, analyze) opens artifacts only through read(), so
    a manifest from elsewhere cannot make them open, hash or send a file outside OUTDIR."""
    relative = entry.get("path")
    if relative is None:
        return
    key = entry.get("key")
    name = f"artifact '{key}'" if isinstance(key, str) else f"artifact #{number}"
    if not isinstance(relative, str):
        raise UserError(f"{manifest_path}: {name} has a \"path\" that is not a string ({relative!r}); "
                        "re-run `edgeopt convert`")
    candidate = Path(relative)
    if "\x00" in relative or candidate.is_absolute() or candidate.drive or ".." in candidate.parts \
            or ".." in relative.replace("\\", "/").split("/"):
        raise UserError(f"{manifest_path}: {name} has path {relative!r}; an artifact's path must be relative to "
                        "the manifest's folder, without '..': refusing to open files outside it")
    try:
        folder = manifest_path.parent.resolve()
        resolved = (folder / candidate).resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop
        raise UserError(f"{manifest_path}: {name} has path {relative!r}, which cannot be resolved ({exc}); "
                        "re-run `edgeopt convert`") from None
    if resolved != folder and folder not in resolved.parents:
        raise UserError(f"{manifest_path}: {name} has path {relative!r}, which leads through a symlink to "
                        f"{resolved}, outside the manifest's folder; refusing to open files outside it")


def write(content: Mapping[str, Any], path: Union[str, Path]) -> None:
    """Write atomically: a reader sees the old manifest or the new one, never half of one."""
    write_atomically(path, json.dumps(content, indent=2) + "\n")


# A build version: a release name or a CI run number, one word of at most 64 characters.
_BUILD_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+:@-]{0,63}$")


def check_build_version(value: Any) -> str:
    """A build version as given (convert --build-version, deploy --build-version); UserError otherwise."""
    if not isinstance(value, str) or not _BUILD_VERSION.match(value):
        raise UserError(f"build version {value!r} is not usable: give 1-64 letters, digits and . _ + : @ - "
                        "(starting with a letter or digit), e.g. 1.4.0 or ci-2817")
    return value


def build_id(data: Mapping[str, Any]) -> Optional[str]:
    """A convert output's identity: the first 16 hex digits of the sha256 over the source model's hash,
    the conversion's options, the edgeopt version and the device profile. Two conversions that agree on
    all four are one build (give them apart with a build version); None for a manifest without a model
    hash."""
    model = data.get("model") if isinstance(data.get("model"), Mapping) else {}
    tools = data.get("tool_versions") if isinstance(data.get("tool_versions"), Mapping) else {}
    if not isinstance(model.get("sha256"), str):
        return None
    identity = {"model_sha256": model["sha256"], "options": data.get("options"), "edgeopt": tools.get("edgeopt"),
                "device": data.get("device")}
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]


def build_of(data: Mapping[str, Any]) -> Dict[str, Optional[str]]:
    """{"id", "version"}: the build a manifest records (`build`), or its id computed from it for a manifest
    from before builds were recorded (version None)."""
    written = data.get("build") if isinstance(data.get("build"), Mapping) else {}
    version = written.get("version")
    return {"id": written["id"] if isinstance(written.get("id"), str) else build_id(data),
            "version": version if isinstance(version, str) else None}


def bench_inputs(entry: Mapping[str, Any]) -> Optional[List[dict]]:
    """The `inputs` benchmark option for a manifest's artifact entry: every input's concrete
    shape, its constant value, and the model's name for it; None for an entry without them."""
    inputs = entry.get("inputs")
    if not isinstance(inputs, list) or not all(isinstance(i, dict) and "example_shape" in i for i in inputs):
        return None
    result = []
    for item in inputs:
        description = {"name": item["name"], "shape": list(item["example_shape"]), "dtype": item.get("dtype")}
        if item.get("model_input") and item["model_input"] != item["name"]:
            description["alias"] = item["model_input"]
        if "value" in item:
            description["value"] = item["value"]
        for key in ("min_shape", "max_shape"):
            if key in item:
                description[key] = list(item[key])
        result.append({k: v for k, v in description.items() if v is not None})
    return result


# The benchmark options (edgeopt_agent.wire.BenchOptions) an entry's "board" plans, and those of
# them a user may override when benchmarking or deploying it.
BOARD_OPTIONS = ("runtime", "precision", "threads", "fallback_runtimes")
BOARD_OVERRIDES = ("runtime", "precision", "threads")


def board_options(entry: Mapping[str, Any], **overrides: Any) -> Dict[str, Any]:
    """The benchmark options that run a manifest's artifact entry as its conversion planned for the
    board (its "board": runtime, precision, threads, fallback_runtimes), with the user's overrides
    (BOARD_OVERRIDES, each checked as the benchmark option it is; None: not given).

    A `runtime` given replaces the planned runtime, its engine precision and its fallbacks; a
    `precision` given needs a runtime that builds an engine; `threads` replaces the planned threads.
    An entry without "board" (a manifest from before it) gives only the overrides. Options left
    unset (None, no fallback) are left out, so the engine's defaults apply.
    """
    unknown = sorted(set(overrides) - set(BOARD_OVERRIDES))
    if unknown:
        raise TypeError(f"board_options() overrides only {', '.join(BOARD_OVERRIDES)}, not {', '.join(unknown)}")
    given = {k: BenchOptions.checked(k, v) for k, v in overrides.items() if v is not None}
    key = entry.get("key")
    name = f"artifact '{key}'" if isinstance(key, str) else "an artifact"
    board = entry.get("board")
    if board is None:
        board = {}
    elif not isinstance(board, dict):
        raise UserError(f"the manifest's {name} has a \"board\" that is not an object; re-run `edgeopt convert`")
    try:
        planned = {k: BenchOptions.checked(k, board.get(k) if board.get(k) != [] else None) for k in BOARD_OPTIONS}
    except UserError:
        raise UserError(f"the manifest's {name} has a \"board\" configuration edgeopt does not know "
                        f"({_brief(board)}); re-run `edgeopt convert`") from None
    if given.get("runtime", planned["runtime"]) != planned["runtime"]:
        planned.update(runtime=given["runtime"], precision=None, fallback_runtimes=None)
    if "precision" in given:
        engines = runtimes.ENGINE_RUNTIMES
        if planned["runtime"] not in engines:
            runs_on = f"runs on {planned['runtime']}" if planned["runtime"] else "has no engine-building runtime"
            raise UserError(f"a precision applies to runtimes that build an engine on the board "
                            f"({', '.join(engines)}); {name} {runs_on}: leave the precision out "
                            f"or also give one of those runtimes")
        planned["precision"] = given["precision"]
    if "threads" in given:
        planned["threads"] = given["threads"]
    return {k: as_json(v) for k, v in planned.items() if v is not None}


def _brief(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 120 else text[:117] + "..."


def fed_shapes(entry: Mapping[str, Any]) -> Optional[Dict[str, List[int]]]:
    """Each input's shape as the conversion fed the artifact of a manifest entry, by the artifact's
    input name; None for an entry that does not record them."""
    inputs = bench_inputs(entry)
    return {item["name"]: item["shape"] for item in inputs} if inputs is not None else None
