"""Run artifacts (through the agent's runners, the same code the board uses) and the FP32 reference."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

from edgeopt_agent.errors import UserError, require
from edgeopt_agent.runners import open_runner

from .source.source_model import SourceModel
from .source.tensors import InputSpec


class Predictor:
    """An artifact loaded in its runtime: real-valued outputs in the model's output order."""

    def __init__(self, path: Path, threads: Optional[int], **options):
        self.runner = open_runner(path, threads=threads, **options).load()

    def _rename(self, feeds: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """Feeds keyed by the source model's input names, re-keyed to this artifact's names.

        TFLite names its inputs after the signature (`serving_default_args_0`), so inputs are
        matched by name where they agree and by position otherwise.
        """
        names = [info.name for info in self.runner.inputs()]
        mapping = match_inputs(names, list(feeds))
        return {name: feeds[mapping[name]] for name in names if name in mapping}

    @property
    def samples_on_axis_0(self) -> bool:
        """Whether its outputs hold their samples on axis 0 whatever the model's layout (ncnn's runner stacks them)."""
        return self.runner.stacks_samples

    def predict(self, feeds: Mapping[str, np.ndarray]) -> List[np.ndarray]:
        outputs = self.runner.infer(self._rename(feeds))
        return [outputs[info.name] for info in self.runner.outputs()]

    def bound_call(self, feeds: Mapping[str, np.ndarray]) -> Callable[[], object]:
        """The runtime's own call on prepared inputs: what a latency measurement should time."""
        return self.runner.bind(self.runner.prepare(self._rename(feeds)))

    def io(self) -> Dict[str, List[dict]]:
        return {
            "inputs": [t.to_dict() for t in self.runner.inputs()],
            "outputs": [t.to_dict() for t in self.runner.outputs()],
        }

    def close(self) -> None:
        self.runner.close()


def match_inputs(artifact_names: Sequence[str], model_names: Sequence[str]) -> Dict[str, str]:
    """{artifact input name: the model's input name}: by name where the names agree, else by
    argument position (TFLite names inputs after its signature: `serving_default_args_0`)."""
    if set(artifact_names) == set(model_names):
        return {name: name for name in artifact_names}
    return dict(zip(_positional_order(list(artifact_names)), model_names))


def _positional_order(names: List[str]) -> List[str]:
    """Input names in argument order: `..._args_<i>` sorted by i, otherwise as the runtime lists them."""
    indexed = [re.search(r"args_(\d+)$", n) for n in names]
    if all(indexed):
        return [n for _, n in sorted(zip((int(m.group(1)) for m in indexed), names))]
    return names


def open_predictor(path: Path, threads: Optional[int], session_config: Optional[Mapping[str, str]] = None
                   ) -> Predictor:
    return Predictor(path, threads, **({"session_config": session_config} if session_config else {}))


def flatten_outputs(value) -> List[np.ndarray]:
    """A module's outputs (tensors, nested in tuples, lists or dicts) as numpy arrays, in order."""
    if isinstance(value, (list, tuple)):
        return [a for item in value for a in flatten_outputs(item)]
    if isinstance(value, dict):
        return [a for item in value.values() for a in flatten_outputs(item)]
    return [value.detach().cpu().numpy()]


def _cause(exc: BaseException) -> str:
    """One line for an exception; for TorchScript, the exception the scripted code raised
    (the interpreter's first line only says that something failed)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    raised = [line for line in lines if re.match(r"^builtins\.\w+: ", line)]
    if raised:
        return raised[-1][len("builtins."):]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


NO_SPINNING = {"session.intra_op.allow_spinning": "0"}  # idle pool threads yield the cores to other work


def accuracy_predictor(path: Path, threads: Optional[int], session_config: Optional[Mapping[str, str]] = None
                       ) -> Predictor:
    """An artifact loaded for accuracy work (validation, reference): onnxruntime's pool threads do not
    spin between runs, which on a busy host only takes cores from the work itself."""
    config = dict(NO_SPINNING, **(session_config or {})) if Path(path).suffix == ".onnx" else session_config
    return open_predictor(path, threads, config)


def reference_predictor(source: SourceModel, specs: Sequence[InputSpec], threads: Optional[int] = None):
    """FP32 outputs of the source model itself: PyTorch eager, or ONNX Runtime for an ONNX source;
    `threads` for its runs (None: the library's default)."""
    if source.kind == "onnx":
        run = accuracy_predictor(source.onnx_path, threads).predict

        def predict_onnx(feeds: Mapping[str, np.ndarray]) -> List[np.ndarray]:
            try:
                return run(feeds)
            except Exception as exc:
                shapes = ", ".join(f"{k}{list(np.shape(v))}" for k, v in feeds.items())
                raise UserError(f"{source.description} fails on inputs {shapes}: {_cause(exc)}; check --input-shape / "
                                f"--input-dtype / --input-value, or give real data with --calibration") from exc

        return predict_onnx
    torch = require("torch", "convert")

    def predict(feeds: Mapping[str, np.ndarray]) -> List[np.ndarray]:
        args = [torch.from_numpy(np.ascontiguousarray(feeds[s.name])) for s in specs]
        if threads and torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        try:
            with torch.no_grad():
                return flatten_outputs(source.module(*args))
        except Exception as exc:
            shapes = ", ".join(f"{s.name}{list(a.shape)}" for s, a in zip(specs, args))
            raise UserError(f"{source.description} fails on inputs {shapes}: {_cause(exc)}; "
                            f"check --input-shape / --input-dtype") from exc

    return predict
