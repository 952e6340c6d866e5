"""The model to convert, as loaded from a file, a factory or a bundled example (see model_source.py)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, List, Optional

from .isolated_program import IsolatedProgram
from .tensors import Dataset, InputSpec


@dataclass
class SourceModel:
    """The model to convert, in whichever form it came."""

    kind: str  # "module" | "torchscript" | "exported" | "onnx"
    description: str
    sha256: str
    module: Any = None  # torch.nn.Module (eval mode) for module / exported / torchscript
    onnx_path: Optional[Path] = None
    input_specs: List[InputSpec] = field(default_factory=list)
    # Data that a bundled example brings along; the user's --calibration / --eval-data win.
    calibration: Optional[Dataset] = None
    eval_data: Optional[Dataset] = None
    warnings: List[str] = field(default_factory=list)  # e.g. what isolation a .pt2 loads under

    @property
    def exportable(self) -> bool:
        """True when torch.export can trace it (needed for TFLite via litert-torch)."""
        return self.kind in ("module", "exported")

    def close(self) -> None:
        """Stops the isolated child an ExportedProgram was loaded in (isolated_program.py)."""
        if isinstance(self.module, IsolatedProgram):
            self.module.close()
