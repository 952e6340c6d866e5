"""Old spellings of renamed options: still accepted, hidden from --help.

A board's id is `--device-id` and a board profile `--profile` in every command; commands that
took either as `--device` keep accepting it.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import click


def hidden_alias(alias: str, primary: str, dest: str, required: bool = False, **option: Any) -> Callable[[Any], Any]:
    """Accept `alias` as another spelling of option `primary`, whose parameter is `dest`.

    Put it under the primary option (which must not be `required`: `required=True` here checks
    that one of the two was given)."""
    alias_dest = f"{dest}_alias"

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(command)
        def merged(*args: Any, **kwargs: Any) -> Any:
            old = kwargs.pop(alias_dest, None)
            if old is not None:
                if kwargs.get(dest) is not None and kwargs[dest] != old:
                    raise click.UsageError(f"{alias} is the old name of {primary}: give one of them")
                kwargs[dest] = old
            if required and kwargs.get(dest) is None:
                raise click.UsageError(f"Missing option '{primary}'.")
            return command(*args, **kwargs)

        return click.option(alias, alias_dest, hidden=True, **option)(merged)

    return decorate
