"""MQTT topics, all under ``edgeopt/v1/<device_id>/<kind>``, and the device ids that name them.

    status     device -> host  retained; "online" on connect, "offline" on shutdown or Last Will
    telemetry  device -> host  periodic load, memory, temperature, power, disk, versions
    jobs       host -> device  work for the agent (type "benchmark")
    results    device -> host  one message per job: the result, or an error
    transfer   device -> host  for a job whose artifact comes in chunks: the chunks still missing
    chunks     host -> device  the pieces of an artifact the device asked for
    confirm    host -> device  the collector: which of the device's messages it committed
"""
from __future__ import annotations

import re
from typing import Optional, Tuple

from .errors import ProtocolError

TOPIC_ROOT = "edgeopt/v1"

STATUS = "status"
TELEMETRY = "telemetry"
JOBS = "jobs"
RESULTS = "results"
TRANSFER = "transfer"
CHUNKS = "chunks"
CONFIRM = "confirm"
TOPIC_KINDS = (STATUS, TELEMETRY, JOBS, RESULTS, TRANSFER, CHUNKS, CONFIRM)
# What the agent keeps until the collector confirms it committed it (others: until the broker's PUBACK).
CONFIRMED_KINDS = (TELEMETRY, RESULTS)

_DEVICE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def validate_device_id(device_id: str) -> str:
    """Device ids are topic levels: letters, digits, '.', '_' and '-', at most 64 characters."""
    if not isinstance(device_id, str) or not _DEVICE_ID.match(device_id):
        raise ProtocolError(
            f"invalid device id {device_id!r}: use 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit",
            kind="invalid_device_id",
        )
    return device_id


def topic(device_id: str, kind: str) -> str:
    """The topic of one device's message kind, e.g. ``edgeopt/v1/rpi-01/results``."""
    if kind not in TOPIC_KINDS:
        raise ProtocolError(f"unknown topic kind '{kind}'; known: {', '.join(TOPIC_KINDS)}")
    return f"{TOPIC_ROOT}/{validate_device_id(device_id)}/{kind}"


def status_topic(device_id: str) -> str:
    return topic(device_id, STATUS)


def telemetry_topic(device_id: str) -> str:
    return topic(device_id, TELEMETRY)


def jobs_topic(device_id: str) -> str:
    return topic(device_id, JOBS)


def results_topic(device_id: str) -> str:
    return topic(device_id, RESULTS)


def transfer_topic(device_id: str) -> str:
    return topic(device_id, TRANSFER)


def chunks_topic(device_id: str) -> str:
    return topic(device_id, CHUNKS)


def confirm_topic(device_id: str) -> str:
    return topic(device_id, CONFIRM)


def subscription(kind: Optional[str] = None, device_id: str = "+") -> str:
    """A topic filter: one kind (or all with None) of one device (or every device with "+")."""
    if device_id != "+":
        validate_device_id(device_id)
    if kind is None:
        return f"{TOPIC_ROOT}/{device_id}/#"
    if kind not in TOPIC_KINDS:
        raise ProtocolError(f"unknown topic kind '{kind}'; known: {', '.join(TOPIC_KINDS)}")
    return f"{TOPIC_ROOT}/{device_id}/{kind}"


def shared_subscription(group: str, kind: Optional[str] = None) -> str:
    """An MQTT v5 shared subscription, so several collectors split the devices' messages."""
    if not group or any(c in group for c in "/+#"):
        raise ProtocolError(f"invalid share group {group!r}: it may not be empty or contain '/', '+' or '#'")
    return f"$share/{group}/{subscription(kind)}"


def parse_topic(name: str) -> Tuple[str, str]:
    """Split ``edgeopt/v1/<device_id>/<kind>`` into (device_id, kind)."""
    prefix = TOPIC_ROOT + "/"
    parts = name[len(prefix):].split("/") if name.startswith(prefix) else []
    if len(parts) != 2 or parts[1] not in TOPIC_KINDS:
        raise ProtocolError(f"'{name}' is not an edgeopt topic ({TOPIC_ROOT}/<device_id>/<kind>)")
    return validate_device_id(parts[0]), parts[1]
