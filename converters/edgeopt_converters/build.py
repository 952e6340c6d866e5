"""Building one planned artifact: its steps run in order, intermediate files kept in the work folder."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, Optional

from edgeopt_agent.errors import require

from .context import ConversionContext
from .passes.base import StepCall
from .passes.errors import StepFailed
from .recipe import PlannedArtifact


def build_artifact(ctx: ConversionContext, item: PlannedArtifact, target: Path, advance=None) -> Dict[str, Any]:
    """Run the artifact's steps in order (the last writes `target`); returns the facts they report."""
    step_ctx = ctx.step_context(advance)
    current: Optional[Path] = ctx.built.get(item.base) if item.base else None
    if item.base and current is None:
        raise StepFailed(f"needs {item.base}, which was not built")
    info: Dict[str, Any] = {"steps": [c.name for c in item.steps]}
    for index, call in enumerate(item.steps):
        output = target if index == len(item.steps) - 1 else ctx.work / ".steps" / f"{item.key}.{index}.{call.name}.onnx"
        output.parent.mkdir(exist_ok=True)
        try:
            result = call.build().run(step_ctx, current, output)
        except Exception as exc:
            exc.step = call.name  # which step failed: repairs and listings read it
            raise
        info.setdefault("inputs_of", {})[call.name] = current
        for key, value in result.info.items():
            info[key] = info[key] + value if isinstance(value, list) and isinstance(info.get(key), list) else value
        current = result.path
    if item.format == "onnx" and item.base and item.base in ctx.built:
        _carry_metadata(ctx.built[item.base], target)
    return info


def with_dynamic_axes(item: PlannedArtifact, axes) -> PlannedArtifact:
    """The artifact with its ONNX export keeping `axes` dynamic."""
    steps = tuple(StepCall(c.name, replace(c.options, dynamic_axes=axes)) if c.name == "export-onnx" else c
                  for c in item.steps)
    return replace(item, steps=steps)


def _carry_metadata(source: Path, target: Path) -> None:
    onnx = require("onnx", "convert")
    from .passes.preprocess_onnx import copy_metadata

    src = onnx.load(str(source), load_external_data=False)
    if not src.metadata_props:
        return
    out = onnx.load(str(target))
    before = len(out.metadata_props)
    copy_metadata(src, out)
    if len(out.metadata_props) != before:
        onnx.save(out, str(target))
