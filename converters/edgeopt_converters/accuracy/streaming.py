"""Stateful models judged as they run: each one's own state fed back, step after step.

A single step from the recorded state hides drift: a recurrent model's error compounds through
its state. Here the evaluation samples become a sequence of steps; at every step after the first
each predictor gets the state it produced itself, and the outputs of all steps are compared.
"""
from __future__ import annotations

import re
from typing import Dict, List, Mapping, Sequence

import numpy as np

from edgeopt_agent.errors import UserError

from ..source.tensors import Dataset
from .sample_layout import samples_first

_STATE_WORDS = re.compile(r"state|hidden|^h[n0]?$|^c[n0]?$|h_?n|c_?n|cache|past|memory")


def parse_state_pairs(pairs: Sequence[str]) -> Dict[str, str]:
    """`IN=OUT` strings (CLI) -> {input name: output name}."""
    parsed = {}
    for pair in pairs:
        name, sep, output = pair.partition("=")
        if not sep or not name or not output:
            raise UserError(f"--state '{pair}' must be INPUT=OUTPUT: the input that takes the state the output returns")
        parsed[name] = output
    return parsed


def _stem(name: str) -> str:
    return re.sub(r"[^a-z]", "", name.lower()).replace("out", "").replace("new", "").replace("next", "")


def find_state_pairs(inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray]) -> Dict[str, str]:
    """Inputs whose value an output of the same shape returns: same name stem, both named like state, or
    an input named like state with exactly one output of its shape (exporters name outputs after ops)."""
    pairs: Dict[str, str] = {}
    for in_name, value in inputs.items():
        fitting = [name for name, out in outputs.items() if name not in pairs.values()
                   and out.shape == value.shape and out.dtype.kind == value.dtype.kind]
        named_state = bool(_STATE_WORDS.search(in_name.lower()))
        for out_name in fitting:
            same_stem = _stem(in_name) and _stem(in_name) == _stem(out_name)
            if same_stem or (named_state and _STATE_WORDS.search(out_name.lower())):
                pairs[in_name] = out_name
                break
        else:
            if named_state and len(fitting) == 1 and len(outputs) > 1:
                pairs[in_name] = fitting[0]
    return pairs


def check_pairs(pairs: Mapping[str, str], input_names: Sequence[str], output_names: Sequence[str]) -> None:
    for in_name, out_name in pairs.items():
        if in_name not in input_names:
            raise UserError(f"--state names input '{in_name}'; the model's inputs are {', '.join(input_names)}")
        if out_name not in output_names:
            raise UserError(f"--state names output '{out_name}'; the model's outputs are {', '.join(output_names)}")


def stream(predict, data: Dataset, batch: int, pairs: Mapping[str, str], output_names: Sequence[str],
           steps: int, sample_axes: Sequence[int] = ()) -> List[np.ndarray]:
    """Outputs of `steps` consecutive steps, each output stacked over steps along axis 0 (its samples moved
    there first from `sample_axes`, as collect_outputs does; the state fed back keeps its own layout)."""
    index = {name: i for i, name in enumerate(output_names)}
    per_step: List[List[np.ndarray]] = []
    carried: Dict[str, np.ndarray] = {}
    for step, (feed, _) in enumerate(data.batches(batch)):
        if step >= steps:
            break
        feed = dict(feed)
        for in_name, value in carried.items():
            feed[in_name] = value.astype(feed[in_name].dtype, copy=False)
        outputs = [np.asarray(o) for o in predict(feed)]
        carried = {in_name: outputs[index[out_name]] for in_name, out_name in pairs.items()}
        per_step.append([o.astype(np.float32, copy=False) for o in samples_first(outputs, sample_axes)])
    return [np.concatenate([step[i] for step in per_step]) for i in range(len(per_step[0]))] if per_step else []
