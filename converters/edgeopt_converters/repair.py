"""An artifact that fails to build, load or be judged: repaired where the runtime's error names a node
of the graph (kept in float), else listed as failed with its one-line cause while the others go on, and
a static INT8 that cannot be repaired is replaced by dynamic INT8."""
from __future__ import annotations

import logging
import re
from typing import List, Optional

from edgeopt_agent.errors import UserError

from .context import ConversionContext
from .recipe import PlannedArtifact, repair_dynamic_variant, with_exclusions

log = logging.getLogger("edgeopt.convert")
_NAMED_NODE = re.compile(r"Node \(([^()\s]+)\)")
MAX_REPAIRS = 3


def after_failure(ctx: ConversionContext, item: PlannedArtifact, exc: Exception) -> List[PlannedArtifact]:
    """What to build next after `item` failed with `exc` (built before anything else still queued)."""
    repaired = None if ctx.options.strict else _repaired(ctx, item, exc)
    if repaired is not None:
        return [repaired]
    _artifact_failed(ctx, item, exc)
    if item.int8 is None:
        return []
    variant = repair_dynamic_variant(item, one_line(exc)[:120])
    if any(a.key == variant.key for a in ctx.plan.artifacts):
        return []
    ctx.plan.artifacts.append(variant)
    return [variant]


def _artifact_failed(ctx: ConversionContext, item: PlannedArtifact, exc: Exception) -> None:
    """An artifact that could not be built, loaded or judged: listed as failed with its one-line
    cause (manifest, table, warnings) while the conversion goes on; its file is not published.
    The traceback is logged for -v. With --strict the conversion stops here."""
    cause = one_line(exc)
    log.debug("%s failed", item.key, exc_info=True)
    if ctx.options.strict:
        raise UserError(f"{item.key} failed: {cause} (--strict stops at the first artifact that fails)") from exc
    ctx.built.pop(item.key, None)
    (ctx.work / item.filename).unlink(missing_ok=True)
    ctx.failed.append({"key": item.key, "format": item.format, "precision": item.precision, "cause": cause})
    ctx.warnings.append(f"{item.key} failed and is left out: {cause}")


def _repaired(ctx: ConversionContext, item: PlannedArtifact, exc: Exception) -> Optional[PlannedArtifact]:
    """A static ONNX INT8 that a runtime refused, naming a node of the graph (onnxruntime's `Node (If_0)`):
    the same artifact with that node kept in float, at most MAX_REPAIRS times. None: nothing to repair."""
    if item.int8 is None or item.base not in ctx.built:
        return None
    kept = list(item.int8.nodes_to_exclude or ())
    if len(kept) >= MAX_REPAIRS:
        return None
    import onnx

    graph_nodes = {n.name for n in onnx.load(str(ctx.built[item.base]), load_external_data=False).graph.node}
    named = [n for n in _NAMED_NODE.findall(str(exc)) if n in graph_nodes and n not in kept]
    if not named:
        return None
    ctx.built.pop(item.key, None)
    ctx.notes.append(f"{item.key}: the runtime refused it at node {named[0]} ({one_line(exc)[:160]}); "
                     f"built again with {named[0]} kept in float")
    return with_exclusions(item, kept + named[:1])


def one_line(exc: Exception) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0] if lines else ""
    if not isinstance(exc, UserError):
        text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if len(text) <= 2000 else text[:1997] + "..."
