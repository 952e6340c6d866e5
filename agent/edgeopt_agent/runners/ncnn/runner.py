"""ncnn: a `.param` graph and its `.bin` weights, on the CPU (Vulkan stays off).

The artifact is one file, an edgeopt bundle (edgeopt_agent.bundle: an uncompressed zip) holding
`model.param`, `model.bin` and `edgeopt.json` ({"precision": "fp32" | "fp16", "outputs": the output
blobs in the model's order}); loading extracts
them to a private folder (in `extract_dir`, which the agent sets to its `<data_dir>/bundles` through
the benchmark spec's `bundle_dir`, else the system's temporary folder), loads them and removes it. ncnn has no batch axis and records no tensor shapes, so
edgeopt's ncnn export writes each input's per-sample shape into its `Input` layer (ncnn's own
`0=w 1=h 11=d 2=c` parameters); the runner feeds a batch sample by sample and stacks the outputs,
so the batch axis is open.
Output shapes are known only once the model has run: `outputs()` gives them after the first call.

ncnn turns FP16 storage and arithmetic on by default where the CPU has them; this runner turns
them off for an FP32 artifact, so it runs in FP32, and leaves them to ncnn for an FP16 one (on
for CPUs with FP16 arithmetic, such as the Cortex-A76; a CPU without it computes in FP32).
`fp16=` overrides what the bundle says.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np

from ... import bundle
from ...errors import require
from ..base import Runner, TensorInfo
from ..errors import ArtifactError, UnsupportedModelError

PARAM_MAGIC = "7767517"
PARAM, WEIGHTS, FACTS = "model.param", "model.bin", "edgeopt.json"
# ncnn Input layer parameters, outermost first: channels, depth, height, width.
_SHAPE_KEYS = ("2", "11", "1", "0")


def import_ncnn():
    return require("ncnn", "agent-ncnn", "ncnn models")


def read_input_shapes(text: str, source: str = "model") -> Dict[str, Tuple[int, ...]]:
    """Each `Input` layer's blob name and per-sample shape (no batch axis) from `.param` text."""
    lines = [line.split() for line in text.splitlines() if line.strip()]
    if not lines or lines[0] != [PARAM_MAGIC]:
        raise ArtifactError(f"{source} is not an ncnn .param file (no {PARAM_MAGIC} magic line)")
    shapes = {}
    for fields in lines[2:]:
        if fields[0] != "Input":
            continue
        if len(fields) < 5:
            raise ArtifactError(f"{source} has an Input layer without an output blob: {' '.join(fields)}")
        blob = fields[4]
        params = dict(f.split("=", 1) for f in fields[5:] if "=" in f)
        try:
            dims = [int(params.get(key, "0")) for key in _SHAPE_KEYS]
        except ValueError:
            raise ArtifactError(f"{source}: input '{blob}' has a shape parameter that is not an integer") from None
        channels, depth, height, width = dims
        if width <= 0 or (channels > 0 and height <= 0):
            raise UnsupportedModelError(
                f"{source} does not record the shape of input '{blob}' (its Input layer has no 0=w 1=h 2=c); "
                "convert the model with edgeopt's ncnn export, which writes it"
            )
        if channels > 0:
            shape = [channels, depth, height, width] if depth > 0 else [channels, height, width]
        else:
            shape = [height, width] if height > 0 else [width]
        shapes[blob] = tuple(shape)
    return shapes


def output_order(facts: Any, listed: List[str]) -> List[str]:
    """The graph's outputs in the model's order (the bundle's `outputs`), else as ncnn lists them
    (layer order; bundles written before the order was recorded)."""
    order = facts.get("outputs") if isinstance(facts, dict) else None
    if isinstance(order, list) and sorted(order) == sorted(listed):
        return list(order)
    return list(listed)


def unknown_layers(text: str, ncnn) -> List[str]:
    """The layer types of `.param` text that this ncnn build does not register (pnnx can write some)."""
    types = [line.split()[0] for line in text.splitlines()[2:] if line.strip()]
    return sorted({t for t in types if ncnn.layer_to_index(t) < 0})


