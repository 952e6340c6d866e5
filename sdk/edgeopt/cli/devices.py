"""`edgeopt devices`: list the bundled device profiles."""
from __future__ import annotations

import json
from dataclasses import asdict

import click

from edgeopt_agent.profiles import all_profiles, load_profile

from .output import console, table


@click.command()
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the profiles as JSON.")
def devices(name, as_json):
    """List target boards, or show one board's profile in full."""
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
