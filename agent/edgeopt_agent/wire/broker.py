"""Where the broker is and how to log in to it: the settings every MQTT client (the agent, the
collector, deploy) builds from, and `configure_client`, which applies them to a paho client."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Tuple, Union

from ..errors import UserError

DEFAULT_PORT = 1883
DEFAULT_TLS_PORT = 8883
CONNECT_TIMEOUT_S = 10.0  # TCP (and TLS) connect


@dataclass(frozen=True)
class BrokerSettings:
    host: str
    port: int
    tls: bool = False
    tls_ca: Optional[Path] = None
    tls_cert: Optional[Path] = None
    tls_key: Optional[Path] = None
    tls_insecure: bool = False
    username: Optional[str] = None
    password: Optional[str] = None
    keepalive_s: int = 30

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_broker(text: str) -> Tuple[str, Optional[int]]:
    """'host', 'host:port', '[v6addr]' or '[v6addr]:port' -> (host, port or None)."""
    match = re.match(r"^\[([^\]]+)\](?::(\d+))?$", text) or re.match(r"^([^:\[\]]+)(?::(\d+))?$", text)
    if not match or not match.group(1).strip():
        raise UserError(f"broker '{text}' is not HOST or HOST:PORT (IPv6 as [ADDR]:PORT)")
    port = int(match.group(2)) if match.group(2) else None
    if port is not None and not 0 < port < 65536:
        raise UserError(f"broker port {port} is out of range 1-65535")
    return match.group(1), port


def broker_settings(address: str, tls: bool = False, tls_ca: Optional[Union[str, Path]] = None,
                    username: Optional[str] = None, password: Optional[str] = None,
                    tls_cert: Optional[Union[str, Path]] = None, tls_key: Optional[Union[str, Path]] = None,
                    tls_insecure: bool = False) -> BrokerSettings:
    """Settings for a client of the broker at `address` ('host', 'host:port', '[v6]:port').

    The same rules as the agent's config: any TLS file (or `tls_insecure`) turns TLS on, a client
    certificate needs its key, and a password needs a username.
    """
    host, port = parse_broker(address)
    if password and not username:
        raise UserError("a broker password needs a username too")
    if bool(tls_cert) != bool(tls_key):
        raise UserError("a TLS client certificate needs both --tls-cert and --tls-key")
    tls = bool(tls or tls_ca or tls_cert or tls_insecure)
    return BrokerSettings(host=host, port=port or default_port(tls), tls=tls,
                          tls_ca=existing_file(_text(tls_ca), "tls_ca"),
                          tls_cert=existing_file(_text(tls_cert), "tls_cert"),
                          tls_key=existing_file(_text(tls_key), "tls_key"),
                          tls_insecure=bool(tls_insecure), username=username, password=password)


def default_port(tls: bool) -> int:
    return DEFAULT_TLS_PORT if tls else DEFAULT_PORT


def existing_file(value: Optional[str], key: str) -> Optional[Path]:
    """The file a setting names (None when not set); UserError naming the setting if it is missing."""
    if value is None:
        return None
    path = Path(value).expanduser()
    if not path.is_file():
        raise UserError(f"{key}: no such file {path}")
    return path


def _text(path: Optional[Union[str, Path]]) -> Optional[str]:
    return str(path) if path is not None else None


def configure_client(client: Any, settings: BrokerSettings) -> None:
    """Connect timeout, TLS (CA, client certificate for mutual TLS, host name check) and user
    name/password on a paho client: one definition for the agent, the collector and deploy."""
    client.connect_timeout = CONNECT_TIMEOUT_S
    if settings.tls:
        try:
            client.tls_set(
                ca_certs=str(settings.tls_ca) if settings.tls_ca else None,
                certfile=str(settings.tls_cert) if settings.tls_cert else None,
                keyfile=str(settings.tls_key) if settings.tls_key else None,
            )
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            raise UserError(f"cannot set up TLS for {settings.address}: {exc}") from exc
        client.tls_insecure_set(settings.tls_insecure)
    if settings.username:
        client.username_pw_set(settings.username, settings.password)
