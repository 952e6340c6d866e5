"""Which inputs a model takes, from what the model declares and what the user gives.

The model declares what it can (ONNX names, static dims and types; an ExportedProgram's
example inputs; TorchScript's and forward()'s parameter names and non-tensor types); the user
gives the rest: `--input-shape [NAME=]SHAPE`, `--input-dtype [NAME=]DTYPE`,
`--input-value NAME=NUMBER`. Dynamic dims may stay open (-1) here: the data files fill them.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Sequence

from edgeopt_agent.errors import UserError

from .source_model import SourceModel
from .tensors import InputSpec, check_dtype, fits, make_specs, parse_shape, parse_value, split_named

BATCH_WORDS = ("batch", "batch_size", "n", "b", "n_batch", "batchsize")


def resolve_specs(source: SourceModel, shapes: Sequence[str], dtypes: Sequence[str],
                  values: Sequence[str] = (), data_shapes: Optional[Dict[str, DataInput]] = None) -> List[InputSpec]:
    """Every input of the model in its argument order, constants included. `data_shapes` ({input:
    DataInput} from the calibration data, see `data.data_shapes`) gives a shape the model does not
    declare and the user did not give, and the dtype of an integer or boolean input of a model that
    declares no dtypes (a file.py:factory, TorchScript)."""
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
    specs = _apply_dtypes(specs, pos_dtypes, named_dtypes, (data_shapes or {}) if source.kind in UNDECLARED_DTYPES else {})
    return _fill_dims(specs)


UNDECLARED_DTYPES = ("module", "torchscript")  # forward() and a TorchScript schema name tensors, not their dtypes


def _apply_shapes(specs: List[InputSpec], positional: Sequence[str], named: Dict[str, str],
                  source: SourceModel, data_shapes: Dict[str, DataInput]) -> List[InputSpec]:
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
                result.append(replace(spec, shape=tuple(data_shapes[spec.name].shape)))
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


@dataclass(frozen=True)
class DataInput:
    """What a data file says of one input the model does not declare: the shape of a feed (batch 1)
    and the arrays' dtype."""
    shape: tuple
    dtype: str


BATCH_FIRST = "batch-first"  # [N, *sample]: a feed is (1, *sample)
WHOLE_INPUTS = "whole inputs"  # [N, *input_shape]: a feed is one row as it is, its batch axis included


def inputs_from_data(arrays: Dict[str, "object"], names: Sequence[str], reading: str = BATCH_FIRST,
                     integers: bool = True) -> Dict[str, DataInput]:
    """The inputs a data file fixes, in one reading (keyed by input name; a lone .npy array for a model
    of one input): its arrays hold N samples on axis 0. Their dtype is the data's where it is an integer
    or boolean one and `integers`, else float32 (a float64 array is most often only numpy's default)."""
    if set(arrays) == {""} and len(names) == 1:
        arrays = {names[0]: arrays[""]}
    found = {}
    for name, array in arrays.items():
        if name not in names or getattr(array, "ndim", 0) < 1:
            continue
        shape = (1, *array.shape[1:]) if reading == BATCH_FIRST else tuple(array.shape[1:])
        found[name] = DataInput(shape, str(array.dtype) if integers and str(array.dtype) in DATA_DTYPES else "float32")
    return found


def readings(arrays: Dict[str, "object"]) -> List[str]:
    """The readings a data file may have: batch-first always; whole inputs too where every array's
    second axis is 1 ([N, 1, 3, 224, 224] is N inputs of 1x3x224x224, or N samples of 1x3x224x224)."""
    shaped = [a for a in arrays.values() if getattr(a, "ndim", 0) >= 1]
    whole = bool(shaped) and all(a.ndim >= 2 and a.shape[1] == 1 for a in shaped)
    return [BATCH_FIRST, WHOLE_INPUTS] if whole else [BATCH_FIRST]


def _apply_dtypes(specs: List[InputSpec], positional: Sequence[str], named: Dict[str, str],
                  data: Dict[str, DataInput]) -> List[InputSpec]:
    """Given dtypes; else, for a model that declares none, the dtype the data decided (inputs_from_data)."""
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
        if spec.tensor and spec.name in data and data[spec.name].dtype in DATA_DTYPES:
            result.append(replace(spec, dtype=data[spec.name].dtype))
            continue
        result.append(spec)
    return result


DATA_DTYPES = ("int64", "int32", "uint8", "int8", "bool")  # dtypes a model's data decides for it


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
