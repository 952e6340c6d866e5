"""`edgeopt keys`: the Ed25519 key pair deploy signs jobs with, and the collectors' keys it certifies."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import click


@click.group()
def keys():
    """Make the key pair that signs deployed jobs (artifact, options, target, validity), and collector keys."""


@keys.command()
@click.option("--dir", "folder", type=click.Path(file_okay=False, path_type=Path),
              help="Where to write the key pair (default: ~/.config/edgeopt/keys).")
@click.option("--force", is_flag=True, help="Replace an existing key pair.")
def init(folder: Optional[Path], force: bool):
    """Make an Ed25519 key pair: the private key signs on this machine, the public key goes to each board."""
    from ..deploy.keys import KEY_ENV, default_dir, init_keys

    pair = init_keys(folder, overwrite=force)
    click.echo(f"private key: {pair.private_key} (keep it here, readable by you only)")
    click.echo(f"public key:  {pair.public_key} (key id {pair.key_id})")
    click.echo("")
    click.echo("Copy the public key to each board and start its agent with it:")
    click.echo(f"  edgeopt-agent --trusted-key /etc/edgeopt/{pair.public_key.name} ...")
    click.echo(f"  (or trusted_key = \"/etc/edgeopt/{pair.public_key.name}\" in its agent.toml)")
    if folder is not None and Path(folder).expanduser().resolve() != default_dir().resolve():
        click.echo(f"Deploy signs with it given --key {pair.private_key} (or {KEY_ENV}={pair.private_key}).")
    else:
        click.echo("`edgeopt deploy` signs with it from now on.")


@keys.command()
@click.argument("name")
@click.option("--dir", "folder", type=click.Path(file_okay=False, path_type=Path),
              help="Where to write the collector key and certificate (default: ~/.config/edgeopt/keys).")
@click.option("--key", "fleet_key", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="The fleet's private signing key that certifies it (default: $EDGEOPT_SIGNING_KEY, or the "
                   "key of `edgeopt keys init`).")
@click.option("--days", type=click.FloatRange(min=0, min_open=True, max=730), default=365.0, show_default=True,
              help="How long the certificate is valid.")
@click.option("--force", is_flag=True, help="Replace an existing collector key.")
def collector(name: str, folder: Optional[Path], fleet_key: Optional[Path], days: float, force: bool):
    """Give collector NAME its own key, certified by the fleet key: it signs delivery confirmations,
    and agents with a trusted key forget measurements only on confirmations signed so."""
    from ..deploy.collector_keys import COLLECTOR_KEY_ENV, default_dir, issue_collector_key

    issued = issue_collector_key(name, folder, fleet_key, days=days, overwrite=force)
    click.echo(f"collector key: {issued.private_key} (key id {issued.key_id}; keep it on the collector's host, "
               "readable by the collector only)")
    click.echo(f"certificate:   {issued.certificate} (collector '{issued.collector}', certified by fleet key "
               f"{issued.fleet_key_id}, valid {days:g} days)")
    if folder is not None and Path(folder).expanduser().resolve() != default_dir().resolve():
        click.echo(f"Start the collector with it: edgeopt fleet serve --collector-key {issued.private_key} "
                   f"(or {COLLECTOR_KEY_ENV}={issued.private_key}).")
    else:
        click.echo("`edgeopt fleet serve` signs its confirmations with it from now on.")
