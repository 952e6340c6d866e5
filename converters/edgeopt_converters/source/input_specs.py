"""Which inputs a model takes, from what the model declares and what the user gives.

The model declares what it can (ONNX names, static dims and types; an ExportedProgram's
example inputs; TorchScript's and forward()'s parameter names and non-tensor types); the user
gives the rest: `--input-shape [NAME=]SHAPE`, `--input-dtype [NAME=]DTYPE`,
`--input-value NAME=NUMBER`. Dynamic dims may stay open (-1) here: the data files fill them.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Dict, List, Optional, Sequence

from edgeopt_agent.errors import UserError

from .source_model import SourceModel
from .tensors import InputSpec, check_dtype, fits, make_specs, parse_shape, parse_value, split_named

BATCH_WORDS = ("batch", "batch_size", "n", "b", "n_batch", "batchsize")


def resolve_specs(source: SourceModel, shapes: Sequence[str], dtypes: Sequence[str],
                  values: Sequence[str] = (), data_shapes: Optional[Dict[str, tuple]] = None) -> List[InputSpec]:
    """Every input of the model in its argument order, constants included. `data_shapes` ({input:
    shape} from the calibration data, see `shapes_from_data`) gives a shape the model does not
    declare and the user did not give."""
    pos_shapes, named_shapes = split_named(shapes, "--input-shape")
    pos_dtypes, named_dtypes = split_named(dtypes, "--input-dtype")
    pos_values, named_values = split_named(values, "--input-value")
    if pos_values:
        raise UserError(f"--input-value '{pos_values[0]}' needs the input's name: write NAME=VALUE, like sr=16000")
    declared = list(source.input_specs)
    if not declared:
        if named_shapes or named_dtypes or named_values:
            given = next(iter({**named_shapes, **named_dtypes, **named_values}))
            raise UserError(f"{source.description} does not name its inputs, so '{given}=' cannot be matched; "
                            f"give the shapes in order (--input-shape 1,3,224,224, repeated per input)")
        if not pos_shapes:
            raise UserError(f"give the input shape of {source.description}, e.g. --input-shape 1,3,224,224 "
                            f"(repeat the option for each input)")
        return make_specs(pos_shapes, pos_dtypes)
    names = [s.name for s in declared]
    for option, named in (("--input-shape", named_shapes), ("--input-dtype", named_dtypes),
                          ("--input-value", named_values)):
        for name in named:
            if name not in names:
                raise UserError(f"{option} {name}=…: the model has no input '{name}'; its inputs: {', '.join(names)}")
    specs = []
    for spec in declared:
        if spec.name in named_values:
            value = parse_value(named_values[spec.name], spec.name)
            spec = replace(spec, value=value)
            if source.kind != "onnx":  # a Python argument, baked into the export
                spec = replace(spec, tensor=False, shape=(), dtype=type(value).__name__)
        elif not spec.tensor:
            raise UserError(f"input '{spec.name}' of {source.description} is a {spec.dtype}, not a tensor: "
                            f"give its value with --input-value {spec.name}=…")
        specs.append(spec)
    specs = _apply_shapes(specs, pos_shapes, named_shapes, source, data_shapes or {})
    specs = _apply_dtypes(specs, pos_dtypes, named_dtypes)
    return _fill_dims(specs)


def _apply_shapes(specs: List[InputSpec], positional: Sequence[str], named: Dict[str, str],
                  source: SourceModel, data_shapes: Dict[str, tuple]) -> List[InputSpec]:
    """Given shapes, checked against what the model declares; positional ones fill inputs in order."""
    open_slots = [i for i, s in enumerate(specs) if s.name not in named and s.tensor and not s.is_constant]
    if len(positional) > len(open_slots):
        listed = ", ".join(specs[i].name for i in open_slots) or "none"
        raise UserError(f"got {len(positional)} positional --input-shape values, but the model's inputs left to "
                        f"shape are: {listed}; name them, like --input-shape {specs[0].name}=1,3,224,224")
    given = dict(named)
    for slot, text in zip(open_slots, positional):
        given[specs[slot].name] = text
    result = []
    for spec in specs:
        if spec.name not in given:
            if spec.shape is None and spec.tensor and spec.name in data_shapes:
                result.append(replace(spec, shape=tuple(data_shapes[spec.name])))
                continue
            if spec.shape is None:
                raise UserError(f"give the shape of input '{spec.name}' of {source.description}, "
                                f"like --input-shape {spec.name}=1,3,224,224 (or {spec.name}= for a scalar)")
            result.append(spec)
            continue
        shape = parse_shape(given[spec.name], f"--input-shape {spec.name}=")
        if not spec.tensor:
            raise UserError(f"input '{spec.name}' is a {spec.dtype} argument, not a tensor: it takes --input-value, "
                            f"not --input-shape")
        if spec.shape is not None and not fits(shape, spec.shape):
            raise UserError(f"--input-shape {spec.name}={','.join(map(str, shape))} does not fit input '{spec.name}' "
                            f"of shape {spec.shape_text()} declared by the model (? marks a dynamic dim)")
        result.append(replace(spec, shape=shape))
    return result


def shapes_from_data(arrays: Dict[str, "object"], names: Sequence[str]) -> Dict[str, tuple]:
    """Input shapes a data file fixes: its arrays hold N samples on axis 0 ([N, *sample], keyed by
    input name; a lone .npy array for a model of one input), so a feed is (1, *sample)."""
    if set(arrays) == {""} and len(names) == 1:
        arrays = {names[0]: arrays[""]}
    return {name: (1, *array.shape[1:]) for name, array in arrays.items()
            if name in names and getattr(array, "ndim", 0) >= 1}


def _apply_dtypes(specs: List[InputSpec], positional: Sequence[str], named: Dict[str, str]) -> List[InputSpec]:
    tensors = [s for s in specs if s.tensor and s.name not in named]
    if positional and len(positional) not in (1, len(tensors)):
        raise UserError(f"got {len(positional)} --input-dtype values for {len(tensors)} inputs "
                        f"({', '.join(s.name for s in tensors)}); give one, one per input, or NAME=DTYPE")
    result = []
    slot = 0
    for spec in specs:
        if spec.name in named:
            result.append(replace(spec, dtype=check_dtype(named[spec.name], spec.name)))
            continue
        if spec.tensor and positional:
            dtype = positional[0] if len(positional) == 1 else positional[slot]
            slot += 1
            result.append(replace(spec, dtype=check_dtype(dtype, spec.name)))
            continue
        result.append(spec)
    return result


def _fill_dims(specs: List[InputSpec]) -> List[InputSpec]:
    """Dynamic dims the model names like another input's given dim take its size; a dynamic
    batch (axis 0, or a dim named like 'batch') takes 1. Others stay open for the data files."""
    sizes: Dict[str, int] = {}
    for spec in specs:
        for dim, name in zip(spec.shape, spec.dim_names):
            if name and dim >= 0:
                sizes.setdefault(name, dim)
    result = []
    for spec in specs:
        shape = list(spec.shape)
        for axis, dim in enumerate(shape):
            if dim >= 0:
                continue
            name = spec.dim_names[axis] if axis < len(spec.dim_names) else None
            if name and name in sizes:
                shape[axis] = sizes[name]
            elif axis == 0 or (name or "").lower() in BATCH_WORDS:
                shape[axis] = 1
        if spec.is_constant and any(d < 0 for d in shape):
            raise UserError(f"input '{spec.name}' has a constant value but dynamic dims {spec.shape_text()}; "
                            f"give --input-shape {spec.name}=…")
        result.append(replace(spec, shape=tuple(shape)))
    return result


def concrete_specs(specs: Sequence[InputSpec], feed_shapes: Dict[str, tuple]) -> List[InputSpec]:
    """Specs with the shapes the data feeds (the dynamic dims the data decides)."""
    return [replace(s, shape=tuple(feed_shapes[s.name])) if s.name in feed_shapes else s for s in specs]


def tensor_inputs(specs: Sequence[InputSpec], baked: bool) -> List[InputSpec]:
    """The inputs an artifact takes: without the constants that were baked into the export."""
    return [s for s in specs if not (baked and s.is_constant)]