class NcnnRunner(Runner):
    runtime = "ncnn"
    stacks_samples = True

    def __init__(self, path: Union[str, Path], threads: Optional[int] = None, fp16: Optional[bool] = None,
                 extract_dir: Union[str, Path, None] = None):
        super().__init__(path, threads)
        self.fp16 = fp16
        self.extract_dir = extract_dir
        self._ncnn = import_ncnn()
        self._net = None

    def _load(self) -> None:
        if not self.path.is_file():
            raise ArtifactError(f"artifact not found: {self.path}")
        folder = bundle.extract(self.path, (PARAM, WEIGHTS), under=self.extract_dir)
        try:
            self._load_from(folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _load_from(self, folder: Path) -> None:
        param, weights = folder / PARAM, folder / WEIGHTS
        try:
            text = param.read_text(encoding="utf-8")
            facts = json.loads((folder / FACTS).read_text(encoding="utf-8")) if (folder / FACTS).is_file() else {}
        except (UnicodeDecodeError, ValueError):
            raise ArtifactError(f"{self.path.name}: {PARAM} or {FACTS} is not the text ncnn's export writes") from None
        shapes = read_input_shapes(text, self.path.name)
        if self.fp16 is None:
            self.fp16 = isinstance(facts, dict) and facts.get("precision") == "fp16"
        ncnn = self._ncnn
        net = ncnn.Net()
        opt = net.opt
        opt.use_vulkan_compute = False
        if self.threads:
            opt.num_threads = self.threads
        if not self.fp16:  # ncnn's defaults already use FP16 where the CPU has it
            for flag in ("use_fp16_storage", "use_fp16_packed", "use_fp16_arithmetic"):
                setattr(opt, flag, False)
        if net.load_param(str(param)) != 0:
            unknown = unknown_layers(text, ncnn)
            if unknown:
                raise UnsupportedModelError(f"ncnn {getattr(ncnn, '__version__', '')} has no layer "
                                            f"{', '.join(unknown)}, which {self.path.name} uses")
            raise ArtifactError(f"ncnn cannot parse the graph in {self.path.name}")
        if net.load_model(str(weights)) != 0:
            raise ArtifactError(f"ncnn cannot read the weights in {self.path.name}")
        inputs = list(net.input_names())
        unknown = [name for name in inputs if name not in shapes]
        if unknown:
            raise UnsupportedModelError(f"{self.path.name}: no Input layer records the shape of {', '.join(unknown)}")
        self._net = net
        self.threads = int(opt.num_threads)
        self._inputs = tuple(TensorInfo(name, (None,) + shapes[name], "float32") for name in inputs)
        self._outputs = tuple(TensorInfo(name, (), "float32") for name in output_order(facts, net.output_names()))

    def _close(self) -> None:
        self._net = None

    def describe(self) -> Dict[str, Any]:
        return {
            "runtime": self.runtime,
            "runtime_version": getattr(self._ncnn, "__version__", None),
            "threads": self.threads,
            "fp16": self.fp16,
            "fp16_arithmetic": bool(self._net.opt.use_fp16_arithmetic) if self._net is not None else None,
        }

    def bind(self, prepared: Mapping[str, np.ndarray]) -> Callable[[], List[np.ndarray]]:
        self._require_loaded()
        ncnn, net = self._ncnn, self._net
        batch = next(iter(prepared.values())).shape[0] if prepared else 1
        # A Mat made from an array borrows its memory without a reference count, and ncnn's in-place
        # layers dereference that count (a segfault): each sample is cloned into a Mat ncnn owns.
        samples = [[(name, ncnn.Mat(array[i]).clone()) for name, array in prepared.items()] for i in range(batch)]
        names = [info.name for info in self._outputs]
        runner = self

        def call() -> List[np.ndarray]:
            per_output: List[List[np.ndarray]] = [[] for _ in names]
            for feeds in samples:
                extractor = net.create_extractor()
                for name, mat in feeds:
                    extractor.input(name, mat)
                for collected, name in zip(per_output, names):
                    status, mat = extractor.extract(name)
                    if status != 0:
                        raise UnsupportedModelError(f"ncnn could not compute output '{name}' (status {status})")
                    collected.append(np.array(mat))
            outputs = [np.stack(collected) for collected in per_output]
            runner._learn_output_shapes(outputs)
            return outputs

        return call

    def _learn_output_shapes(self, outputs: List[np.ndarray]) -> None:
        if self._outputs and not self._outputs[0].shape:
            self._outputs = tuple(TensorInfo(info.name, (None,) + tuple(array.shape[1:]), "float32")
                                  for info, array in zip(self._outputs, outputs))
