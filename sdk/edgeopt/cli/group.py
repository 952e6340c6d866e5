"""The `edgeopt` command group (one module per command) and how its outcomes become exit codes."""
from __future__ import annotations

import importlib
import logging
import sys
import traceback

import click

from ..errors import UserError
from . import output

# (module under edgeopt.cli, command attribute); imported lazily so `edgeopt --help` stays fast.
COMMANDS = {
    "convert": ("convert", "convert"),
    "devices": ("devices", "devices"),
    "bench": ("bench", "bench"),
    "profile": ("profile", "profile"),
    "analyze": ("analyze", "analyze"),
    "fleet": ("fleet", "fleet"),
    "report": ("report", "report"),
    "deploy": ("deploy", "deploy"),
    "keys": ("keys", "keys"),
    "quickstart": ("quickstart", "quickstart"),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        module, attr = COMMANDS[name]
        return getattr(importlib.import_module(f"{__package__}.{module}"), attr)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="Show debug logs and full tracebacks.")
@click.option("--wide", is_flag=True,
              help="Piped into a file or a program, draw tables with every row on one line (default: "
                   f"{output.PIPE_WIDTH} columns, or COLUMNS).")
@click.version_option(package_name="edgeopt")
@click.pass_context
def cli(ctx: click.Context, verbose: bool, wide: bool) -> None:
    """Quantize and export PyTorch models for edge boards, and benchmark them."""
    ctx.ensure_object(dict)
    ctx.obj["verbose"] = verbose
    output.wide = wide
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )


def usage_error(exc: click.ClickException) -> str:
    """click's message as edgeopt says errors (`error: missing option '--device' (see: edgeopt convert --help)`)."""
    message = exc.format_message().strip().rstrip(".")
    message = message[:1].lower() + message[1:]
    context = getattr(exc, "ctx", None)
    return f"{message} (see: {context.command_path} --help)" if context is not None else message


def run(argv=None) -> int:
    verbose = "-v" in (argv or sys.argv[1:]) or "--verbose" in (argv or sys.argv[1:])
    try:
        # Without standalone mode click returns ctx.exit()'s code instead of exiting.
        code = cli.main(args=argv, prog_name="edgeopt", standalone_mode=False)
    except click.exceptions.Abort as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt):  # click's own wrapping of Ctrl-C: the caller's to handle
            raise exc.__cause__ from None
        click.echo("aborted", err=True)
        return 130
    except click.ClickException as exc:  # a mistake in the command line: one line in the same style as the rest
        click.echo(f"error: {usage_error(exc)}", err=True)
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except UserError as exc:
        if verbose:
            traceback.print_exc()
        click.echo(f"error: {exc}", err=True)
        return 2
    except Exception as exc:  # an internal bug: say so, keep the traceback for -v
        if verbose:
            traceback.print_exc()
        click.echo(f"internal error: {type(exc).__name__}: {exc} (run with -v for the traceback)", err=True)
        return 1
    return code if isinstance(code, int) else 0

