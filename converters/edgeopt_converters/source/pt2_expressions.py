"""A .pt2's shape expressions and guards, parsed into edgeopt's own tree and written anew.

torch hands every shape expression of an exported program to `sympy.sympify` (which calls
`eval`) and compiles the program's guards into a Python function. Checking that text against a
grammar is not a wall: sympy's `floor`, `Max`, `Mod`... re-parse a *string* argument with `eval`,
a string constant in a guard closes the quotes of the code torch writes around it, and
`10**10**10` is valid arithmetic that never finishes. So no text of the archive reaches torch:
each string is parsed here into a small tree whose leaves are bounded numbers, symbol names and
input paths, whose inner nodes are arithmetic, comparisons and a fixed list of functions taking
trees (never strings), and torch gets only the text `write` makes from that tree. Constant
powers are bounded so that sympy can evaluate them at once, and so is the tree's depth.
"""
from __future__ import annotations

import ast
import functools
import math
import re
from dataclasses import dataclass
from typing import Optional, Tuple, Union

MAX_TEXT = 4096
MAX_DEPTH = 48
MAX_EXPONENT = 4096
SIZE_BITS = 32  # what a size symbol or an input's size may take, for the bound below
MAX_VALUE_BITS = 1 << 16  # a (sub-)expression's value, with sizes put in, has at most this many bits
MAX_FLOAT_PRECISION = 1024
MAX_INPUT_INDEX = 4096

# Functions of sympy and of torch's sympy extensions that a shape expression may call. Their
# arguments are trees; no keyword arguments.
EXPRESSION_FUNCTIONS = frozenset({
    "Add", "Mul", "Pow", "Mod", "Max", "Min", "Abs", "floor", "ceiling", "sqrt", "Piecewise", "ExprCondPair",
    "Equality", "Unequality", "StrictLessThan", "LessThan", "StrictGreaterThan", "GreaterThan",
    "Eq", "Ne", "Lt", "Le", "Gt", "Ge", "And", "Or", "Not",
    "FloorDiv", "ModularIndexing", "Where", "PythonMod", "CleanDiv", "CeilToInt", "FloorToInt", "CeilDiv",
    "LShift", "RShift", "PowByNatural", "FloatPow", "FloatTrueDiv", "IntTrueDiv",
    "IsNonOverlappingAndDenseIndicator", "TruncToFloat", "TruncToInt", "RoundToInt", "RoundDecimal",
    "ToFloat", "Identity", "BitwiseFn_bitwise_and", "BitwiseFn_bitwise_or",
})
# How many arguments each function takes where that is fixed: `Pow(a, b, 1)` would be sympy's
# `evaluate` flag, and a power past the bound below. The rest take one or more.
ARITY = {
    **{f: 1 for f in ("Abs", "floor", "ceiling", "sqrt", "Not", "CeilToInt", "FloorToInt", "TruncToFloat",
                      "TruncToInt", "RoundToInt", "ToFloat", "Identity", "math.trunc", "math.floor", "math.ceil",
                      "math.sqrt", "torch.sym_float", "torch.sym_int", "torch.sym_not", "abs", "int", "float")},
    **{f: 2 for f in ("Pow", "PowByNatural", "FloatPow", "LShift", "RShift", "Mod", "FloorDiv", "CleanDiv",
                      "CeilDiv", "PythonMod", "IntTrueDiv", "FloatTrueDiv", "RoundDecimal", "ExprCondPair",
                      "Equality", "Unequality", "StrictLessThan", "LessThan", "StrictGreaterThan", "GreaterThan",
                      "Eq", "Ne", "Lt", "Le", "Gt", "Ge", "BitwiseFn_bitwise_and", "BitwiseFn_bitwise_or",
                      "torch.sym_max", "torch.sym_min")},
    **{f: 3 for f in ("ModularIndexing", "Where", "torch.sym_ite")},
}
# sympy's constants, written as a name or as a call without arguments.
EXPRESSION_CONSTANTS = frozenset({
    "oo", "zoo", "nan", "true", "false", "IntInfinity", "NegativeIntInfinity", "int_oo", "Infinity",
    "NegativeInfinity", "NaN", "ComplexInfinity", "BooleanTrue", "BooleanFalse", "One", "Zero", "NegativeOne", "Half",
})
# What a guard may call: the names torch's guard namespace gives (math, torch's symbolic helpers)
# and harmless builtins.
GUARD_FUNCTIONS = frozenset({
    "math.trunc", "math.floor", "math.ceil", "math.sqrt", "torch.sym_float", "torch.sym_int", "torch.sym_max",
    "torch.sym_min", "torch.sym_not", "torch.sym_ite", "abs", "max", "min", "int", "float",
    "IsNonOverlappingAndDenseIndicator",
})
GUARD_ACCESSORS = frozenset({"size", "stride", "storage_offset", "dim", "numel"})
SYMBOL_ASSUMPTIONS = frozenset({
    "integer", "positive", "nonnegative", "negative", "nonpositive", "real", "finite", "nonzero", "zero",
    "rational", "even", "odd", "extended_real", "extended_positive", "extended_nonnegative", "commutative",
})
_SYMBOL_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
_BARE_SYMBOL = re.compile(r"^[a-z]{1,8}[0-9]{1,9}$")  # s0, u12, zuf3: never a function or constant name
_INPUT_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")

