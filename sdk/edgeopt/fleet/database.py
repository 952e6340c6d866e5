"""One database connection behind one small interface, for SQLite (default) and PostgreSQL.

SQL is written once with ``?`` placeholders and the column types of `Dialect.types`; the
PostgreSQL side rewrites the placeholders for psycopg. A URL says which one:

    sqlite:///relative/fleet.db     sqlite:////absolute/fleet.db     fleet.db (a bare path)
    postgresql://user@host:5432/dbname   (libpq URI; ?options=-csearch_path%3Dschema works)
"""
from __future__ import annotations

import re
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ContextManager, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from ..errors import UserError, require

SQLITE_BUSY_TIMEOUT_S = 30.0
POSTGRES_SCHEMES = ("postgresql", "postgres")
# A deadlock or serialization failure between collectors sharing a PostgreSQL database is
# retried this many times: the whole batch is replayed from the start.
RETRIES = 3


@dataclass(frozen=True)
class Dialect:
    name: str
    types: Mapping[str, str]
    for_update: str  # row-locking suffix for a SELECT inside a write transaction


SQLITE = Dialect(
    "sqlite",
    {"serial": "INTEGER PRIMARY KEY AUTOINCREMENT", "float": "REAL", "bigint": "INTEGER", "text": "TEXT"},
    for_update="",
)
POSTGRESQL = Dialect(
    "postgresql",
    {"serial": "BIGSERIAL PRIMARY KEY", "float": "DOUBLE PRECISION", "bigint": "BIGINT", "text": "TEXT"},
    for_update=" FOR UPDATE",
)


_SECRET_QUERY = re.compile(r"([?&](?:password|sslpassword)=)[^&#]*", re.IGNORECASE)


def redact_url(url: str) -> str:
    """A database URL with its passwords (user:PASSWORD@ and ?password=...) shown as ***."""
    return _SECRET_QUERY.sub(r"\1***", re.sub(r"(://[^:/@]+):[^@/]*@", r"\1:***@", url))


