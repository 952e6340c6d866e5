"""Load the user's model from any of the accepted forms.

Accepted: `path/to/file.py:factory` (a function returning an nn.Module), a TorchScript file,
an ExportedProgram `.pt2`, an `.onnx` file, or `example:NAME` for a bundled example. Nothing is
unpickled implicitly: weights given with `--weights` are read with `torch.load(weights_only=True)`.
A TorchScript file is a program (PyTorch has no safe mode for `torch.jit.load`), so it is loaded
only when the caller says it trusts where the file came from. What a file is (ONNX, `.pt2`,
TorchScript, a state_dict or checkpoint in either torch.save format, a pickled module, ...) is read
from its bytes (`model_files`), not its suffix, and a file that is not a model says what to give instead.
"""
from __future__ import annotations

import hashlib
import inspect
from dataclasses import replace
from pathlib import Path
from typing import List, Optional

from edgeopt_agent.errors import UserError, require
from edgeopt_agent.files import sha256_file

from ..progress import ProgressReporter
from .examples import load_example
from .hashing import update_with_weights
from . import model_files
from .isolated_program import IsolatedError, IsolatedProgram
from .pt2_guard import checked_archive
from .source_model import SourceModel
from .tensors import InputSpec
from .user_code import torchvision_problem, user_function

def _torch():
    return require("torch", "convert", "loading PyTorch models")


def load_source(spec: str, weights: Optional[Path] = None, trust_model_code: bool = False,
                progress: ProgressReporter = ProgressReporter()) -> SourceModel:
    if spec.startswith("example:"):
        return load_example(spec[len("example:"):], progress)
    if ".py:" in spec:
        path_text, factory = spec.rsplit(":", 1)
        return _load_factory(Path(path_text), factory, weights)
    path = Path(spec)
    if not path.exists():
        raise UserError(f"model not found: {spec} (give a file.py:factory, a TorchScript file, a .pt2 or an .onnx file)")
    if path.is_dir():
        raise UserError(f"{spec} is a directory; give a model file (file.py:factory, TorchScript, .pt2 or .onnx)")
    if path.suffix == ".py":
        raise UserError(f"{spec}: name the factory function too, like {spec}:build_model")
    if weights is not None:
        raise UserError("--weights only applies to a file.py:factory model")
    found = model_files.identify(path)
    if found.kind == model_files.ONNX or (found.kind == model_files.UNKNOWN and path.suffix == ".onnx"):
        return _load_onnx(path)
    if found.kind == model_files.EXPORTED or (found.kind == model_files.UNKNOWN and path.suffix == ".pt2"):
        return _load_exported(path)
    if found.kind == model_files.TORCHSCRIPT:
        if path.suffix == ".pt2":  # a .pt2 is only ever loaded behind pt2_guard and the sandbox
            raise UserError(f"{spec} is TorchScript, not an ExportedProgram: rename it .pt and pass "
                            f"--trust-model-code if you trust its source, or re-export it with torch.export.save")
        if not trust_model_code:
            raise UserError(f"{spec} is TorchScript, a program that runs when loaded (PyTorch has no safe mode "
                            f"for torch.jit.load); give file.py:factory, re-export it with torch.export.save (.pt2) "
                            f"or ONNX, or pass --trust-model-code if you trust its source")
        return _load_torchscript(path)
    raise UserError(f"{spec} {_not_a_model(found, spec)}")


def _not_a_model(found: model_files.ModelFile, spec: str) -> str:
    """Why a file is not a model edgeopt loads, and what to give instead (said after its name)."""
    saved = f" ({found.described})" if found.described else ""
    if found.kind == model_files.STATE_DICT:
        return (f"holds weights without the model's code{saved}: give file.py:factory (a function that returns "
                f"the model, from your code or torchvision.models) with --weights {spec}")
    if found.kind == model_files.PICKLED_MODULE:
        return (f"is {found.what}{' (legacy torch.save format)' if found.legacy else ''}: unpickling a model runs code, so edgeopt never does; save its weights with "
                f"torch.save(model.state_dict(), 'weights.pth') and give file.py:factory with --weights weights.pth")
    if found.kind == model_files.PICKLE:
        return f"is {found.what or 'a Python pickle'}, not a model (edgeopt never unpickles one)"
    if found.kind == model_files.ARTIFACT:
        return (f"is already a {found.what} model, which edgeopt does not convert from; `edgeopt bench {spec}` "
                f"times it (convert takes PyTorch or ONNX)")
    if found.kind == model_files.SAFETENSORS:
        return ("holds weights in the safetensors format, without the model's code: give file.py:factory whose "
                "function builds the model and loads them (safetensors.torch.load_file)")
    if found.kind == model_files.ARRAYS:
        return f"holds {found.what}: data, not a model; give it to --calibration or --eval-data"
    return (f"is not a model file edgeopt knows{saved}; accepted: file.py:factory, TorchScript, an ExportedProgram "
            f".pt2, an .onnx file")


