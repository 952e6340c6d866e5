"""ConversionContext is written in one place: its own recording methods (`note`, `warn`, `fail`,
`record_built`, `take_reference`, ...). The pipeline and the rooms read it and call them; no other
module assigns to its fields or changes them in place (passes/ have their own StepContext)."""
import ast
import dataclasses

from edgeopt_converters.context import ConversionContext
from test_converter_rooms import PACKAGE

FIELDS = {f.name for f in dataclasses.fields(ConversionContext)}
MUTATORS = {"append", "extend", "pop", "update", "setdefault", "clear", "insert", "remove", "popitem", "discard"}


def _field_of(node: ast.AST):
    """The context field `node` reaches (ctx.notes, ctx.built[key]), or None."""
    while isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "ctx" \
            and node.attr in FIELDS:
        return node.attr
    return None


def writes(tree: ast.AST):
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        for target in targets:
            for item in (target.elts if isinstance(target, ast.Tuple) else [target]):
                if _field_of(item):
                    yield node.lineno, _field_of(item)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS \
                and _field_of(node.func.value):
            yield node.lineno, _field_of(node.func.value)


def test_only_the_context_writes_its_fields():
    found = [f"{path.relative_to(PACKAGE)}:{line} writes ctx.{name}"
             for path in sorted(PACKAGE.rglob("*.py")) if path.name != "context.py" and "passes" not in path.parts
             for line, name in writes(ast.parse(path.read_text()))]
    assert found == []


def test_the_rule_sees_assignments_in_place_changes_and_tuples():
    sample = ast.parse("ctx.notes.append('x')\nctx.built[k] = p\nctx.a, ctx.reference = 1, 2\nctx.refusals[k] += 1\n"
                       "ctx.warn('fine')\nother.notes.append('fine')\n")
    assert sorted(writes(sample)) == [(1, "notes"), (2, "built"), (3, "reference"), (4, "refusals")]
