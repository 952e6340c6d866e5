"""Options written once: each field of an `OptionSet` dataclass is an `option(default, help, ...)`
holding everything every surface needs (CLI flags, type, choices, limits, the reader of a CLI, API
or JSON value). The CLI flags, the Python API's keywords and the job's checks on the board are
generated from these fields (standard library only: the board reads them too).
"""
from __future__ import annotations

import dataclasses
import math
import numbers
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Dict, Mapping, Optional, Tuple, Union

from ..errors import UserError

Choices = Union[Tuple[str, ...], Callable[[], Tuple[str, ...]]]


@dataclass(frozen=True)
class Spec:
    """How one option is given: CLI flags (default `--name-with-hyphens`), its value's reader, limits."""

    help: str
    read: Optional[Callable[[Any], Any]] = None  # a CLI, API or JSON value -> the option's value
    flags: Tuple[str, ...] = ()
    metavar: Optional[str] = None
    choices: Choices = ()  # or a function giving them when asked (a runtime row added later is seen)
    multiple: bool = False
    minimum: Optional[float] = None
    maximum: Optional[float] = None
    above_minimum: bool = False  # the minimum itself is refused (a timeout of 0)
    kind: type = str  # what the CLI parses a single value as (Path: a file; a folder where `folder`)
    folder: bool = False
    negated_by: str = ""  # a True default switched off by this flag
    required: bool = False
    cli: bool = True  # False: Python API (and job) only

    def cli_flags(self, name: str) -> Tuple[str, ...]:
        return self.negated_by and (self.negated_by,) or self.flags or ("--" + name.replace("_", "-"),)

    def allowed(self) -> Tuple[str, ...]:
        return tuple(self.choices() if callable(self.choices) else self.choices)


def option(default: Any, help: str, **spec: Any) -> Any:
    return field(default=default, metadata={"spec": Spec(help, **spec)})


class OptionSet:
    """Base of a frozen dataclass of `option` fields: each value is read (from a CLI string, an API
    shape, dict or path, a JSON value; every reader takes its own output back unchanged) or checked
    against its spec's type, then against its choices and limits. Fields without a spec (what the
    board adds itself) are left alone."""

    # How a message names an option: "cli" its last CLI flag (the Python keyword beside it in type
    # errors, where the two differ); "name" the Python keyword.
    named_by: ClassVar[str] = "cli"
    # How a message spells the two values of a flag (a set read from JSON says true or false).
    booleans: ClassVar[str] = "True or False"

    def __post_init__(self) -> None:
        for name, spec in self.specs().items():
            object.__setattr__(self, name, self.checked(name, getattr(self, name)))

    @classmethod
    def specs(cls) -> Dict[str, Spec]:
        """{option name: Spec}, in definition order (what the CLI and the API are generated from)."""
        return {f.name: f.metadata["spec"] for f in dataclasses.fields(cls) if "spec" in f.metadata}

    @classmethod
    def defaults(cls) -> Dict[str, Any]:
        return {f.name: f.default for f in dataclasses.fields(cls) if "spec" in f.metadata}

    @classmethod
    def read(cls, **given: Any) -> Any:
        """Options from the CLI's or the Python API's values; unknown names are refused with the known ones."""
        cls.refuse_unknown(given)
        return cls(**given)

    @classmethod
    def read_given(cls, given: Mapping[str, Any]) -> Dict[str, Any]:
        """Only the options `given` sets, each read and checked as `read` would (no defaults added)."""
        cls.refuse_unknown(given)
        return {name: cls.checked(name, value) for name, value in given.items()}

    @classmethod
    def refuse_unknown(cls, given: Mapping[str, Any]) -> None:
        unknown = sorted(set(given) - set(cls.specs()))
        if unknown:
            raise TypeError(f"unknown {cls.what()}(s) {', '.join(unknown)}; known: {', '.join(cls.specs())}")

    @classmethod
    def what(cls) -> str:
        """What the options are called in a message ("convert option")."""
        return "option"

    @classmethod
    def checked(cls, name: str, value: Any, label: Optional[str] = None) -> Any:
        """`value` as option `name` takes it (read, typed), or a UserError naming the option (as `label` when given)."""
        spec = cls.specs()[name]
        plain, typed = (label, label) if label else cls._labels(name, spec)
        if spec.read is not None and (value is not None or spec.multiple):
            value = _read(typed, spec, value)
        elif value is not None:
            value = _typed(typed, spec, value, cls.booleans)
        if spec.required and value is None:
            raise UserError(f"{plain} is required")
        if value is None and cls.defaults()[name] is not None and not spec.multiple:
            raise UserError(f"{plain} may not be null")
        if value is None or isinstance(value, bool):
            return value
        allowed = spec.allowed()
        for item in (value if spec.multiple and allowed else (value,)):
            if allowed and item not in allowed:
                raise UserError(f"unknown {plain} '{item}'; choose from {', '.join(allowed)}")
        if not _within(spec, value):
            raise UserError(f"{plain} must be {_range(spec)}, got {value}")
        return value

    @classmethod
    def _labels(cls, name: str, spec: Spec) -> Tuple[str, str]:
        if cls.named_by == "name":
            return name, name
        flag = spec.cli_flags(name)[-1]
        return flag, flag if flag == "--" + name.replace("_", "-") else f"{flag} ({name}=)"


def _within(spec: Spec, value: Any) -> bool:
    if spec.minimum is not None and (value < spec.minimum or spec.above_minimum and value == spec.minimum):
        return False
    return spec.maximum is None or value <= spec.maximum


def _read(named: str, spec: Spec, value: Any) -> Any:
    try:
        return spec.read(value)
    except TypeError:  # a reader given a value of a type it does not take (a number for a path)
        allowed = spec.allowed()
        wanted = ("a path" if spec.kind is Path else f"one of {', '.join(allowed)}" if allowed
                  else f"a string like {spec.metavar}" if spec.metavar else "a string")
        raise UserError(f"{named} cannot be {value!r} ({type(value).__name__}); give {wanted}"
                        f"{' or a list of them' if spec.multiple else ''}") from None


def _typed(named: str, spec: Spec, value: Any, booleans: str) -> Any:
    """`value` as its spec's type: a bool is no number, a number no bool, and a float is finite."""
    if spec.kind is bool:
        if isinstance(value, bool):
            return value
        wanted = booleans
    elif spec.kind is int:
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return int(value)
        wanted = "a whole number" + _limits(spec)
    elif spec.kind is float:
        if isinstance(value, numbers.Real) and not isinstance(value, bool) and _finite(value):
            return float(value)
        wanted = "a finite number" + _limits(spec)
    else:
        if isinstance(value, str):
            return value
        if isinstance(value, os.PathLike):  # a profile's or a metric's file
            return str(value)
        wanted = "a string" + (f" ({spec.metavar})" if spec.metavar else "")
    raise UserError(f"{named} must be {wanted}, got {value!r} ({type(value).__name__})")


def _finite(value: numbers.Real) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too big for a float
        return False


def _limits(spec: Spec) -> str:
    return "" if spec.minimum is None and spec.maximum is None else f", {_range(spec)}"


def _range(spec: Spec) -> str:
    low = spec.minimum is not None and (f"above {spec.minimum:g}" if spec.above_minimum else f"{spec.minimum:g}")
    if not low:
        return f"{spec.maximum:g} or less"
    if spec.maximum is None:
        return low if spec.above_minimum else f"{low} or more"
    return f"between {spec.minimum:g} and {spec.maximum:g}"