_BINARY = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
           ast.Pow: "**", ast.BitAnd: "&", ast.BitOr: "|"}
_COMPARE = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
_POWERS = {"**", "Pow", "PowByNatural", "FloatPow", "LShift"}


class ExpressionRefused(ValueError):
    """The text is not one edgeopt reads as a shape expression or guard; the message says why."""


@dataclass(frozen=True)
class Number:
    value: Union[int, float]
    precision: Optional[int] = None  # a sympy Float's precision in bits, as srepr writes it


@dataclass(frozen=True)
class Rational:
    numerator: int
    denominator: int


@dataclass(frozen=True)
class Symbol:
    name: str
    assumptions: Optional[Tuple[Tuple[str, bool], ...]] = None  # None: written bare, as `s0`


@dataclass(frozen=True)
class Constant:
    name: str
    called: bool  # `IntInfinity()` rather than `oo`


@dataclass(frozen=True)
class InputSize:
    """A guard's `L['x']['k']`, optionally `.size()[1]`, `.stride()[0]`, `.dim()`..."""

    path: Tuple[Union[str, int], ...]
    accessor: Optional[str] = None
    index: Optional[int] = None


@dataclass(frozen=True)
class Unary:
    op: str  # "-", "+", "~", "not"
    operand: "Node"


@dataclass(frozen=True)
class Binary:
    op: str
    left: "Node"
    right: "Node"


@dataclass(frozen=True)
class Comparison:
    ops: Tuple[str, ...]
    operands: Tuple["Node", ...]


@dataclass(frozen=True)
class Logic:
    op: str  # "and", "or"
    operands: Tuple["Node", ...]


@dataclass(frozen=True)
class Call:
    function: str
    arguments: Tuple["Node", ...]


Node = Union[Number, Rational, Symbol, Constant, InputSize, Unary, Binary, Comparison, Logic, Call]


def regenerate_expression(text: object) -> str:
    """A shape expression (torch writes them with sympy's srepr) as edgeopt writes it, or ExpressionRefused."""
    return write(parse(text, guard=False))


def regenerate_guard(text: object) -> str:
    """A guard (`L['x'].size()[0] > 4`) as edgeopt writes it, or ExpressionRefused."""
    return write(parse(text, guard=True))


