"""An ExportedProgram (.pt2) loaded only in an isolated child: the second wall around a model file.

The first wall (pt2_guard and the modules it reads with) makes sure torch reads nothing of the
archive that could run code. In case a payload gets past it anyway, the parent process never calls
`torch.export.load`: a child started by `sandbox` (an unprivileged user, no network, a private
folder as its only writable place and, with bubblewrap, nothing else of the machine visible; memory
sized from the model's tensors, processes, CPU-time and file-size limits, and a time limit on every
request, minutes at most) loads the program and does the three things a conversion needs of it: run
it on inputs (the FP32 reference), export it to ONNX, export it to TFLite. What comes back is data
only: arrays in uncompressed .npz files read without pickle, and ONNX or TFLite files, checked
before use. The child's folder lies in one of the parent's own (mode 0711): the child cannot list
it or put anything beside its own folder, where the parent copies what it reads back.
"""
from __future__ import annotations

import json
import logging
import os
import queue
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import weakref
import zipfile
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from edgeopt_agent.arrays import read_arrays
from edgeopt_agent.errors import UserError

from . import sandbox
from .pt2_guard import tensor_bytes

log = logging.getLogger("edgeopt.convert")

LOAD_SECONDS = float(os.environ.get("EDGEOPT_PT2_LOAD_SECONDS", 120))
CALL_SECONDS = float(os.environ.get("EDGEOPT_PT2_CALL_SECONDS", 300))
EXPORT_SECONDS = float(os.environ.get("EDGEOPT_PT2_EXPORT_SECONDS", 20 * 60))
MAX_ANSWER = 1 << 20
MAX_FILE_BYTES = 4 << 30  # an exported ONNX or TFLite file (protobuf stops at 2 GB)
_DTYPES = {"float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool"}


class IsolatedProgram:
    """The program in its child. Called like a module on tensors (returns tensors); `with_constants`
    gives a view that bakes constant arguments in, as `bind_constants` does for a module."""

    def __init__(self, archive: bytes, description: str, limits: Optional[sandbox.Limits] = None,
                 load_seconds: float = LOAD_SECONDS):
        self.description = description
        self.constants: Optional[List[Tuple[Any, bool]]] = None
        self._shared = _Child(archive, description, limits or sandbox.Limits.for_model(tensor_bytes(archive)))
        try:
            answer = self._shared.ask({"op": "load"}, load_seconds, "loading it")
            self.inputs = _checked_inputs(answer.get("inputs"), description)
        except BaseException:
            self._shared.close()
            raise

    @property
    def caveat(self) -> str:
        return self._shared.isolated.caveat

    def with_constants(self, order: Sequence[Tuple[Any, bool]]) -> "IsolatedProgram":
        view = object.__new__(IsolatedProgram)
        view.__dict__.update(self.__dict__)
        view.constants = [(value, bool(constant)) for value, constant in order]
        return view

    def __call__(self, *tensors):
        import torch

        name = self._shared.send_arrays([t.detach().cpu().numpy() for t in tensors])
        answer = self._shared.ask(self._request({"op": "call", "inputs": name, "output": "out.npz"}),
                                  CALL_SECONDS, "running it")
        outputs = self._shared.receive_arrays("out.npz", int(answer.get("count", -1)))
        return [torch.from_numpy(a) for a in outputs]

    def export_onnx(self, args, names: Sequence[str], output: Path, axes: Dict[str, Dict[int, str]],
                    opset: int) -> None:
        request = {"op": "onnx", "args": self._shared.send_arrays([a.numpy() for a in args]), "names": list(names),
                   "axes": {n: {str(k): g for k, g in per.items()} for n, per in axes.items()}, "opset": opset,
                   "output": "export.onnx"}
        self._shared.ask(self._request(request), EXPORT_SECONDS, "exporting it to ONNX")
        self._shared.receive_file("export.onnx", output)
        _check_onnx(output)

    def export_tflite(self, args, output: Path, options, feeds: Optional[Iterable[Tuple[List[np.ndarray], int]]],
                      on_batch: Optional[Callable[[int], None]]) -> None:
        request: Dict[str, Any] = {"op": "tflite", "args": self._shared.send_arrays([a.numpy() for a in args]),
                                   "options": asdict(options), "output": "export.tflite"}
        if feeds is not None:
            arrays: List[np.ndarray] = []
            reals: List[int] = []
            for batch, real in feeds:
                arrays.extend(batch)
                reals.append(int(real))
            request.update(calibration=self._shared.send_arrays(arrays, "calibration.npz"), reals=reals,
                           inputs=len(args))
        self._shared.ask(self._request(request), EXPORT_SECONDS, "exporting it to TFLite", on_batch)
        self._shared.receive_file("export.tflite", output)

    def close(self) -> None:
        self._shared.close()

    def _request(self, request: Dict[str, Any]) -> Dict[str, Any]:
        if self.constants:
            request["constants"] = self.constants
        return request


