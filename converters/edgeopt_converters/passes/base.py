"""The one shape every conversion step has: typed options, one `run`, a registry filled by subclassing.

A step turns one model file into another (or, for an export, the source model into a file). Its
options are a frozen dataclass whose fields carry a description in their metadata and a default;
`Step.describe()` lists them. Every step runs on the host: what the board does with an artifact (a
TensorRT engine build) is its runtime's, and the artifact's `board` configuration (recipe.board_config) says it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Dict, List, Mapping, Optional, Sequence, Tuple, Type

from edgeopt_agent.errors import UserError
from edgeopt_agent.wire.options import option as any_option

from ..source.source_model import SourceModel
from ..source.tensors import Dataset, InputSpec


def option(default: Any, description: str) -> Any:
    """A step option: its default and what it does (shown by `Step.describe()`), in the one option
    mechanism (edgeopt_agent.wire.options)."""
    if isinstance(default, (list, dict, set)):
        raise TypeError("step options are immutable: use a tuple")
    return any_option(default, description)


@dataclass(frozen=True)
class NoOptions:
    pass


@dataclass
class StepContext:
    """What every step may use: the source model, the inputs, calibration data and where to write."""

    source: SourceModel
    specs: Sequence[InputSpec]
    calibration: Optional[Dataset] = None
    batch: int = 1
    on_batch: Optional[Callable[[int], None]] = None
    notes: List[str] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)
    example: Optional[Mapping[str, Any]] = None  # one real feed to trace an export with
    fix_dims: bool = True  # the data has one shape per input, so dynamic non-batch dims may be fixed
    calibration_cache: Optional[Path] = None  # activation ranges measured before (read), or where to keep them
    threads: Optional[int] = None  # for the runs a step makes (calibration); None: the runtime's default
    run_batch: int = 1  # samples per calibration run where the model takes any batch size
    pt2e_statistics: Optional[Dict[str, Any]] = None  # PT2E observer statistics kept for the next format to share

    def advance(self, count: int) -> None:
        if self.on_batch:
            self.on_batch(count)


@dataclass
class StepResult:
    path: Path
    info: Dict[str, Any] = field(default_factory=dict)  # facts for the manifest (scheme, float nodes, ...)


class Step:
    """Subclass with a `name`, an `Options` dataclass and `run`; the subclass registers itself."""

    name: ClassVar[str] = ""
    Options: ClassVar[type] = NoOptions
    from_source: ClassVar[bool] = False  # reads ctx.source instead of a model file (exports)
    # quantizes activations with scales taken from each run: a sample's output depends on the others run with it
    scales_per_run: ClassVar[bool] = False
    # (module, extra) pairs the step needs; a format the profile plans is skipped with a note where one is missing
    requires: ClassVar[Tuple[Tuple[str, str], ...]] = ()
    registry: ClassVar[Dict[str, Type["Step"]]] = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if not cls.name:
            return
        if cls.name in Step.registry and Step.registry[cls.name] is not cls:
            raise TypeError(f"two conversion steps are named {cls.name!r}")
        Step.registry[cls.name] = cls

    def __init__(self, options: Any = None, **overrides: Any):
        options = options if options is not None else self.Options()
        if not isinstance(options, self.Options):
            raise TypeError(f"{self.name} takes {self.Options.__name__}, got {type(options).__name__}")
        self.options = dataclasses.replace(options, **overrides) if overrides else options

    def run(self, ctx: StepContext, model: Optional[Path], output: Path) -> StepResult:
        raise NotImplementedError

    def label(self) -> str:
        """What the step does, in words, for progress and logs."""
        return self.name

    @property
    def calibrates(self) -> bool:
        """Whether `run` reads the calibration data (its progress counts samples)."""
        return False

    @classmethod
    def missing(cls) -> Optional[str]:
        """The install command for what the step needs and this machine lacks (None: nothing missing).
        Looks for the packages without importing them."""
        import importlib.util

        extras = [extra for module, extra in cls.requires if importlib.util.find_spec(module) is None]
        return f"pip install 'edgeopt[{','.join(dict.fromkeys(extras))}]'" if extras else None

    @classmethod
    def describe(cls) -> List[Dict[str, Any]]:
        """Each option: name, type, default and description."""
        rows = []
        for f in dataclasses.fields(cls.Options):
            rows.append({"name": f.name, "type": f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type)),
                         "default": f.default, "description": f.metadata["spec"].help if "spec" in f.metadata else ""})
        return rows


def step_class(name: str) -> Type[Step]:
    _load_builtin_steps()
    try:
        return Step.registry[name]
    except KeyError:
        raise UserError(f"unknown conversion step '{name}'; known: {', '.join(sorted(Step.registry))}") from None


def _load_builtin_steps() -> None:
    """Importing the step modules registers them."""
    from . import (  # noqa: F401
        export_executorch, export_ncnn, export_onnx, export_tflite, fp16_onnx, preprocess_onnx, quantize_dynamic,
        quantize_onnx, quantize_weight_only,
    )


@dataclass(frozen=True)
class StepCall:
    """One planned step: its registered name and its options (a dataclass instance)."""

    name: str
    options: Any = None

    def build(self) -> Step:
        cls = step_class(self.name)
        return cls(self.options)