def parse(text: object, guard: bool) -> Node:
    if not isinstance(text, str) or len(text) > MAX_TEXT:
        raise ExpressionRefused(f"not a string of at most {MAX_TEXT} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise ExpressionRefused("does not parse as an expression") from None
    parser = _Parser(guard)
    try:
        node = parser.node(tree.body, 0)
    except RecursionError:
        raise ExpressionRefused("is nested too deeply") from None
    parser.value_bits(node)
    return node


class _Parser:
    def __init__(self, guard: bool):
        self.guard = guard

    def node(self, node: ast.AST, depth: int) -> Node:
        if depth > MAX_DEPTH:
            raise ExpressionRefused(f"is nested deeper than {MAX_DEPTH} levels")
        depth += 1
        if isinstance(node, ast.Constant):
            return self.literal(node.value)
        if isinstance(node, ast.Name):
            return self.name(node.id)
        if isinstance(node, ast.UnaryOp):
            ops = {ast.USub: "-", ast.UAdd: "+", ast.Invert: "~", ast.Not: "not"}
            op = ops.get(type(node.op))
            if op is None or (op == "not" and not self.guard):
                raise ExpressionRefused(f"uses the operator {type(node.op).__name__}")
            return Unary(op, self.node(node.operand, depth))
        if isinstance(node, ast.BinOp):
            op = _BINARY.get(type(node.op))
            if op is None:
                raise ExpressionRefused(f"uses the operator {type(node.op).__name__}")
            return Binary(op, self.node(node.left, depth), self.node(node.right, depth))
        if isinstance(node, ast.Compare):
            ops = tuple(_COMPARE.get(type(op)) for op in node.ops)
            if None in ops:
                raise ExpressionRefused("uses a comparison other than ==, !=, <, <=, >, >=")
            return Comparison(ops, tuple(self.node(n, depth) for n in [node.left, *node.comparators]))
        if isinstance(node, ast.BoolOp) and self.guard:
            op = "and" if isinstance(node.op, ast.And) else "or"
            return Logic(op, tuple(self.node(n, depth) for n in node.values))
        if isinstance(node, ast.Call):
            return self.call(node, depth)
        if isinstance(node, ast.Subscript) and self.guard:
            return self.input_size(node)
        raise ExpressionRefused(f"uses Python's {type(node).__name__} syntax, which edgeopt does not read there")

    def literal(self, value: object) -> Node:
        if isinstance(value, bool):
            return Number(value) if self.guard else Constant("true" if value else "false", False)
        if isinstance(value, int):
            return Number(value)
        if isinstance(value, float) and math.isfinite(value):
            return Number(value)
        raise ExpressionRefused(f"holds the constant {type(value).__name__} {str(value)[:40]!r} (strings are never read)")

    def name(self, name: str) -> Node:
        if self.guard:
            raise ExpressionRefused(f"names {name[:40]!r} outside an input's sizes")
        if name in EXPRESSION_CONSTANTS:
            return Constant(name, False)
        if _BARE_SYMBOL.match(name) and name not in _sympy_names():
            return Symbol(name)
        raise ExpressionRefused(f"names {name[:40]!r}, which is neither a size symbol nor one of sympy's constants")

    def call(self, node: ast.Call, depth: int) -> Node:
        function = _dotted(node.func)
        if self.guard:
            if isinstance(node.func, ast.Attribute) and node.func.attr in GUARD_ACCESSORS and not node.args \
                    and not node.keywords and node.func.attr not in ("size", "stride"):
                return InputSize(_input_path(node.func.value), node.func.attr)  # L['x'].dim()
            if node.keywords or function not in GUARD_FUNCTIONS:
                raise ExpressionRefused(f"calls {function or 'an expression'}, which a guard may not")
            return Call(function, self.arguments(function, node, depth))
        if function == "Symbol":
            return self.symbol(node)
        if function in ("Integer", "Float", "Rational"):
            return self.number(function, node)
        if function in EXPRESSION_CONSTANTS and not node.args and not node.keywords:
            return Constant(function, True)
        if function not in EXPRESSION_FUNCTIONS or node.keywords:
            raise ExpressionRefused(f"calls {function or 'an expression'}, which is not one of sympy's shape functions")
        return Call(function, self.arguments(function, node, depth))

    def arguments(self, function: str, node: ast.Call, depth: int) -> Tuple[Node, ...]:
        wanted = ARITY.get(function)
        if any(isinstance(a, ast.Starred) for a in node.args) or (wanted is not None and len(node.args) != wanted) \
                or not node.args and function not in ("Max", "Min", "max", "min"):
            raise ExpressionRefused(f"calls {function} with {len(node.args)} arguments"
                                    + (f"; it takes {wanted}" if wanted is not None else ""))
        return tuple(self.node(a, depth) for a in node.args)

    @staticmethod
    def symbol(node: ast.Call) -> Symbol:
        if len(node.args) != 1 or not isinstance(node.args[0], ast.Constant) or not isinstance(node.args[0].value, str) \
                or not _SYMBOL_NAME.match(node.args[0].value):
            raise ExpressionRefused("makes a Symbol whose name is not a plain identifier")
        assumptions = []
        for keyword in node.keywords:
            value = keyword.value.value if isinstance(keyword.value, ast.Constant) else None
            if keyword.arg not in SYMBOL_ASSUMPTIONS or not isinstance(value, bool):
                raise ExpressionRefused(f"gives a Symbol the assumption {str(keyword.arg)[:40]!r}")
            assumptions.append((keyword.arg, value))
        return Symbol(node.args[0].value, tuple(assumptions))

    @staticmethod
    def number(function: str, node: ast.Call) -> Node:
        args = [a.value if isinstance(a, ast.Constant) else _negative_literal(a) for a in node.args]
        if function == "Integer" and len(args) == 1 and type(args[0]) is int and not node.keywords:
            return Number(args[0])
        if function == "Rational" and len(args) == 2 and all(type(a) is int for a in args) and args[1] != 0 \
                and not node.keywords:
            return Rational(args[0], args[1])
        if function == "Float" and len(args) == 1:
            value = _float_text(args[0])
            precision = 53
            for keyword in node.keywords:
                given = keyword.value.value if isinstance(keyword.value, ast.Constant) else None
                if keyword.arg != "precision" or type(given) is not int or not 1 <= given <= MAX_FLOAT_PRECISION:
                    raise ExpressionRefused(f"makes a Float with {str(keyword.arg)[:20]}={str(given)[:20]}")
                precision = given
            return Number(value, precision)
        raise ExpressionRefused(f"makes {function} from something other than plain numbers")

    def input_size(self, node: ast.Subscript) -> InputSize:
        accessor, index = None, None
        if isinstance(node.value, ast.Call):  # L['x'].size()[0]
            call = node.value
            if not isinstance(call.func, ast.Attribute) or call.func.attr not in ("size", "stride") or call.args \
                    or call.keywords:
                raise ExpressionRefused("indexes something other than an input's size() or stride()")
            accessor, index = call.func.attr, _index(node.slice)
            node = call.func.value
        path = _input_path(node)
        return InputSize(path, accessor, index)

    def value_bits(self, node: Node) -> Optional[int]:
        """An upper bound on the bits of `node`'s value (a float's by its integer part), taking each
        size as 32 bits (None for sympy's constants and truth values); refuses what would take more
        than MAX_VALUE_BITS to compute once torch puts the sizes in."""
        bits: Optional[int]
        if isinstance(node, Number):
            bits = int(abs(node.value)).bit_length()  # a finite float's integer part: at most 1024 bits
        elif isinstance(node, Rational):
            bits = max(abs(node.numerator).bit_length(), abs(node.denominator).bit_length())
        elif isinstance(node, (Symbol, InputSize)):
            bits = SIZE_BITS
        elif isinstance(node, Unary):
            bits = self.value_bits(node.operand)
        elif isinstance(node, (Binary, Call)):
            op = node.op if isinstance(node, Binary) else node.function
            parts = [node.left, node.right] if isinstance(node, Binary) else list(node.arguments)
            sizes = [self.value_bits(p) for p in parts]
            known = [s for s in sizes if s is not None]
            if op in _POWERS and len(parts) == 2:
                bits = _power_bits(sizes[0], parts[1])
            elif op in ("*", "Mul"):
                bits = sum(known) if known else None
            else:
                bits = max(known) + 1 if known else None
        else:
            for child in _children(node):
                self.value_bits(child)
            bits = None
        if bits is not None and bits > MAX_VALUE_BITS:
            raise ExpressionRefused(f"computes a number of more than {MAX_VALUE_BITS} bits")
        return bits


def _power_bits(base_bits: Optional[int], exponent: Node) -> Optional[int]:
    """Powers only by a number literal of at most MAX_EXPONENT."""
    value = _integer_value(exponent)
    if value is None and isinstance(exponent, Number):
        value = math.ceil(abs(exponent.value))  # a float exponent: bounded like the whole number above it
    if value is None:
        raise ExpressionRefused("raises to a power that is not a plain number")
    if abs(value) > MAX_EXPONENT:
        raise ExpressionRefused(f"raises to a power above {MAX_EXPONENT}")
    return None if base_bits is None else base_bits * max(abs(value), 1)


def _integer_value(node: Node) -> Optional[int]:
    if isinstance(node, Number) and isinstance(node.value, int):
        return node.value
    if isinstance(node, Unary) and node.op in ("-", "+"):
        inner = _integer_value(node.operand)
        return None if inner is None else (-inner if node.op == "-" else inner)
    return None


@functools.lru_cache(maxsize=1)
def _sympy_names() -> frozenset:
    """What sympify would take a bare name for instead of a symbol (atan2, hankel1, ...)."""
    import sympy

    return frozenset(dir(sympy))


def _children(node: Node) -> Tuple[Node, ...]:
    if isinstance(node, Unary):
        return (node.operand,)
    if isinstance(node, Binary):
        return (node.left, node.right)
    if isinstance(node, (Comparison, Logic)):
        return node.operands
    if isinstance(node, Call):
        return node.arguments
    return ()


def _dotted(node: ast.AST) -> Optional[str]:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"{node.value.id}.{node.attr}"
    return None


def _negative_literal(node: ast.AST) -> object:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
            and type(node.operand.value) in (int, float):
        return -node.operand.value
    return None


_FLOAT_TEXT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d{1,4})?$")