class _Child:
    """One sandboxed worker process and its private folder."""

    def __init__(self, archive: bytes, description: str, limits: sandbox.Limits):
        self.description = description
        self.home = Path(tempfile.mkdtemp(prefix="edgeopt-pt2-"))
        self.private = self.home / "child"
        self.counter = 0
        self.stderr = tempfile.TemporaryFile()
        try:
            os.chmod(self.home, 0o711)
            self.private.mkdir()
            (self.private / "model.pt2").write_bytes(archive)
            self.isolated = sandbox.isolation(self.private)
            argv = [sys.executable, "-m", sandbox.WORKER_MODULE, str(self.private)]
            self.process = sandbox.start(argv, self.private, limits, self.isolated, self.stderr)
        except BaseException:  # nothing of the model's copy stays behind
            self.stderr.close()
            shutil.rmtree(self.home, ignore_errors=True)
            raise
        self.answers: "queue.Queue[Optional[bytes]]" = queue.Queue()
        threading.Thread(target=self._read_answers, daemon=True).start()
        self._finalizer = weakref.finalize(self, _stop, self.process, self.isolated, self.home)

    def _read_answers(self) -> None:
        for line in iter(lambda: self.process.stdout.readline(MAX_ANSWER), b""):
            self.answers.put(line)
        self.answers.put(None)

    def ask(self, request: Dict[str, Any], seconds: float, doing: str,
            on_progress: Optional[Callable[[int], None]] = None) -> Dict[str, Any]:
        try:
            self.process.stdin.write((json.dumps(request) + "\n").encode())
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            self._died(doing)
        while True:
            try:
                line = self.answers.get(timeout=seconds)
            except queue.Empty:
                self.close()
                raise UserError(f"{self.description}: {doing} took more than {seconds:.0f} s in the isolated child, "
                                f"which was stopped (a .pt2 whose shape expressions never finish?)") from None
            if line is None:
                self._died(doing)
            answer = _json_object(line, self.description)
            if "progress" in answer:
                if on_progress and isinstance(answer["progress"], int):
                    on_progress(answer["progress"])
                continue
            if "error" in answer:
                raise IsolatedError(str(answer["error"])[:2000])
            return answer

    def _died(self, doing: str) -> None:
        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:  # it closed its answers but lives on: stopped, and said so
            self.close()
            raise UserError(f"{self.description}: the isolated child stopped answering while {doing} and was "
                            f"stopped") from None
        self.stderr.seek(0)
        lines = [line.strip() for line in self.stderr.read()[-20000:].decode("utf-8", "replace").splitlines()
                 if line.strip()]
        self.close()
        why = "it ran out of its memory or CPU-time limit" if code in (-9, -24, 137, 152) else \
            (lines[-1][:300] if lines else f"exit status {code}")
        raise UserError(f"{self.description}: the isolated child died while {doing} ({why})")

    def send_arrays(self, arrays: Sequence[np.ndarray], name: Optional[str] = None) -> str:
        if name is None:
            self.counter += 1
            name = f"in_{self.counter}.npz"
        with self._new_file(name) as handle:
            np.savez(handle, **{f"a{i}": np.ascontiguousarray(a) for i, a in enumerate(arrays)})
        return name

    def _new_file(self, name: str):
        """A new file in the child's folder, never opened through a link the child left in its place."""
        try:
            os.unlink(self.private / name)
        except FileNotFoundError:
            pass
        try:
            fd = os.open(self.private / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            raise UserError(f"{self.description}: cannot write {name} for the isolated child ({exc.strerror})") from None
        return os.fdopen(fd, "wb")

    def receive_arrays(self, name: str, count: int) -> List[np.ndarray]:
        copy = self.home / name  # out of the child's reach while read
        self.receive_file(name, copy)
        try:
            _, arrays = read_arrays(copy, "the isolated child's answer")  # capped, no pickles
        except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
            raise UserError(f"{self.description}: the isolated child answered unreadable arrays ({exc})") from None
        finally:
            copy.unlink(missing_ok=True)
        if sorted(arrays) != sorted(f"a{i}" for i in range(count)):
            raise UserError(f"{self.description}: the isolated child answered {len(arrays)} arrays, said {count}")
        return [arrays[f"a{i}"] for i in range(count)]

    def receive_file(self, name: str, output: Path) -> None:
        """Copy the child's file by a descriptor opened without following links: a plain file of at
        most MAX_FILE_BYTES, whatever the child does to the name meanwhile."""
        try:
            fd = os.open(self.private / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            raise UserError(f"{self.description}: the isolated child did not write {name} as a plain file") from None
        with os.fdopen(fd, "rb") as source:
            info = os.fstat(source.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_FILE_BYTES:
                raise UserError(f"{self.description}: the isolated child's {name} is not a plain file of at most "
                                f"{MAX_FILE_BYTES >> 30} GiB")
            with open(output, "wb") as target:
                shutil.copyfileobj(source, target)
                if target.tell() > MAX_FILE_BYTES:
                    raise UserError(f"{self.description}: the isolated child's {name} grew past {MAX_FILE_BYTES >> 30} GiB")

    def close(self) -> None:
        self._finalizer()
        self.stderr.close()


def _stop(process, isolated: sandbox.Isolation, home: Path) -> None:
    sandbox.stop(process, isolated)
    for stream in (process.stdin, process.stdout):
        try:
            stream.close()
        except OSError:
            pass
    shutil.rmtree(home, ignore_errors=True)


class IsolatedError(Exception):
    """The child failed at what it was asked (an export that did not work): one line, its words."""


def _json_object(line: bytes, description: str) -> Dict[str, Any]:
    try:
        answer = json.loads(line)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise UserError(f"{description}: the isolated child answered something that is not a JSON object")
    return answer


def _checked_inputs(inputs: Any, description: str) -> List[Tuple[str, Tuple[int, ...], str]]:
    """The example inputs the child reports, as (name, shape, dtype), checked like any other data."""
    if not isinstance(inputs, list) or len(inputs) > 256:
        raise UserError(f"{description}: the isolated child reported malformed inputs")
    checked = []
    for item in inputs:
        name, shape, dtype = (item.get(k) for k in ("name", "shape", "dtype")) if isinstance(item, dict) else (None,) * 3
        if not (isinstance(name, str) and name.isidentifier() and len(name) <= 128 and isinstance(shape, list)
                and len(shape) <= 16 and all(type(d) is int and 0 <= d < 1 << 31 for d in shape) and dtype in _DTYPES):
            raise UserError(f"{description}: the isolated child reported a malformed input")
        checked.append((name, tuple(shape), dtype))
    return checked


def _check_onnx(path: Path) -> None:
    """An ONNX file from the child is data, like a user's .onnx: self-contained, no external weights."""
    from edgeopt_agent.errors import require

    onnx = require("onnx", "convert")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:
        raise UserError(f"the isolated child's ONNX export is not a valid ONNX file ({exc})") from None
    from onnx.external_data_helper import _get_all_tensors

    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in _get_all_tensors(model)):
        raise UserError("the isolated child's ONNX export refers to external weight files; refusing it")
