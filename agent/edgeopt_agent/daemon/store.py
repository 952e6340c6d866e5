"""The agent's state on disk: one SQLite file in the data dir.

It holds the outbox (messages the collector has not confirmed yet), the inbox (jobs received but
not yet answered), the per-topic sequence counters and a few event counters, so that all of
them survive a crash, a power cut or a restart together. WAL with synchronous=FULL: a committed row is on the disk.
"""
from __future__ import annotations

import json
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Dict, Iterator, Optional

from ..errors import UserError

SCHEMA = """
CREATE TABLE IF NOT EXISTS sequences (
    stream TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    topic TEXT NOT NULL,
    payload BLOB NOT NULL,
    retain INTEGER NOT NULL,
    created REAL NOT NULL,
    message_id TEXT,
    size INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS outbox_kind ON outbox (kind, id);
CREATE TABLE IF NOT EXISTS inbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    digest TEXT NOT NULL UNIQUE,
    payload BLOB NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    done INTEGER NOT NULL DEFAULT 0,
    received REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS inbox_open ON inbox (done, id);
CREATE TABLE IF NOT EXISTS counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
"""
# Run after SCHEMA, once the columns added since the first release exist.
INDEXES = """
CREATE INDEX IF NOT EXISTS outbox_message ON outbox (message_id);
CREATE INDEX IF NOT EXISTS outbox_size ON outbox (size);
"""
STATE_FILE = "agent.db"
LOCK_FILE = "agent.lock"


def lock_data_dir(folder: Path) -> IO[str]:
    """Claim the data dir for this process (held while the returned file stays open).

    Two agents on one data dir would share a client id and knock each other off the broker.
    """
    import fcntl

    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle = open(folder / LOCK_FILE, "a")
    except OSError as exc:
        raise UserError(f"cannot use data dir {folder}: {exc.strerror}; pass a writable --data-dir") from exc
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise UserError(f"another edgeopt-agent is already running with data dir {folder}; "
                        "stop it, or give this one its own --data-dir") from None
    return handle


class Store:
    """One SQLite connection shared by the agent's threads; `transaction()` nests."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.RLock()
        self._depth = 0
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # isolation_level=None: transactions are begun and ended explicitly below.
            self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None, timeout=10)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(SCHEMA)
            self._upgrade()
            self._db.executescript(INDEXES)
        except OSError as exc:
            raise UserError(f"cannot create the agent state in {self.path.parent}: {exc.strerror}; "
                            "pass a writable --data-dir") from exc
        except sqlite3.OperationalError as exc:
            raise UserError(f"cannot open the agent state file {self.path}: {exc}; "
                            "check that --data-dir is writable") from exc
        except sqlite3.DatabaseError as exc:
            raise UserError(f"cannot open the agent state file {self.path}: {exc}; "
                            "move the file away to start with an empty state") from exc

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._depth == 0:
                self._db.execute("BEGIN IMMEDIATE")
            self._depth += 1
            try:
                yield self._db
            except BaseException:
                self._depth -= 1
                if self._depth == 0:
                    self._db.execute("ROLLBACK")
                raise
            self._depth -= 1
            if self._depth == 0:
                self._db.execute("COMMIT")

    def _upgrade(self) -> None:
        """Bring a state file of an older agent up to date (its queued messages keep their place)."""
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(outbox)")}
        if "message_id" in columns and "size" in columns:
            return
        with self.transaction() as db:
            if "message_id" not in columns:
                db.execute("ALTER TABLE outbox ADD COLUMN message_id TEXT")
            if "size" not in columns:
                db.execute("ALTER TABLE outbox ADD COLUMN size INTEGER NOT NULL DEFAULT 0")
            for row_id, payload in db.execute("SELECT id, payload FROM outbox").fetchall():
                db.execute("UPDATE outbox SET message_id = ?, size = ? WHERE id = ?",
                           (_message_id(bytes(payload)), len(payload), row_id))

    def next_seq(self, stream: str) -> int:
        """The next number of a persistent counter: 1, 2, 3, ... across restarts."""
        with self.transaction() as db:
            # INSERT OR IGNORE + UPDATE rather than an upsert: boards still ship SQLite < 3.24.
            db.execute("INSERT OR IGNORE INTO sequences (stream, value) VALUES (?, 0)", (stream,))
            db.execute("UPDATE sequences SET value = value + 1 WHERE stream = ?", (stream,))
            return db.execute("SELECT value FROM sequences WHERE stream = ?", (stream,)).fetchone()[0]

    def count(self, name: str, by: int = 1) -> None:
        """Add to a persistent event counter (e.g. messages dropped from a full outbox)."""
        with self.transaction() as db:
            db.execute("INSERT OR IGNORE INTO counters (name, value) VALUES (?, 0)", (name,))
            db.execute("UPDATE counters SET value = value + ? WHERE name = ?", (by, name))

    def counters(self, prefix: str = "") -> Dict[str, int]:
        """Event counters whose names start with `prefix`, without it."""
        with self.transaction() as db:
            rows = db.execute("SELECT name, value FROM counters WHERE substr(name, 1, ?) = ? ORDER BY name",
                              (len(prefix), prefix)).fetchall()
        return {name[len(prefix):]: value for name, value in rows}

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _message_id(payload: bytes) -> Optional[str]:
    try:
        found = json.loads(payload.decode("utf-8")).get("id")
    except (UnicodeDecodeError, ValueError, AttributeError):
        return None
    return found if isinstance(found, str) else None
