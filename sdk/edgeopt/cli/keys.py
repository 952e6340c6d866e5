"""`edgeopt keys`: the Ed25519 key pair deploy signs jobs with."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import click


@click.group()
def keys():
    """Make the key pair that signs deployed jobs (artifact, options, target, validity)."""


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