def _load_factory(path: Path, factory: str, weights: Optional[Path]) -> SourceModel:
    torch = _torch()
    fn = user_function(path, factory, "model")
    try:
        model = fn()
    except Exception as exc:
        raise UserError(torchvision_problem(exc) or f"the factory {path}:{factory}() raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(model, torch.nn.Module):
        raise UserError(f"{path}:{factory}() returned {type(model).__name__}, expected a torch.nn.Module")
    digest = hashlib.sha256(path.read_bytes())
    if weights is not None:
        _load_weights(model, Path(weights))
        digest.update(Path(weights).read_bytes())
    else:
        update_with_weights(digest, model)
    return module_source(model, f"{path}:{factory}", digest.hexdigest())


def module_source(model, description: str, sha256: str) -> SourceModel:
    return SourceModel("module", description, sha256, module=model.eval(), input_specs=forward_specs(model))


_PYTHON_TYPES = {int: "int", float: "float", bool: "bool", "int": "int", "float": "float", "bool": "bool"}


def forward_specs(module) -> List[InputSpec]:
    """forward()'s required parameters, by name: shapes unknown; int/float/bool annotations are
    Python arguments (they take --input-value). Parameters with defaults are left to them."""
    try:
        params = inspect.signature(module.forward).parameters.values()
    except (TypeError, ValueError):
        return []
    specs = []
    for p in params:
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) or p.default is not p.empty:
            continue
        python_type = _PYTHON_TYPES.get(p.annotation)
        specs.append(InputSpec(p.name, () if python_type else None, python_type or "float32", tensor=python_type is None))
    return specs


_SCHEMA_TYPES = {"IntType": "int", "FloatType": "float", "BoolType": "bool"}


def schema_specs(module) -> List[InputSpec]:
    """A TorchScript module's forward() arguments from its schema: tensors, and int/float/bool
    arguments that take --input-value."""
    try:
        arguments = module.forward.schema.arguments[1:]  # [0] is self
    except (AttributeError, RuntimeError):
        return []
    specs = []
    for arg in arguments:
        if arg.has_default_value():
            continue
        kind = arg.type.kind()
        if kind in _SCHEMA_TYPES:
            specs.append(InputSpec(arg.name, (), _SCHEMA_TYPES[kind], tensor=False))
        elif kind == "TensorType":
            specs.append(InputSpec(arg.name, None, "float32"))
        else:
            raise UserError(f"TorchScript forward() argument '{arg.name}' is a {arg.type}; edgeopt feeds tensors "
                            f"and int/float/bool values only")
    return specs


_CHECKPOINT_KEYS = ("state_dict", "model_state_dict", "model_state", "model", "net", "network", "weights", "params")
_PREFIXES = ("module.", "model.", "_orig_mod.")  # DataParallel, a Lightning wrapper, torch.compile


