"""An exported program's JSON (`models/NAME.json` of a .pt2), checked and partly written anew.

What torch evaluates, decodes again or resolves by name is never passed on as the file wrote it:
shape expressions and guards are parsed and written by `pt2_expressions`, tree specs (JSON inside
the JSON) by `pt2_treespec`; node metadata keeps only a module stack made of plain names (the rest
— stack traces, source functions, `custom` and `from_node` JSON — is dropped, as torch's own
serializer leaves it out when absent); operators must be one of torch's own by an exact rule (no
operator that reads or writes a file, only the higher-order operators an exported model is made
of, only the symbolic Python operators torch writes); names torch writes into generated code are
plain identifiers; devices and verifier dialects come from short lists.
"""
from __future__ import annotations

import keyword
import re
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

from .pt2_expressions import ExpressionRefused, regenerate_expression, regenerate_guard
from .pt2_treespec import TreeSpecRefused, regenerate, regenerate_namedtuple_fields

# Names torch writes into the Python code it generates for the graph (placeholders, values, arguments).
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_ATTRIBUTE_PATH = re.compile(r"[A-Za-z0-9_]{1,128}(\.[A-Za-z0-9_]{1,128}){0,31}")  # linear.weight, layers.0.bias
_VALUE_TABLES = ("tensor_values", "sym_int_values", "sym_bool_values", "sym_float_values", "custom_obj_values")
_SYMBOL = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")

# torch resolves an operator's name attribute by attribute from `torch`, `operator` or `math`
# (`torch.os.system` resolves too), so an operator is one of these shapes and nothing else.
_OP_PART = r"_?[A-Za-z0-9]+(?:_[A-Za-z0-9]+)*"
_LIBRARY_OPERATOR = re.compile(rf"torch\.ops\.(aten|prims|quantized_decomposed)\.({_OP_PART})(?:\.{_OP_PART})?")
# Operators that open a file named by a string argument: from_file reads it into a tensor (a model's
# output would carry it out), save writes one.
FILE_OPERATORS = frozenset({"aten.from_file", "aten.save"})
# The higher-order operators exported models are made of: control flow, subgraphs, grad and autocast
# regions, functionalized mutation. Not: delegates to compiled or native code (aoti_call_delegate,
# executorch_call_delegate, inductor_compiled_code, inline_asm_elementwise), calls into torchbind objects
# or Python functions named in the file (call_torchbind, flat_apply, custom_function_call...).
HIGHER_ORDER_OPERATORS = frozenset({
    "cond", "while_loop", "while_loop_stack_output", "map_impl", "scan", "associative_scan", "invoke_subgraph",
    "wrap_with_set_grad_enabled", "wrap_with_autocast", "auto_functionalized", "auto_functionalized_v2",
    "with_effects", "out_dtype", "hints_wrapper",
})
# The Python operators torch writes for symbolic sizes (serialize.py's _SYM_OPS, the verifier's builtins).
SYMBOLIC_OPERATORS = frozenset({
    *(f"_operator.{name}" for name in ("getitem", "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "neg",
                                        "pos", "abs", "eq", "ne", "lt", "le", "gt", "ge", "and_", "or_", "not_",
                                        "lshift", "rshift")),
    *(f"math.{name}" for name in ("trunc", "ceil", "floor")),
    *(f"torch.{name}" for name in ("sym_not", "sym_int", "sym_float", "sym_ite", "sym_max", "sym_min", "sym_sqrt",
                                    "sym_sum", "_sym_sqrt")),
})
DEVICE_TYPES = frozenset({"cpu", "cuda", "meta", "mps", "xpu"})
VERIFIER_DIALECTS = frozenset({"ATEN", "TRAINING"})
# A node's module stack: `key,path,type` per module, `;` between them.
_STACK_KEY = re.compile(r"[A-Za-z0-9_]{1,512}")
_STACK_PATH = re.compile(r"([A-Za-z0-9_]{1,128}(\.[A-Za-z0-9_]{1,128}){0,63})?")
_STACK_TYPE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}(\.[A-Za-z_][A-Za-z0-9_]{0,127}){0,31}")


class ProgramRefused(ValueError):
    """The program holds something edgeopt does not pass on; the message completes "{name} ..."."""


def rewrite_program(program: Any) -> Any:
    """Checks the program in place and replaces each part torch would evaluate or decode by what edgeopt
    wrote from its own reading of it; returns the program."""
    if not isinstance(program, dict):
        raise ProgramRefused("is not a JSON object")
    for parent, owner, key, value in _items(program):
        if key == "expr_str":
            owner[key] = _regenerated(value, regenerate_expression, "shape expression")
        elif key == "guards_code":
            if not isinstance(value, list):
                raise ProgramRefused("has a malformed guards_code")
            owner[key] = [_regenerated(guard, regenerate_guard, "guard") for guard in value]
        elif key in ("in_spec", "out_spec"):
            owner[key] = _tree_spec(value)
        elif key == "treespec_namedtuple_fields":
            owner[key] = _tree_spec(value, regenerate_namedtuple_fields)
        elif key == "metadata":
            owner[key] = _node_metadata(value)
        elif key in ("target", "as_operator") and isinstance(value, str) and not _is_module_path(parent, value):
            _check_operator(value)
        elif key in ("device", "as_device") and isinstance(value, dict):
            _check_device(value)
        elif key in ("name", "as_name") and not _is_name(value, keyword_allowed=parent == "inputs"):
            _refuse_name(value)
        elif (key == "fqn" or key.endswith("_name")) and isinstance(value, str) and value \
                and not (_ATTRIBUTE_PATH.fullmatch(value) and "__" not in value):
            _refuse_name(value)
        if parent in _VALUE_TABLES and not _is_name(key, keyword_allowed=False):
            _refuse_name(key)
        if parent == "range_constraints" and not _SYMBOL.fullmatch(key):
            raise ProgramRefused(f"constrains a size named {key[:80]!r}, which is not a plain symbol name")
    _check_verifiers(program.get("verifiers"))
    return program


