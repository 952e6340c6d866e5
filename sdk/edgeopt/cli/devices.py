"""`edgeopt devices`: list the bundled device profiles, show one, or start a custom board's from one."""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import click

from edgeopt_agent.profiles import all_profiles, load_profile

from .output import console, table


@click.command()
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the profiles as JSON.")
@click.option("--template", "template_of", metavar="NAME",
              help="Write a starting TOML for a custom board, copied from profile NAME with every field explained "
                   "(docs/BOARDS.md); then use it as --device ./FILE.toml (convert) or --profile ./FILE.toml.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="With --template: the file to write (its name, less .toml, names the board); default: print it.")
@click.option("--force", is_flag=True, help="With --template: replace FILE if it exists.")
def devices(name, as_json, template_of, output, force):
    """List target boards, show one board's profile in full (NAME, or a file ./mybox.toml), or write
    a custom board's profile to start from (--template NAME)."""
    if template_of is not None:
        if name is not None or as_json:
            raise click.UsageError("--template NAME writes a template: give it without a board NAME or --json")
        write_template(template_of, output, force)
        return
    if output is not None or force:
        raise click.UsageError("-o/--output and --force go with --template")
    profiles = [load_profile(name)] if name else list(all_profiles())
    if as_json:
        click.echo(json.dumps([asdict(p) for p in profiles], indent=2, default=str))
        return
    if name:
        profile = profiles[0]
        click.echo(json.dumps(asdict(profile), indent=2, default=str))
        return
    rows = [
        [
            p.name,
            f"{p.cpu.cores}x {p.cpu.model}",
            ", ".join(a.name for a in p.accelerators) or "-",
            ", ".join(p.runtimes),
            ", ".join(a.key for a in p.recipe),
            str(p.default_threads),
            p.power_sensor,
        ]
        for p in profiles
    ]
    console().print(
        table(["device", "cpu", "accelerators", "runtimes", "recipe", "threads", "power sensor"], rows,
              optional=("accelerators", "recipe"))
    )


def write_template(source_name: str, output, force: bool) -> None:
    from ..errors import UserError
    from ..profile_template import profile_template

    source = load_profile(source_name)
    if output is None:
        click.echo(profile_template(source, f"custom-{source.name}"), nl=False)
        return
    if output.suffix != ".toml":
        raise UserError(f"{output}: a profile file's name ends in .toml (the commands tell a file from a board name "
                        f"by it); try -o {output.with_suffix('.toml')}")
    if output.exists() and not force:
        raise UserError(f"{output} exists; pass --force to replace it")
    from edgeopt_agent.files import write_atomically

    write_atomically(output, profile_template(source, output.stem))
    shown = output if output.is_absolute() or str(output).startswith(".") else f"./{output}"
    click.echo(f"wrote {output}: the '{source.name}' profile as board '{output.stem}'; edit it, then use "
               f"--device {shown} (convert) or --profile {shown} (analyze, edgeopt-agent)")