def _float_text(value: object) -> float:
    if type(value) in (int, float):
        number = float(value)
    elif isinstance(value, str) and _FLOAT_TEXT.match(value):
        number = float(value)
    else:
        raise ExpressionRefused("makes a Float from something other than a decimal number")
    if not math.isfinite(number):
        raise ExpressionRefused("makes a Float that is not finite")
    return number


def _index(node: ast.AST) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int and 0 <= node.value < MAX_INPUT_INDEX:
        return node.value
    raise ExpressionRefused("indexes sizes with something other than a small whole number")


def _input_path(node: ast.AST) -> Tuple[Union[str, int], ...]:
    keys = []
    while isinstance(node, ast.Subscript):
        key = node.slice.value if isinstance(node.slice, ast.Constant) else None
        if isinstance(key, str) and _INPUT_KEY.match(key):
            keys.append(key)
        elif type(key) is int and 0 <= key < MAX_INPUT_INDEX:
            keys.append(key)
        else:
            raise ExpressionRefused("names an input by something other than an identifier or a small index")
        node = node.value
    if not isinstance(node, ast.Name) or node.id != "L" or not keys:
        raise ExpressionRefused("reads something other than an input L[...]")
    return tuple(reversed(keys))


def write(node: Node) -> str:
    """The text torch receives: every part written by edgeopt, every operand in parentheses."""
    if isinstance(node, Number):
        if isinstance(node.value, int):
            return str(node.value)
        if node.precision is None:
            return repr(float(node.value))
        return f"Float({repr(repr(float(node.value)))}, precision={int(node.precision)})"
    if isinstance(node, Rational):
        return f"Rational({int(node.numerator)}, {int(node.denominator)})"
    if isinstance(node, Symbol):
        if node.assumptions is None:
            return node.name
        keywords = "".join(f", {k}={bool(v)}" for k, v in node.assumptions)
        return f"Symbol({node.name!r}{keywords})"
    if isinstance(node, Constant):
        return f"{node.name}()" if node.called else node.name
    if isinstance(node, InputSize):
        text = "L" + "".join(f"[{key!r}]" for key in node.path)
        if node.accessor is not None:
            text += f".{node.accessor}()" + ("" if node.index is None else f"[{int(node.index)}]")
        return text
    if isinstance(node, Unary):
        return f"({node.op} {write(node.operand)})" if node.op == "not" else f"({node.op}{write(node.operand)})"
    if isinstance(node, Binary):
        return f"({write(node.left)} {node.op} {write(node.right)})"
    if isinstance(node, Comparison):
        parts = [write(node.operands[0])]
        for op, operand in zip(node.ops, node.operands[1:]):
            parts.append(f"{op} {write(operand)}")
        return "(" + " ".join(parts) + ")"
    if isinstance(node, Logic):
        return "(" + f" {node.op} ".join(write(o) for o in node.operands) + ")"
    if isinstance(node, Call):
        return f"{node.function}({', '.join(write(a) for a in node.arguments)})"
    raise TypeError(f"not an expression node: {node!r}")
