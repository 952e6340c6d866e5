"""The broker connection options that `fleet serve` and `deploy` share, named as the agent's flags."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Optional

import click

FILE = click.Path(exists=True, dir_okay=False)


# The parameters `broker_options` adds to a command, in `broker_settings_from`'s order.
BROKER_OPTIONS = ("broker", "tls", "tls_ca", "tls_cert", "tls_key", "tls_insecure", "username", "password_file")


def broker_options(password_env: str, default_broker: str = "localhost:1883") -> Callable[[Any], Any]:
    """Adds --broker, --tls, --tls-ca, --tls-cert, --tls-key, --tls-insecure, --username and
    --password-file; the command takes them as `**broker` and passes them to `broker_settings_from`."""
    options = [
        click.option("--broker", default=default_broker, show_default=True, metavar="HOST[:PORT]", help="MQTT broker."),
        click.option("--tls", is_flag=True, help="Connect with TLS (system CA store unless --tls-ca)."),
        click.option("--tls-ca", type=FILE, help="CA certificate(s) to verify the broker with."),
        click.option("--tls-cert", type=FILE, help="Client certificate for mutual TLS (see `edgeopt fleet provision --cert`)."),
        click.option("--tls-key", type=FILE, help="Private key of the client certificate."),
        click.option("--tls-insecure", is_flag=True, help="Do not check the broker's host name (testing only)."),
        click.option("--username", help="Broker user name."),
        click.option("--password-file", type=FILE, help=f"File holding the broker password (or set ${password_env})."),
    ]

    def decorate(command: Any) -> Any:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def broker_settings_from(password_env: str, broker: str, tls: bool, tls_ca: Optional[str], tls_cert: Optional[str],
                         tls_key: Optional[str], tls_insecure: bool, username: Optional[str],
                         password_file: Optional[str]) -> Any:
    """The BrokerSettings the options of `broker_options` describe."""
    from edgeopt_agent.wire.broker import broker_settings

    password = (Path(password_file).read_text(encoding="utf-8").strip() if password_file
                else os.environ.get(password_env))
    return broker_settings(broker, tls=tls, tls_ca=tls_ca, username=username, password=password,
                           tls_cert=tls_cert, tls_key=tls_key, tls_insecure=tls_insecure)
