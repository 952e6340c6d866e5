"""Gaps in a device's sequence numbers: recorded when a number is skipped, marked filled when it arrives.

Each device numbers its messages per topic kind (1, 2, 3, ...). The first number the fleet
database sees for a stream is its baseline; from there a jump records the skipped range as an
open gap, and a late message inside an open gap splits it so that exactly the numbers still
missing stay open. A jump over more numbers than a device can have sent (MAX_PLAUSIBLE_GAP) is
recorded as a suspect jump instead: it counts as no loss and does not move the stream's highest
number, so a forged seq of 2**62 neither reports 4.6e18 missing messages nor hides the device's
real numbers behind it. Callers hold the stream's row lock for the whole batch (SELECT ... FOR UPDATE
on PostgreSQL, the write lock on SQLite).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterable

from .database import Dialect, Transaction

# An agent drops telemetry beyond 50 000 queued messages and numbers every message it keeps, so
# a real gap is far below this; a larger one is a forged or corrupt number.
MAX_PLAUSIBLE_GAP = 1_000_000

log = logging.getLogger(__name__)


@dataclass
class SequenceReport:
    new_gaps: int = 0
    missing: int = 0  # sequence numbers in the new gaps
    filled: int = 0  # late messages that closed (part of) a gap
    suspect: int = 0  # numbers too far ahead to be loss (see MAX_PLAUSIBLE_GAP)


def track(tx: Transaction, dialect: Dialect, device_id: str, kind: str, seqs: Iterable[int], now: float) -> SequenceReport:
    """Account for newly stored messages of one stream, `seqs` in ascending order."""
    ordered = list(seqs)
    report = SequenceReport()
    if not ordered:
        return report
    tx.execute(
        "INSERT INTO streams (device_id, kind, max_seq) VALUES (?, ?, ?) ON CONFLICT (device_id, kind) DO NOTHING",
        (device_id, kind, ordered[0] - 1),
    )
    row = tx.one(f"SELECT max_seq FROM streams WHERE device_id = ? AND kind = ?{dialect.for_update}", (device_id, kind))
    max_seq = start = int(row["max_seq"])
    for seq in ordered:
        if seq - max_seq - 1 > MAX_PLAUSIBLE_GAP:
            tx.execute(
                "INSERT INTO gaps (device_id, kind, first_missing_seq, last_missing_seq, detected_at, suspect) "
                "VALUES (?, ?, ?, ?, ?, 1)",
                (device_id, kind, max_seq + 1, seq - 1, now),
            )
            report.suspect += 1
            log.warning("%s %s seq %d jumps %d past %d: counted as a suspect jump, not as loss",
                        device_id, kind, seq, seq - max_seq - 1, max_seq)
            continue
        if seq > max_seq + 1:
            tx.execute(
                "INSERT INTO gaps (device_id, kind, first_missing_seq, last_missing_seq, detected_at) VALUES (?, ?, ?, ?, ?)",
                (device_id, kind, max_seq + 1, seq - 1, now),
            )
            report.new_gaps += 1
            report.missing += seq - 1 - max_seq
        if seq > max_seq:
            max_seq = seq
        elif seq < max_seq and _fill(tx, dialect, device_id, kind, seq, now):
            report.filled += 1
    if max_seq != start:
        tx.execute("UPDATE streams SET max_seq = ? WHERE device_id = ? AND kind = ?", (max_seq, device_id, kind))
    return report


def _fill(tx: Transaction, dialect: Dialect, device_id: str, kind: str, seq: int, now: float) -> bool:
    gap = tx.one(
        "SELECT id, first_missing_seq, last_missing_seq, detected_at FROM gaps WHERE device_id = ? AND kind = ? "
        f"AND filled_at IS NULL AND suspect = 0 AND first_missing_seq <= ? AND last_missing_seq >= ?{dialect.for_update}",
        (device_id, kind, seq, seq),
    )
    if gap is None:  # older than the baseline, or a number sent twice under different ids
        return False
    first, last = int(gap["first_missing_seq"]), int(gap["last_missing_seq"])
    tx.execute(
        "UPDATE gaps SET first_missing_seq = ?, last_missing_seq = ?, filled_at = ? WHERE id = ?",
        (seq, seq, now, gap["id"]),
    )
    still_missing = [(first, seq - 1), (seq + 1, last)]
    tx.executemany(
        "INSERT INTO gaps (device_id, kind, first_missing_seq, last_missing_seq, detected_at) VALUES (?, ?, ?, ?, ?)",
        [(device_id, kind, a, b, gap["detected_at"]) for a, b in still_missing if a <= b],
    )
    return True
