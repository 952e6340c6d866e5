"""Agent settings: command-line flags over a TOML config file over defaults, validated once.

The config file uses the flags' names with underscores (``device_id = "rpi-01"``); relative
paths in it are relative to the file. See scripts/agent.example.toml.
"""
from __future__ import annotations

import difflib
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Tuple

from .. import wire
from ..errors import UserError
from ..files import read_toml
from ..wire.broker import BrokerSettings, default_port, existing_file, parse_broker
from .admission import DEFAULT_CLOCK_SKEW_S
from .inbox import DEFAULT_MAX_BYTES as DEFAULT_INBOX_MAX_BYTES
from .jobs import BenchLimits
from .outbox import DEFAULT_MAX_BYTES as DEFAULT_OUTBOX_MAX_BYTES
from .sender import CONFIRM_TIMEOUT_S

DEFAULT_TELEMETRY_INTERVAL_S = 30.0
DEFAULT_DATA_DIR = "~/.local/state/edgeopt-agent"
DEFAULT_TRANSFER_TIMEOUT_S = 120.0
PASSWORD_ENV = "EDGEOPT_AGENT_PASSWORD"
LOG_LEVELS = ("debug", "info", "warning", "error")
# When the agent forgets a telemetry or results message: once the collector confirms it committed
# it, or (for a set-up without a collector) once the broker acknowledged it.
DELIVERY_MODES = ("collector", "broker")
MIN_QUEUE_BYTES = 1024 * 1024

# key: (type, default); None default means "not set".
KEYS: Dict[str, Tuple[type, Any]] = {
    "broker": (str, "localhost"),
    "device_id": (str, None),
    "profile": (str, None),
    "data_dir": (str, DEFAULT_DATA_DIR),
    "telemetry_interval": (float, DEFAULT_TELEMETRY_INTERVAL_S),
    "tls": (bool, False),
    "tls_ca": (str, None),
    "tls_cert": (str, None),
    "tls_key": (str, None),
    "tls_insecure": (bool, False),
    "username": (str, None),
    "password": (str, None),
    "password_file": (str, None),
    "keepalive": (int, 30),
    "reconnect_min": (float, 1.0),
    "reconnect_max": (float, 60.0),
    "log_level": (str, "info"),
    "trusted_key": (str, None),
    # This board's own Ed25519 private key (PEM), which signs everything it sends; default: device.key in
    # the data dir, made at the first start.
    "device_key": (str, None),
    # How far the host's and this board's clocks may disagree when a job's validity is checked.
    "clock_skew": (float, DEFAULT_CLOCK_SKEW_S),
    "transfer_timeout": (float, DEFAULT_TRANSFER_TIMEOUT_S),
    # The most a job may ask for, in seconds: bench timeout_s, max_duration_s and idle_s.
    "max_job_timeout": (float, BenchLimits.timeout_s),
    "max_job_duration": (float, BenchLimits.max_duration_s),
    "max_job_idle": (float, BenchLimits.idle_s),
    # Disk the agent's queues may take, in bytes: unsent/unconfirmed messages, unanswered jobs.
    "outbox_max_bytes": (int, DEFAULT_OUTBOX_MAX_BYTES),
    "inbox_max_bytes": (int, DEFAULT_INBOX_MAX_BYTES),
    "delivery": (str, "collector"),
    "confirm_timeout": (float, CONFIRM_TIMEOUT_S),
}
_PATH_KEYS = ("data_dir", "tls_ca", "tls_cert", "tls_key", "password_file", "trusted_key", "device_key")


@dataclass(frozen=True)
class AgentConfig:
    broker: BrokerSettings
    device_id: str
    data_dir: Path
    profile: Optional[str] = None
    telemetry_interval_s: float = DEFAULT_TELEMETRY_INTERVAL_S
    reconnect_min_s: float = 1.0
    reconnect_max_s: float = 60.0
    log_level: str = "info"
    # Ed25519 public key (PEM); with it, only jobs signed by its private key are run.
    trusted_key: Optional[Path] = None
    # The board's own signing key (PEM); None: device.key in data_dir, made at the first start.
    device_key: Optional[Path] = None
    clock_skew_s: float = DEFAULT_CLOCK_SKEW_S
    # A chunked transfer that receives nothing for this long fails (what arrived is kept).
    transfer_timeout_s: float = DEFAULT_TRANSFER_TIMEOUT_S
    bench_limits: BenchLimits = BenchLimits()
    outbox_max_bytes: int = DEFAULT_OUTBOX_MAX_BYTES
    inbox_max_bytes: int = DEFAULT_INBOX_MAX_BYTES
    # "collector": keep telemetry and results until the collector confirms them; "broker": until PUBACK.
    delivery: str = "collector"
    confirm_timeout_s: float = CONFIRM_TIMEOUT_S

    @property
    def client_id(self) -> str:
        return f"edgeopt-agent-{self.device_id}"