def scrub(text: str, url: str) -> str:
    """`text` (a driver's error, which may quote the connection string) without the URL's passwords."""
    from urllib.parse import parse_qsl, unquote, urlsplit

    try:
        parts = urlsplit(url)
        secrets = [parts.password or ""] + [v for k, v in parse_qsl(parts.query) if k.lower() in ("password", "sslpassword")]
    except ValueError:
        secrets = []
    text = text.replace(url, redact_url(url))
    for secret in sorted({s for found in secrets for s in (found, unquote(found)) if s}, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


class RetryableError(Exception):
    """A transaction lost a race with another writer; running it again is safe."""


class DataError(Exception):
    """The database refused a value (a number out of range, text it cannot hold); nothing was written."""


class Transaction:
    """Statements inside one open transaction; rows come back as dicts."""

    def __init__(self, cursor: Any, placeholder: str):
        self._cursor = cursor
        self._placeholder = placeholder

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one statement; returns the number of rows it changed."""
        self._cursor.execute(self._sql(sql), tuple(params))
        return self._cursor.rowcount

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            self._cursor.executemany(self._sql(sql), [tuple(r) for r in rows])

    def rows(self, sql: str, params: Sequence[Any] = ()) -> List[Dict[str, Any]]:
        self._cursor.execute(self._sql(sql), tuple(params))
        names = [d[0] for d in self._cursor.description]
        return [dict(zip(names, row)) for row in self._cursor.fetchall()]

    def one(self, sql: str, params: Sequence[Any] = ()) -> Optional[Dict[str, Any]]:
        found = self.rows(sql, params)
        return found[0] if found else None

    def _sql(self, sql: str) -> str:
        return sql if self._placeholder == "?" else sql.replace("?", self._placeholder)


class Database:
    """`transaction()` opens a transaction, or joins the one already open on this connection.

    `write=False` is for readers: on SQLite it takes no write lock, so views never hold up a
    collector (WAL gives the reader a consistent snapshot).
    """

    dialect: Dialect
    data_errors: Tuple[type, ...] = (OverflowError, UnicodeError)  # what the driver raises for such a value

    def __init__(self, url: str):
        self.url = url
        self._lock = threading.RLock()
        self._depth = 0  # transactions open on this connection, the outermost one included

    @property
    def display_url(self) -> str:
        """The URL without its password, for messages and logs."""
        return redact_url(self.url)

    @contextmanager
    def transaction(self, write: bool = True) -> Iterator[Transaction]:
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield self._joined()
                finally:
                    self._depth -= 1
                return
            self._depth = 1
            try:
                with self._outermost(write) as tx:
                    yield tx
            finally:
                self._depth = 0

    def _joined(self) -> Transaction:
        """Statements for a transaction nested in the one already open."""
        raise NotImplementedError

    def _outermost(self, write: bool) -> ContextManager[Transaction]:
        """Begin a transaction; commit it when the block ends, roll it back when the block raises."""
        raise NotImplementedError

    def run(self, work, retries: int = RETRIES):
        """`work(tx)` in a transaction, run again from the start when it lost a race.

        Raises DataError when the database refused a value of it.
        """
        for attempt in range(retries + 1):
            try:
                with self.transaction() as tx:
                    return work(tx)
            except self.data_errors as exc:
                raise DataError(f"{type(exc).__name__}: {exc}") from exc
            except RetryableError:
                if attempt == retries:
                    raise
                time.sleep(0.05 * (attempt + 1))

    def close(self) -> None:
        raise NotImplementedError


class SqliteDatabase(Database):
    dialect = SQLITE
    data_errors = (OverflowError, UnicodeError, sqlite3.DataError)

    def __init__(self, url: str, path: Path, create: bool):
        super().__init__(url)
        self.path = path
        if not create and not path.is_file():
            raise UserError(f"no fleet database at {path}; start a collector with "
                            f"'edgeopt fleet serve --db {url}' first, or pass --db")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # isolation_level=None: transactions are begun and ended explicitly below.
            self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False,
                                       timeout=SQLITE_BUSY_TIMEOUT_S)
            self._db.execute("PRAGMA journal_mode=WAL")
            # FULL: a committed (and therefore acknowledged) message survives a power cut too.
            self._db.execute("PRAGMA synchronous=FULL")
        except OSError as exc:
            raise UserError(f"cannot create the fleet database directory {path.parent}: {exc.strerror}") from exc
        except sqlite3.DatabaseError as exc:
            raise UserError(f"cannot open the fleet database {path}: {exc}; "
                            "check that the file is an SQLite database and its directory is writable") from exc

    def _joined(self) -> Transaction:
        return Transaction(self._db.cursor(), "?")

    @contextmanager
    def _outermost(self, write: bool) -> Iterator[Transaction]:
        self._db.execute("BEGIN IMMEDIATE" if write else "BEGIN DEFERRED")
        try:
            yield Transaction(self._db.cursor(), "?")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            self._db.close()


class PostgresDatabase(Database):
    dialect = POSTGRESQL

    def __init__(self, url: str):
        super().__init__(url)
        self._psycopg = require("psycopg", "fleet", "PostgreSQL storage")
        self.data_errors = (OverflowError, UnicodeError, self._psycopg.DataError)
        self._conn = self._connect()

    def _connect(self) -> Any:
        try:
            return self._psycopg.connect(self.url, autocommit=True)
        except self._psycopg.Error as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise UserError(f"cannot connect to PostgreSQL at {self.display_url}: {scrub(reason, self.url)}") from None

    def _joined(self) -> Transaction:
        return Transaction(self._conn.cursor(), "%s")

    @contextmanager
    def _outermost(self, write: bool) -> Iterator[Transaction]:
        errors = self._psycopg.errors
        if self._conn.closed or self._conn.broken:
            self._conn = self._connect()
        try:
            with self._conn.transaction(), self._conn.cursor() as cursor:
                yield Transaction(cursor, "%s")
        except (errors.DeadlockDetected, errors.SerializationFailure) as exc:
            raise RetryableError(str(exc)) from exc

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def connect(url: str, create: bool = True) -> Database:
    """The database a URL names; `create=False` refuses to make a new SQLite file."""
    if not isinstance(url, str) or not url.strip():
        raise UserError("empty database URL; use sqlite:///PATH or postgresql://USER@HOST:PORT/DB")
    scheme, sep, rest = url.partition("://")
    if not sep:
        return SqliteDatabase(url, Path(url).expanduser(), create)
    scheme = scheme.lower()
    if scheme == "sqlite":
        if not rest.startswith("/") or rest == "/":
            raise UserError(f"SQLite URL '{url}' needs a path: sqlite:///relative.db or sqlite:////absolute.db")
        return SqliteDatabase(url, Path(rest[1:]).expanduser(), create)
    if scheme.split("+")[0] in POSTGRES_SCHEMES:
        return PostgresDatabase(url if "+" not in scheme else "postgresql://" + rest)
    raise UserError(f"unsupported database URL scheme '{scheme}'; use sqlite:///PATH or postgresql://USER@HOST:PORT/DB")
