"""Which devices a deploy goes to, learned from the broker: every agent's retained status.

Subscribing to ``edgeopt/v1/+/status`` returns each known device's last status at once (it is
retained): online or offline, its profile, whether it requires signed jobs.

A status is evidence of nothing on a broker without an ACL: any client can leave one that looks
like an agent's. So `--all` and `--profile` pick at most `max_devices` devices (more is refused,
never cut), and, given the fleet store (`measured_devices`), only devices it holds a result from.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Set

from edgeopt_agent import wire

from ..errors import UserError
from .mqtt import HostClient

log = logging.getLogger(__name__)

# Retained messages come in a burst right after the subscription: the first within FIRST_S
# (or there are none), then each within QUIET_S of the one before.
FIRST_S = 1.0
QUIET_S = 0.3
MAX_LISTEN_S = 5.0
# What every agent's status carries (edgeopt_agent.daemon.agent); a status without them is not one.
REQUIRED_STATUS_FIELDS = {"reason": (str,), "agent_version": (str,), "started_at": (int, float)}
# The most devices --all or --profile may pick unless the caller says more.
DEFAULT_MAX_DEVICES = 100


@dataclass(frozen=True)
class DeviceStatus:
    device_id: str
    state: str
    seq: int
    profile: Optional[str] = None
    signatures: Optional[str] = None  # "required" or "off"; None from agents that do not say
    trusted_key_id: Optional[str] = None
    agent_version: Optional[str] = None

    @property
    def online(self) -> bool:
        return self.state == wire.ONLINE

    def describe(self) -> str:
        return f"{self.device_id} ({self.profile or 'no profile'}, {self.state})"


def read_statuses(client: HostClient, quiet_s: float = QUIET_S, max_s: float = MAX_LISTEN_S) -> Dict[str, DeviceStatus]:
    """The latest status of every device that has one on the broker."""
    client.subscribe([wire.subscription(wire.STATUS)])
    found: Dict[str, DeviceStatus] = {}
    deadline = time.monotonic() + max_s
    wait = FIRST_S
    while True:
        message = client.receive(min(wait, deadline - time.monotonic()))
        wait = quiet_s
        if message is None:
            break
        status = parse_status(message.topic, message.payload)
        if status is not None and (status.device_id not in found or status.seq >= found[status.device_id].seq):
            found[status.device_id] = status
    return found


def parse_status(topic: str, payload: bytes) -> Optional[DeviceStatus]:
    try:
        device_id, kind = wire.parse_topic(topic)
        envelope = wire.Envelope.decode(payload, expect_device=device_id)
    except wire.ProtocolError as exc:
        log.debug("ignoring a message on %s: %s", topic, exc)
        return None
    except Exception as exc:  # RecursionError, OverflowError: a payload the JSON parser cannot take
        log.warning("ignoring a message on %s: it could not be decoded (%s)", topic, type(exc).__name__)
        return None
    body = envelope.body
    if kind != wire.STATUS or body.get("state") not in (wire.ONLINE, wire.OFFLINE):
        return None
    missing = [key for key, kinds in REQUIRED_STATUS_FIELDS.items()
               if not isinstance(body.get(key), kinds) or isinstance(body.get(key), bool)]
    if missing:  # not an agent's status: junk a client left on the broker must not become a target
        log.debug("ignoring the status on %s: %s missing or of the wrong type", topic, ", ".join(missing))
        return None

    def text(key: str) -> Optional[str]:
        return body[key] if isinstance(body.get(key), str) else None

    return DeviceStatus(device_id, body["state"], envelope.seq, text("profile"), text("signatures"),
                        text("trusted_key_id"), text("agent_version"))


def measured_devices(db_url: str) -> Set[str]:
    """The devices the fleet store at `db_url` holds at least one result from."""
    from ..fleet.store import open_store

    with open_store(db_url, create=False) as store:
        with store.db.transaction(write=False) as tx:
            return {row["device_id"] for row in tx.rows("SELECT DISTINCT device_id FROM results")}


def select_targets(
    statuses: Dict[str, DeviceStatus],
    device: Optional[str] = None,
    profile: Optional[str] = None,
    all_devices: bool = False,
    measured: Optional[Set[str]] = None,
    max_devices: int = DEFAULT_MAX_DEVICES,
) -> List[DeviceStatus]:
    """One named device (which must be online), every online device of a profile, or every online device.

    `measured` (the devices the fleet store has a result from, or None): --all and --profile pick
    only those. More than `max_devices` picked by --all or --profile is refused, not cut.
    """
    if sum((device is not None, profile is not None, bool(all_devices))) != 1:
        raise UserError("say where to deploy: exactly one of --device-id ID, --profile NAME or --all")
    if max_devices < 1:
        raise UserError(f"--max-devices must be at least 1, got {max_devices}")
    online = sorted((s for s in statuses.values() if s.online), key=lambda s: s.device_id)
    if measured is not None and device is None:
        unmeasured = [s.device_id for s in online if s.device_id not in measured]
        if unmeasured:
            log.info("leaving out %d online device(s) the fleet store has no result from: %s",
                     len(unmeasured), ", ".join(unmeasured[:10]) + (", ..." if len(unmeasured) > 10 else ""))
        online = [s for s in online if s.device_id in measured]
    known = ", ".join(s.describe() for s in sorted(statuses.values(), key=lambda s: s.device_id)) or "none"
    if device is not None:
        wire.validate_device_id(device)
        status = statuses.get(device)
        if status is None:
            raise UserError(f"no device '{device}' has ever connected to this broker; known devices: {known}")
        if not status.online:
            raise UserError(f"device '{device}' is offline; start its agent (edgeopt-agent) and deploy again")
        return [status]
    measured_note = " that the fleet store has a result from" if measured is not None else ""
    if profile is not None:
        chosen = [s for s in online if s.profile == profile]
        if not chosen:
            raise UserError(f"no online device{measured_note} has profile '{profile}'; known devices: {_short(known)}")
        return _capped(chosen, f"--profile {profile}", max_devices)
    if not online:
        raise UserError(f"no device{measured_note} is online on this broker; known devices: {_short(known)}")
    return _capped(online, "--all", max_devices)


def _capped(chosen: List[DeviceStatus], how: str, max_devices: int) -> List[DeviceStatus]:
    if len(chosen) > max_devices:
        raise UserError(
            f"{how} picked {len(chosen)} online devices, more than --max-devices {max_devices}: on a broker without "
            "an ACL any client can leave a status that looks like an agent's (docs/FLEET.md, \"Identities\"); "
            "add --db URL to pick only devices the fleet store has results from, or pass --max-devices "
            f"{len(chosen)} if the fleet is that large")
    return chosen


def _short(known: str, limit: int = 2000) -> str:
    """The list of known devices, cut for a one-line message (there may be thousands)."""
    return known if len(known) <= limit else known[:limit].rsplit(", ", 1)[0] + ", ..."