def read_config_file(path: Path) -> Dict[str, Any]:
    """The settings in a TOML file, with relative paths made relative to the file."""
    data = read_toml(path, "config file")
    for key in data:
        if key not in KEYS:
            close = difflib.get_close_matches(key.replace("-", "_"), KEYS, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else f"; known keys: {', '.join(KEYS)}"
            raise UserError(f"config file {path}: unknown key '{key}'{hint}")
    base = Path(path).resolve().parent
    for key in _PATH_KEYS:
        if isinstance(data.get(key), str):
            data[key] = str(base / Path(data[key]).expanduser())
    return data


def build_config(flags: Mapping[str, Any], config_file: Optional[Path] = None) -> AgentConfig:
    """Merge flags (None = not given) over the config file over defaults, then validate."""
    values: Dict[str, Any] = {key: default for key, (_, default) in KEYS.items()}
    if config_file is not None:
        values.update(read_config_file(config_file))
    values.update({key: value for key, value in flags.items() if value is not None})
    for key, (kind, _) in KEYS.items():
        values[key] = _coerce(key, kind, values[key])

    host, port = parse_broker(values["broker"])
    tls = bool(values["tls"] or values["tls_ca"] or values["tls_cert"] or values["tls_insecure"])
    if port is None:
        port = default_port(tls)
    if bool(values["tls_cert"]) != bool(values["tls_key"]):
        raise UserError("a TLS client certificate needs both tls_cert and tls_key")
    if values["password"] is not None and values["password_file"] is not None:
        raise UserError("give the broker password once: password or password_file, not both")
    password = values["password"] or _read_password(values["password_file"]) or os.environ.get(PASSWORD_ENV)
    if password and not values["username"]:
        raise UserError("a broker password needs a username too")
    if values["telemetry_interval"] <= 0:
        raise UserError(f"telemetry interval must be positive seconds, got {values['telemetry_interval']}")
    if not 0 < values["reconnect_min"] <= values["reconnect_max"]:
        raise UserError("reconnect delays need 0 < reconnect_min <= reconnect_max")
    if values["keepalive"] < 5:
        raise UserError(f"keepalive must be at least 5 seconds, got {values['keepalive']}")
    if values["clock_skew"] < 0:
        raise UserError(f"clock skew must be zero or more seconds, got {values['clock_skew']}")
    if values["transfer_timeout"] <= 0:
        raise UserError(f"transfer timeout must be positive seconds, got {values['transfer_timeout']}")
    for key in ("max_job_timeout", "max_job_duration", "max_job_idle"):
        if values[key] <= 0:
            raise UserError(f"{key} must be positive seconds, got {values[key]}")
    for key in ("outbox_max_bytes", "inbox_max_bytes"):
        if values[key] < MIN_QUEUE_BYTES:
            raise UserError(f"{key} must be at least {MIN_QUEUE_BYTES} bytes (1 MiB), got {values[key]}")
    if values["delivery"] not in DELIVERY_MODES:
        raise UserError(f"delivery '{values['delivery']}' is not one of {', '.join(DELIVERY_MODES)}: 'collector' "
                        "keeps each message until the collector confirms it, 'broker' until the broker has it")
    if values["confirm_timeout"] <= 0:
        raise UserError(f"confirm timeout must be positive seconds, got {values['confirm_timeout']}")
    if values["log_level"].lower() not in LOG_LEVELS:
        raise UserError(f"log level '{values['log_level']}' is not one of {', '.join(LOG_LEVELS)}")

    broker = BrokerSettings(
        host=host,
        port=port,
        tls=tls,
        tls_ca=existing_file(values["tls_ca"], "tls_ca"),
        tls_cert=existing_file(values["tls_cert"], "tls_cert"),
        tls_key=existing_file(values["tls_key"], "tls_key"),
        tls_insecure=values["tls_insecure"],
        username=values["username"],
        password=password,
        keepalive_s=values["keepalive"],
    )
    return AgentConfig(
        broker=broker,
        device_id=_device_id(values["device_id"]),
        data_dir=Path(values["data_dir"]).expanduser(),
        profile=values["profile"],
        telemetry_interval_s=values["telemetry_interval"],
        reconnect_min_s=values["reconnect_min"],
        reconnect_max_s=values["reconnect_max"],
        log_level=values["log_level"].lower(),
        trusted_key=existing_file(values["trusted_key"], "trusted_key"),
        device_key=existing_file(values["device_key"], "device_key"),
        clock_skew_s=values["clock_skew"],
        transfer_timeout_s=values["transfer_timeout"],
        bench_limits=BenchLimits(values["max_job_timeout"], values["max_job_duration"], values["max_job_idle"]),
        outbox_max_bytes=values["outbox_max_bytes"],
        inbox_max_bytes=values["inbox_max_bytes"],
        delivery=values["delivery"],
        confirm_timeout_s=values["confirm_timeout"],
    )


def default_device_id() -> str:
    """The host name, reduced to the characters a device id allows."""
    name = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname().split(".")[0]).strip("-._")
    return name[:64] or "edgeopt-device"


def _device_id(value: Optional[str]) -> str:
    """The id given (checked as a topic level), or the host name when none was given at all."""
    if value is None:
        return wire.validate_device_id(default_device_id())
    if not value.strip():
        raise UserError("device id is empty: give --device-id ID (device_id in the config file), 1-64 letters, "
                        "digits, '.', '_' or '-', or leave it out to use the host name")
    try:
        return wire.validate_device_id(value)
    except wire.ProtocolError as exc:
        raise UserError(f"{exc}; it names this board's MQTT topics (edgeopt/v1/<device_id>/...)") from None


def _coerce(key: str, kind: type, value: Any) -> Any:
    if value is None:
        return None
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise UserError(f"setting '{key}' must be {kind.__name__}, got {value!r}")
    return value


def _read_password(path: Optional[str]) -> Optional[str]:
    if path is None:
        return None
    try:
        return Path(path).expanduser().read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise UserError(f"cannot read password_file {path}: {exc.strerror}") from exc
