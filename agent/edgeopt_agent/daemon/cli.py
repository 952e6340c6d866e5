"""`edgeopt-agent`: the on-device daemon's command line (console script and `python -m`)."""
from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import List, Optional

from ..errors import UserError
from .config import (
    CONFIRM_TIMEOUT_S,
    DEFAULT_CLOCK_SKEW_S,
    DEFAULT_DATA_DIR,
    DEFAULT_INBOX_MAX_BYTES,
    DEFAULT_OUTBOX_MAX_BYTES,
    DEFAULT_TELEMETRY_INTERVAL_S,
    DEFAULT_TRANSFER_TIMEOUT_S,
    DELIVERY_MODES,
    LOG_LEVELS,
    PASSWORD_ENV,
    build_config,
)

log = logging.getLogger("edgeopt_agent.daemon")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="edgeopt-agent",
        description="Benchmark models on this board on request and report telemetry over MQTT.",
        epilog="Every option can also be set in the --config TOML file, under its name with underscores "
        "(device_id = \"rpi-01\"). Options given here win over the file.",
    )
    add = parser.add_argument
    add("--config", type=Path, metavar="FILE", help="TOML config file (see scripts/agent.example.toml)")
    add("--broker", metavar="HOST:PORT", help="MQTT broker (default localhost:1883, 8883 with TLS)")
    add("--device-id", help="this board's id in topics: 1-64 letters, digits, '.', '_' or '-' (default: the host name)")
    add("--profile", help="device profile, e.g. rpi5 or jetson-orin-nano (see `edgeopt devices`)")
    add("--data-dir", help=f"where state and artifacts live (default {DEFAULT_DATA_DIR})")
    add("--telemetry-interval", type=float, metavar="SECONDS",
        help=f"seconds between telemetry messages (default {DEFAULT_TELEMETRY_INTERVAL_S:g})")
    add("--tls", action="store_true", default=None, help="connect with TLS (system CA store unless --tls-ca)")
    add("--tls-ca", metavar="FILE", help="CA certificate(s) to verify the broker with")
    add("--tls-cert", metavar="FILE", help="client certificate for mutual TLS")
    add("--tls-key", metavar="FILE", help="client private key for mutual TLS")
    add("--tls-insecure", action="store_true", default=None, help="do not check the broker's host name (testing only)")
    add("--username", help="broker user name")
    add("--password", help=f"broker password (visible in the process list: prefer --password-file or ${PASSWORD_ENV})")
    add("--password-file", metavar="FILE", help="file holding the broker password")
    add("--keepalive", type=int, metavar="SECONDS", help="MQTT keep-alive (default 30)")
    add("--reconnect-min", type=float, metavar="SECONDS", help="first reconnect delay (default 1)")
    add("--reconnect-max", type=float, metavar="SECONDS", help="longest reconnect delay (default 60)")
    add("--trusted-key", metavar="FILE",
        help="Ed25519 public key (PEM, from `edgeopt keys init`): run only jobs signed with its private key, and "
             "forget results only on confirmations from a collector it certified")
    add("--device-key", metavar="FILE",
        help="this board's own Ed25519 private key (PEM), which signs everything it sends (from `edgeopt fleet "
             "provision`; default: device.key in the data dir, made at the first start)")
    add("--clock-skew", type=float, metavar="SECONDS",
        help=f"how far the host's clock may be off when a signed job's validity is checked (default {DEFAULT_CLOCK_SKEW_S:g})")
    add("--transfer-timeout", type=float, metavar="SECONDS",
        help=f"give up a chunked artifact transfer after this long without a chunk (default {DEFAULT_TRANSFER_TIMEOUT_S:g})")
    add("--delivery", choices=DELIVERY_MODES,
        help="forget telemetry and results once the collector confirms it committed them (collector, the default) "
        "or once the broker has them (broker: for a set-up without a collector)")
    add("--confirm-timeout", type=float, metavar="SECONDS",
        help=f"send a message again when the collector has not confirmed it after this long, doubling each time "
        f"(default {CONFIRM_TIMEOUT_S:g})")
    add("--outbox-max-bytes", type=int, metavar="BYTES",
        help=f"disk for messages not yet confirmed; over it the oldest telemetry is dropped "
        f"(default {DEFAULT_OUTBOX_MAX_BYTES})")
    add("--inbox-max-bytes", type=int, metavar="BYTES",
        help=f"disk for jobs not yet answered; a job over it is refused with inbox_full (default {DEFAULT_INBOX_MAX_BYTES})")
    add("--accept-replay-risk", action="store_true",
        help="when the job ledger (agent.db and replay-state.json) is damaged beyond repair, start a new one and exit: "
             "jobs issued before now are refused, but a signed job this board already ran may run again if its clock "
             "is behind. Run it once by hand, then start the agent as usual")
    add("--log-level", choices=LOG_LEVELS, help="default info")
    add("-v", "--verbose", action="store_true", help="same as --log-level debug")
    add("--version", action="store_true", help="print the version and exit")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.version:
        from .telemetry import versions

        print(f"edgeopt-agent {versions()['edgeopt']}")
        return 0
    flags = {key: value for key, value in vars(args).items()
             if key not in ("config", "verbose", "version", "accept_replay_risk")}
    if args.verbose:
        flags["log_level"] = "debug"
    try:
        config = build_config(flags, args.config)
        _configure_logging(config.log_level)
        if args.accept_replay_risk:
            from .admission import accept_replay_risk

            print(f"edgeopt-agent: {accept_replay_risk(config.data_dir, config.clock_skew_s)}")
            return 0
        from .agent import Agent

        agent = Agent(config)
    except UserError as exc:
        print(f"edgeopt-agent: error: {exc}", file=sys.stderr)
        return 2
    except Exception:
        _configure_logging("info")
        log.exception("internal error while starting")
        return 1

    stop = threading.Event()

    def request_stop(signum, frame):
        log.info("received %s", signal.Signals(signum).name)
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, request_stop)
    try:
        agent.run(stop)
    except UserError as exc:
        print(f"edgeopt-agent: error: {exc}", file=sys.stderr)
        return 2
    except Exception:
        log.exception("internal error; the agent stops")
        return 1
    return 0


def _configure_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    # paho's own debug lines are packet traces; only wanted when asked for.
    logging.getLogger("paho").setLevel(logging.DEBUG if level == "debug" else logging.WARNING)
