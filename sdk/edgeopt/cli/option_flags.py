"""Click options generated from an option set (edgeopt_agent.wire.options): `edgeopt convert`'s from
ConvertOptions, `edgeopt bench`'s and `edgeopt deploy`'s from BenchOptions. Each flag carries its
option's help, choices, default and limits, and passes the value under the option's own name."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, Tuple

import click


def option_flags(option_set: Any, *, defaults: bool = True, taken: Tuple[str, ...] = ()) -> Callable[[Any], Any]:
    """A decorator adding one click option per option of `option_set` the CLI takes (`Spec.cli`).

    With `defaults=False` a flag not given passes None (so that whoever runs the options, a board,
    applies its own default), and its help shows the default all the same. `taken`: flags the
    command uses for something else, left out (an option keeps its other spellings)."""
    def decorate(command: Any) -> Any:
        given = option_set.defaults()
        for name, spec in reversed(list(option_set.specs().items())):
            if not spec.cli:
                continue
            flags = [flag for flag in spec.cli_flags(name) if flag not in taken]
            if not flags:
                raise ValueError(f"option {name}'s flags {spec.cli_flags(name)} are all taken")
            command = click.option(*flags, name, **_flag(spec, given[name], defaults))(command)
        return command

    return decorate


def _flag(spec: Any, default: Any, with_default: bool) -> Dict[str, Any]:
    kwargs: Dict[str, Any] = dict(help=spec.help, metavar=spec.metavar)
    if spec.negated_by:
        kwargs.update(flag_value=not default, default=default)
    elif spec.kind is bool:
        kwargs.update(is_flag=True, default=default)
    else:
        kwargs.update(type=_click_type(spec), multiple=spec.multiple, required=spec.required)
        if not spec.multiple and default is not None:
            kwargs.update(default=default, show_default=True) if with_default else \
                kwargs.update(default=None, show_default=f"{default:g}" if isinstance(default, float) else str(default))
    return kwargs


def _click_type(spec: Any) -> Any:
    choices = spec.allowed()
    if choices:
        return click.Choice(choices)
    if spec.kind is int and spec.minimum is not None:
        return click.IntRange(min=int(spec.minimum))
    if spec.kind is Path:
        return click.Path(file_okay=not spec.folder, dir_okay=spec.folder)
    if spec.kind in (int, float):
        return spec.kind  # float limits are checked with the option's own message
    return None