def _load_weights(model, weights: Path) -> None:
    torch = _torch()
    if not weights.is_file():
        raise UserError(f"weights file not found: {weights}")
    found = model_files.identify(weights)
    if found.kind != model_files.STATE_DICT:
        raise UserError(f"--weights {weights} {_not_weights(found, weights)}")
    try:
        state = torch.load(weights, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise UserError(f"{weights} is not a state_dict that loads with weights_only=True ({type(exc).__name__}: {exc})") from exc
    state = _unwrapped(state, model.state_dict().keys())
    result = model.load_state_dict(state, strict=False)
    missing, unexpected = list(result.missing_keys), list(result.unexpected_keys)
    if missing or unexpected:
        raise UserError(f"{weights} does not fit the model: {len(missing)} of its keys missing (first: "
                        f"{', '.join(missing[:3]) or 'none'}), {len(unexpected)} unexpected (first: "
                        f"{', '.join(unexpected[:3]) or 'none'}); is it this factory's checkpoint?")


def _not_weights(found: model_files.ModelFile, weights: Path) -> str:
    """Why a file given to --weights is not a state_dict, and what to do with it."""
    if found.kind == model_files.TORCHSCRIPT:
        return ("is TorchScript, a whole program rather than a state_dict: give it as the model itself (with "
                "--trust-model-code if you trust its source), or save model.state_dict() with torch.save")
    if found.kind in (model_files.ONNX, model_files.EXPORTED):
        return f"is a whole model ({found.what}), not weights: give it as the model instead of file.py:factory"
    return _not_a_model(found, str(weights))


def _unwrapped(state, wanted) -> dict:
    """The state_dict inside a checkpoint: under a common key ({'model_state': ...}), with a wrapper's
    prefix (`module.` of DataParallel) removed where the model's own keys do not have it."""
    wanted, tensor = set(wanted), _torch().Tensor
    while isinstance(state, dict) and not any(isinstance(v, tensor) for v in state.values()):
        inner = next((state[k] for k in _CHECKPOINT_KEYS if isinstance(state.get(k), dict)), None)
        if inner is None:
            break
        state = inner
    if not isinstance(state, dict):
        raise UserError(f"the weights file holds a {type(state).__name__}, not a state_dict (name -> tensor)")
    for prefix in _PREFIXES:
        if state and all(k.startswith(prefix) for k in state) and not any(k.startswith(prefix) for k in wanted):
            state = {k[len(prefix):]: v for k, v in state.items()}
    return state


def _load_torchscript(path: Path) -> SourceModel:
    torch = _torch()
    try:
        module = torch.jit.load(str(path), map_location="cpu")
    except Exception as exc:
        raise UserError(f"{path} is not a loadable TorchScript file: {str(exc).splitlines()[0]}") from exc
    return SourceModel("torchscript", str(path), sha256_file(path), module=module.eval(),
                       input_specs=schema_specs(module))


def _load_exported(path: Path) -> SourceModel:
    """A .pt2 behind two walls: torch reads only what pt2_guard checked and rewrote, and only in an
    isolated child (isolated_program); this process never loads the program itself."""
    archive = checked_archive(path)
    try:
        program = IsolatedProgram(archive.getvalue(), str(path))
    except IsolatedError as exc:
        raise UserError(f"{path} is not a loadable ExportedProgram (.pt2): {str(exc).splitlines()[0]}") from exc
    specs = [InputSpec(name, shape, dtype) for name, shape, dtype in program.inputs]
    warnings = [f"isolation of {path.name}: {program.caveat}"] if program.caveat else []
    return SourceModel("exported", str(path), sha256_file(path), module=program, input_specs=specs, warnings=warnings)


_ONNX_DTYPES = {1: "float32", 10: "float16", 7: "int64", 6: "int32", 2: "uint8", 3: "int8", 9: "bool"}


def _load_onnx(path: Path) -> SourceModel:
    onnx = require("onnx", "convert", "reading ONNX models")
    try:
        # By path: the checker then finds external weight files beside the model, and large models.
        onnx.checker.check_model(str(path))
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:
        raise UserError(f"{path} is not a valid ONNX model: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from exc
    initializers = {i.name for i in model.graph.initializer}
    specs = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else -1 for d in tensor.shape.dim)
        dim_names = tuple(d.dim_param or None for d in tensor.shape.dim)
        specs.append(InputSpec(value.name, dims, _ONNX_DTYPES.get(tensor.elem_type, "float32"), dim_names=dim_names))
    return SourceModel("onnx", str(path), sha256_file(path), onnx_path=path, input_specs=specs)


def bind_constants(source: SourceModel, specs: List[InputSpec]) -> SourceModel:
    """The source with its constant arguments baked in: a module taking only the tensor inputs.

    ONNX sources keep their inputs (a constant there is fed, not baked)."""
    constants = [s for s in specs if s.is_constant]
    if source.kind == "onnx" or not constants:
        return source
    torch = _torch()
    order = [(s.name, s.value if s.is_constant else None, s.is_constant) for s in specs]

    class WithConstants(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *tensors):
            given = iter(tensors)
            return self.inner(*[value if constant else next(given) for _, value, constant in order])

    if isinstance(source.module, IsolatedProgram):
        return replace(source, module=source.module.with_constants([(value, constant) for _, value, constant in order]))
    kind = "module" if source.kind == "exported" else source.kind
    return replace(source, kind=kind, module=WithConstants(source.module).eval())
