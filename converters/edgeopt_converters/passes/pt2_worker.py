"""The isolated child that loads a .pt2 and does what needs the loaded program (see
source/isolated_program.py, its parent): run it, export it with this room's writers.

Run as `python -m edgeopt_converters.passes.pt2_worker FOLDER` inside the sandbox, with FOLDER (its only
writable place) holding `model.pt2`. Requests come as JSON lines on stdin; answers go as JSON
lines on the original stdout, which is then pointed at stderr so that nothing a library prints
can be mistaken for an answer. Arrays travel as uncompressed .npz files in FOLDER, never pickled.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, List

import numpy as np

MAX_REQUEST = 1 << 20


class _Worker:
    def __init__(self, folder: Path, answers):
        self.folder = folder
        self.answers = answers
        self.program = None
        self.module = None

    def serve(self, requests) -> None:
        for line in iter(lambda: requests.readline(MAX_REQUEST), ""):
            request = json.loads(line)
            try:
                self.answer(getattr(self, "op_" + request["op"])(request))
            except Exception as exc:  # every failure goes back to the parent as one answer
                text = str(exc).strip()
                self.answer({"error": f"{type(exc).__name__}: {text}" if text else type(exc).__name__})

    def answer(self, message: Dict[str, Any]) -> None:
        self.answers.write(json.dumps(message) + "\n")
        self.answers.flush()

    def op_load(self, request) -> Dict[str, Any]:
        import torch

        self.program = torch.export.load(str(self.folder / "model.pt2"))
        self.module = self.program.module()
        inputs = []
        example = getattr(self.program, "example_inputs", None)
        if example and example[0]:
            names = [s.arg.name for s in self.program.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
            for i, tensor in enumerate(example[0]):
                inputs.append({"name": names[i] if i < len(names) else f"input_{i}", "shape": list(tensor.shape),
                               "dtype": str(tensor.dtype).replace("torch.", "")})
        return {"ok": True, "inputs": inputs}

    def bound(self, request):
        """The program, with the constant arguments the request names baked in."""
        import torch

        order = request.get("constants")
        if not order:
            return self.module
        inner = self.module

        class WithConstants(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = inner

            def forward(self, *tensors):
                given = iter(tensors)
                return self.inner(*[value if constant else next(given) for value, constant in order])

        return WithConstants().eval()

    def arrays(self, name: str) -> List[np.ndarray]:
        with np.load(self.folder / name, allow_pickle=False) as data:
            return [data[f"a{i}"] for i in range(len(data.files))]

    def tensors(self, name: str):
        import torch

        return tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in self.arrays(name))

    def op_call(self, request) -> Dict[str, Any]:
        import torch

        from ..runtime import flatten_outputs

        with torch.no_grad():
            outputs = flatten_outputs(self.bound(request)(*self.tensors(request["inputs"])))
        np.savez(self.folder / request["output"], **{f"a{i}": a for i, a in enumerate(outputs)})
        return {"ok": True, "count": len(outputs)}

    def op_onnx(self, request) -> Dict[str, Any]:
        import torch

        from .export_onnx import write_onnx

        axes = {name: {int(axis): group for axis, group in per.items()} for name, per in request["axes"].items()}
        write_onnx(torch, self.bound(request), self.tensors(request["args"]), request["names"],
                   self.folder / request["output"], axes, int(request["opset"]))
        return {"ok": True}

    def op_tflite(self, request) -> Dict[str, Any]:
        import torch

        from .export_tflite import TfliteOptions, write_tflite

        options = TfliteOptions(**request["options"])
        feeds = None
        if request.get("calibration"):
            width = int(request["inputs"])
            batches = self.arrays(request["calibration"])
            feeds = ((batches[i * width:(i + 1) * width], real) for i, real in enumerate(request["reals"]))

        def progress(real: int) -> None:
            self.answer({"progress": int(real)})

        with torch.no_grad():
            write_tflite(torch, self.bound(request), self.tensors(request["args"]), self.folder / request["output"],
                         options, feeds, progress)
        return {"ok": True}


def main(argv: List[str]) -> int:
    folder = Path(argv[0])
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever a library prints goes to stderr, never into an answer
    sys.stdout = sys.stderr
    _Worker(folder, answers).serve(sys.stdin)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
