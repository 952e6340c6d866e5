"""What storing a fleet message does besides its own row: the handlers of each message kind (see
`messages.KINDS`), run inside the writer's transaction.

`before` runs ahead of storing one device's messages of its kind in a batch, `after` once they are
stored, and `device` folds one stored message into the device's row of the devices table. They take
what they need from the messages themselves (`row`, `envelope`, `facts`), so none imports the writer.
"""
from __future__ import annotations

import json
import logging
from typing import Any, Dict, Iterable, List

from .database import Transaction

log = logging.getLogger(__name__)


def forget_baselines_if_reset(tx: Transaction, device_id: str, statuses: List[Any], now: float) -> None:
    """An agent whose state was wiped numbers from 1 again, so its streams take a new baseline.

    Status numbers survive restarts: a newer start with a lower number than the newest status
    stored is the sign.
    """
    if not statuses:
        return
    row = tx.one("SELECT state_started_at, state_seq FROM devices WHERE device_id = ?", (device_id,))
    if row is None or row["state_seq"] is None:
        return
    if any(m.facts["started_at"] > (row["state_started_at"] or 0.0) and m.envelope.seq < row["state_seq"]
           for m in statuses):
        log.warning("%s restarted with its sequence numbers reset; checking its messages for gaps from the "
                    "new numbers on", device_id)
        tx.execute("DELETE FROM streams WHERE device_id = ?", (device_id,))


def answered(tx: Transaction, device_id: str, results: List[Any], now: float) -> None:
    """A stored result answers the job message it names (its request_id): that job is re-sent no more."""
    for message in results:
        request_id = message.row.get("request_id")
        if request_id:
            tx.execute("UPDATE jobs SET answered_at = ? WHERE device_id = ? AND request_id = ? "
                       "AND answered_at IS NULL", (now, device_id, request_id))


def status_device(device: Dict[str, Any], message: Any) -> None:
    """The device's state from its newest status: (agent start time, seq) orders statuses even across
    a reset of the agent's counters."""
    facts = message.facts
    key = (facts["started_at"], message.envelope.seq)
    if device["state"] is None or key > (device["state_started_at"] or 0.0, device["state_seq"] or 0):
        device.update(
            state=message.row["state"],
            state_reason=message.row["reason"],
            state_started_at=facts["started_at"],
            state_seq=message.envelope.seq,
            state_ts=message.envelope.ts,
            mqtt_protocol=facts["mqtt_protocol"] or device["mqtt_protocol"],
        )
        _update_known(device, facts, ("profile", "agent_version"))


def telemetry_device(device: Dict[str, Any], message: Any) -> None:
    """The device's temperature, versions and runtimes from its newest telemetry."""
    facts = message.facts
    key = (message.envelope.ts, message.envelope.seq)
    if device["telemetry_ts"] is None or key > (device["telemetry_ts"], device["telemetry_seq"]):
        device.update(
            telemetry_ts=message.envelope.ts,
            telemetry_seq=message.envelope.seq,
            temperature_c=facts["temperature_c"],
            versions=json.dumps(facts["versions"]),
            runtimes=json.dumps(facts["runtimes"]),
        )
        _update_known(device, facts, ("profile", "agent_version"))


def _update_known(device: Dict[str, Any], facts: Dict[str, Any], keys: Iterable[str]) -> None:
    for key in keys:
        if facts.get(key) is not None:
            device[key] = facts[key]
