"""The fleet database: the write path and the queries over one connection.

    from edgeopt.fleet.store import open_store
    store = open_store("sqlite:///fleet.db")          # or postgresql://user@host:5432/db
    outcome = store.ingest(topic, payload)            # committed before it returns
    store.devices(); store.results(model="resnet18"); store.telemetry(device="rpi-01", limit=100)

The writing is in `writer.FleetWriter`, the reading in `queries.FleetQueries`.
"""
from __future__ import annotations

import os
from typing import Any, Optional, Sequence

from edgeopt_agent import wire

from .database import Database, connect
from .migrations import MIGRATIONS, Migration, migrate
from .queries import FleetQueries
from .writer import FleetWriter

DB_ENV = "EDGEOPT_FLEET_DB"
DEFAULT_DB_URL = "sqlite:///fleet.db"


def default_db_url() -> str:
    """$EDGEOPT_FLEET_DB, else fleet.db in the current directory."""
    return os.environ.get(DB_ENV) or DEFAULT_DB_URL


class FleetStore(FleetWriter, FleetQueries):
    """The writer and the queries over one database, which `close()` closes."""

    def __init__(self, db: Database, max_message_bytes: int = wire.MAX_MESSAGE_BYTES):
        FleetWriter.__init__(self, db, max_message_bytes)

    @property
    def url(self) -> str:
        return self.db.display_url

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "FleetStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def open_store(
    url: Optional[str] = None,
    create: bool = True,
    migrations: Sequence[Migration] = MIGRATIONS,
    max_message_bytes: int = wire.MAX_MESSAGE_BYTES,
) -> FleetStore:
    """Open (and create or migrate) the fleet database at `url` (default: `default_db_url()`).

    `create=False` is for readers: a missing SQLite file is a UserError, not a new empty database.
    """
    db = connect(url or default_db_url(), create=create)
    try:
        migrate(db, migrations)
    except BaseException:
        db.close()
        raise
    return FleetStore(db, max_message_bytes)
