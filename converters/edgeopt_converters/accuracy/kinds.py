"""What an output means, so it can be judged by what it does.

A kind is claimed only on positive evidence (kind_registry.py: names, FP32 values, the ONNX op that
produces the output, the evaluation labels, known head layouts); an output with none is judged as
a tensor. The user overrides it per output name (`--output-kind NAME=KIND`). The evidence sentence
is the kind's `why`, so a wrong claim is visible in the table and the manifest.
"""
from __future__ import annotations

from typing import Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from edgeopt_agent.errors import UserError

from .evidence import Hints
from .graph_evidence import OutputGraph, graph_evidence
from .graph_heads import LinearHead
from .kind_registry import REGISTRY, infer
from .layouts import detection_layout, image_input_hw
from .output_kind import OutputKind

__all__ = ["KINDS", "Hints", "OutputGraph", "OutputKind", "check_output_names", "detection_layout", "graph_evidence", "image_input_hw",
           "infer_kind", "parse_output_kinds"]

KINDS = {kind.name: kind.description for kind in REGISTRY}


def parse_output_kinds(pairs: Sequence[str]) -> dict:
    """`NAME=KIND` strings (CLI) -> {name: kind}, refusing unknown kinds with the list of known ones."""
    kinds = {}
    for pair in pairs:
        name, sep, kind = pair.partition("=")
        if not sep or not name or kind not in KINDS:
            raise UserError(f"--output-kind '{pair}' must be NAME=KIND with KIND one of {', '.join(KINDS)}")
        kinds[name] = kind
    return kinds


def check_output_names(given: Mapping[str, str], names: Sequence[str]) -> Dict[str, str]:
    """{output name: kind}: `#0`, `#1`... name the outputs by position (what an export will call them
    is not known before it runs); any other name must be one of the model's outputs."""
    named = {}
    for key, kind in given.items():
        if key.startswith("#") and key[1:].isdigit():
            if int(key[1:]) >= len(names):
                raise UserError(f"--output-kind {key}={kind}: the model has {len(names)} outputs (#0 to "
                                f"#{len(names) - 1}): {', '.join(names)}")
            key = names[int(key[1:])]
        named[key] = kind
    unknown = sorted(set(named) - set(names))
    if unknown:
        raise UserError(f"--output-kind names {', '.join(unknown)}, but the model's outputs are {', '.join(names)}")
    return named


def infer_kind(name: str, reference: np.ndarray, given: Optional[str] = None, state: bool = False,
               producer: Optional[str] = None, labels: Optional[np.ndarray] = None,
               input_hw: Optional[Tuple[int, int]] = None, head: Optional[LinearHead] = None,
               siblings: Sequence[Tuple[int, ...]] = (),
               heatmaps: Sequence[Tuple[str, Tuple[int, int]]] = (), pooled: Optional[str] = None) -> OutputKind:
    """The user's kind, else the first kind with positive evidence. `producer`: the ONNX op type making the
    output and `head` the Linear layer it belongs to (graph_evidence); `labels`: the evaluation labels;
    `input_hw`: the image input's height and width; `siblings`: the per-sample shapes of the other outputs;
    `heatmaps`: (name, (H, W)) of the other outputs claimed heat maps."""
    if given:
        return OutputKind(given, True, "given")
    return infer(name, reference, Hints(producer=producer, labels=labels, input_hw=input_hw, state=state, head=head,
                                        siblings=tuple(tuple(s) for s in siblings),
                                        heatmaps=tuple((n, tuple(grid)) for n, grid in heatmaps), pooled=pooled))