def _items(node: Any) -> Iterator[Tuple[Any, dict, str, Any]]:
    """(the key of the dict's own entry, the dict holding it, key, value) for every dict entry inside
    `node`; what an entry was replaced by is what is walked further."""
    stack = [(None, node)]
    while stack:
        parent, current = stack.pop()
        if isinstance(current, dict):
            for key in list(current):
                yield parent, current, key, current[key]
                stack.append((key, current[key]))
        elif isinstance(current, list):
            stack.extend((parent, item) for item in current)


def _regenerated(text: Any, regenerate_text: Callable[[Any], str], what: str) -> str:
    try:
        return regenerate_text(text)
    except ExpressionRefused as exc:
        shown = repr(text[:80]) if isinstance(text, str) else type(text).__name__
        raise ProgramRefused(f"holds a {what} edgeopt does not read ({exc}): {shown}") from None


def _tree_spec(value: Any, rebuild: Callable[[Any], Any] = regenerate) -> Any:
    try:
        return rebuild(value)
    except TreeSpecRefused as exc:
        raise ProgramRefused(f"has an input/output spec edgeopt does not read: it {exc}") from None


def _node_metadata(metadata: Any) -> Dict[str, str]:
    """Only a module stack of plain names is kept: torch reads `source_fn_stack` by resolving names,
    `custom` and `from_node` as JSON again, and none of them changes what the program computes."""
    if not isinstance(metadata, dict):
        raise ProgramRefused("has node metadata that is not a table")
    stack = metadata.get("nn_module_stack")
    kept = _module_stack(stack) if isinstance(stack, str) else None
    return {"nn_module_stack": kept} if kept else {}


def _module_stack(text: str) -> Optional[str]:
    entries = []
    for item in text.split(";"):
        parts = item.split(",")
        if len(parts) != 3 or not (_STACK_KEY.fullmatch(parts[0]) and _STACK_PATH.fullmatch(parts[1])
                                   and _STACK_TYPE.fullmatch(parts[2])):
            return None
        entries.append(",".join(parts))
    return ";".join(entries)


def _check_operator(value: str) -> None:
    if value in SYMBOLIC_OPERATORS:
        return
    library = _LIBRARY_OPERATOR.fullmatch(value)
    if library and f"{library.group(1)}.{library.group(2)}" in FILE_OPERATORS:
        raise ProgramRefused(f"calls {value[:80]!r}, which reads or writes a file named in the model; "
                             f"export the model without it")
    if library and "__" not in value:
        return
    if value.startswith("torch.ops.higher_order.") and value[len("torch.ops.higher_order."):] in HIGHER_ORDER_OPERATORS:
        return
    raise ProgramRefused(f"calls {value[:80]!r}, outside torch's own operator sets; give file.py:factory so the "
                         f"operator's library is your code")


def _check_device(device: Dict[str, Any]) -> None:
    kind, index = device.get("type"), device.get("index")
    if kind not in DEVICE_TYPES or not (index is None or (type(index) is int and 0 <= index < 1024)) \
            or not set(device) <= {"type", "index"}:
        raise ProgramRefused(f"places a tensor on a device edgeopt does not know ({str(kind)[:40]!r})")


def _check_verifiers(verifiers: Any) -> None:
    if not isinstance(verifiers, list) or not verifiers or len(verifiers) > 4 \
            or not all(isinstance(v, str) and v in VERIFIER_DIALECTS for v in verifiers):
        raise ProgramRefused(f"names verifiers other than {sorted(VERIFIER_DIALECTS)}")


def _is_module_path(parent: Any, value: str) -> bool:
    """A signature's `target` names a parameter or buffer by its attribute path, not an operator."""
    return parent in ("parameter", "buffer", "tensor_constant", "custom_obj", "constant_input") and \
        bool(_ATTRIBUTE_PATH.fullmatch(value)) and "__" not in value


def _is_name(value: Any, keyword_allowed: bool) -> bool:
    return isinstance(value, str) and bool(_IDENTIFIER.fullmatch(value)) and (keyword_allowed or not keyword.iskeyword(value))


def _refuse_name(value: Any) -> None:
    shown = repr(value[:80]) if isinstance(value, str) else type(value).__name__
    raise ProgramRefused(f"names a value {shown}, which is not a plain identifier (torch writes these names into "
                         f"Python code)")
