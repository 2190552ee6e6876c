"""SQLite: WAL, busy timeout, synchronous NORMAL (FULL on request), ``BEGIN IMMEDIATE`` for
writes so "read version, then insert" is atomic.

A SQLite file's connections are opened with the stdlib :mod:`sqlite3` module directly
(:func:`connect`), not through SQLAlchemy: importing SQLAlchemy costs more than a whole
``evstore append`` may take (about 230 ms against a 17 ms Python start), and the store runs its
SQL on the DB-API connection anyway.  The SQLAlchemy engine (:func:`make_engine`, for Alembic
and SQLAlchemy Core reads) opens the same file with the same settings, through the same
:func:`configure`.  In-memory and query-string URLs go through the engine only.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from itertools import chain
from typing import TYPE_CHECKING, Any

from eventstore.backends.base import Backend, recorder
from eventstore.config import sqlite_file
from eventstore.errors import EvstoreError

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

#: Seconds a connection waits for another's write lock before "database is locked".
BUSY_TIMEOUT = 30


def synchronous_mode(synchronous: str | None) -> str:
    """The ``PRAGMA synchronous`` value: ``synchronous``, else $EVSTORE_SQLITE_SYNCHRONOUS, else NORMAL."""
    sync = (synchronous or os.environ.get("EVSTORE_SQLITE_SYNCHRONOUS", "NORMAL")).upper()
    if sync not in ("OFF", "NORMAL", "FULL", "EXTRA"):
        from eventstore.errors import EvstoreError

        raise EvstoreError(f'synchronous must be NORMAL or FULL, got "{sync}".')
    return sync


def configure(conn: sqlite3.Connection, sync: str) -> None:
    """Every connection's settings, whoever opens it (the store or SQLAlchemy's pool)."""
    conn.isolation_level = None  # autocommit mode: we issue BEGIN ourselves
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT * 1000}")
    conn.execute(f"PRAGMA synchronous={sync}")
    conn.execute("PRAGMA foreign_keys=ON")


def database_file(url: str) -> str | None:
    """The file a ``sqlite:///PATH`` URL opens, as SQLAlchemy's pysqlite dialect resolves it
    (percent-decoded, made absolute, ``~`` not expanded); None for ``:memory:``, an empty path
    or a URL with a query string (those go through SQLAlchemy, which interprets them)."""
    scheme, sep, rest = url.partition(":///")
    if not sep or scheme not in ("sqlite", "sqlite+pysqlite") or not rest or "?" in rest or rest == ":memory:":
        return None
    from urllib.parse import unquote

    return os.path.abspath(unquote(rest))


class Connection(sqlite3.Connection):
    """A stdlib connection that is its own handle, as SQLAlchemy's pooled connection proxy is
    (``driver_connection``, ``close()``), so the store treats both alike."""

    @property
    def driver_connection(self) -> Connection:
        return self


def connect(path: str, sync: str) -> Connection:
    """A configured stdlib connection to the SQLite file ``path`` (its folder made if missing)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    # check_same_thread=False: a store closes every thread's connection from the closing thread.
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT, check_same_thread=False, isolation_level=None,
                           factory=Connection)
    try:
        configure(conn, sync)
    except BaseException:
        conn.close()
        raise
    return conn


def make_engine(url: str, *, synchronous: str | None = None) -> Engine:
    """The SQLAlchemy engine (SQLAlchemy's documented pysqlite recipe: our own ``BEGIN``)."""
    from sqlalchemy import create_engine, event

    sync = synchronous_mode(synchronous)
    path = sqlite_file(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"timeout": BUSY_TIMEOUT, "check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: sqlite3.Connection, _record: Any) -> None:
        configure(dbapi_conn, sync)

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN")

    return engine


class SQLiteBackend(Backend):
    name = "sqlite"
    p = "?"
    #: CPython's sqlite3 binds ``int``, ``float``, ``str`` and ``bytearray`` parameters directly
    #: but sends every ``bytes`` parameter through the adapter registry first (``need_adapt`` in
    #: Modules/_sqlite/cursor.c), about 0.3 us each; an event row has seven BLOBs.  SQLite stores
    #: both the same way and reads come back as ``bytes``.
    blob = bytearray
    #: Rows per multi-row ``INSERT ... VALUES (...), (...)``: one statement step for the chunk
    #: instead of a reset and rebind per row (measured: ~0.3 us less per event than
    #: ``executemany`` at 100 rows; 15 parameters a row stays far below SQLite's 32,766 limit).
    INSERT_CHUNK = 100
    driver_errors = (sqlite3.Error,)

    def __init__(self, url: str, *, synchronous: str | None = None, engine: Engine | None = None) -> None:
        super().__init__(url, synchronous=synchronous, engine=engine)
        self.sync = synchronous_mode(synchronous)
        self.file = database_file(url)
        self._multi_insert = self._multi(self.sql_insert_event)

    def _multi(self, insert: str) -> dict[int, str]:
        head, _, row = insert.partition(" VALUES ")
        return {n: f"{head} VALUES {', '.join([row] * n)}" for n in range(1, self.INSERT_CHUNK + 1)}

    def write_plain_digests(self) -> None:
        super().write_plain_digests()
        self._multi_insert = self._multi(self.sql_insert_event)

    #: quick_check reads every page and checks the b-trees (a damaged page of any table or index,
    #: as in tests/test_damaged_store.py) in O(N); integrity_check also matches every index
    #: against its table, O(N log N), which on a large store would outlast the chain check.
    storage_check_name = "SQLite PRAGMA quick_check"

    @recorder("checking the database file")
    def storage_check(self, cur: Any) -> list[str]:
        cur.execute("PRAGMA quick_check(20)")
        problems = [str(r[0]) for r in cur.fetchall()]
        return [] if problems == ["ok"] else problems

    def begin_read(self, raw: Any, snapshot: bool = False) -> bool:
        # Autocommit mode: each statement reads its own snapshot; a deferred BEGIN holds the first
        # one (WAL) until end_read.  Not inside a transaction the caller already holds.
        if snapshot and not raw.in_transaction:
            raw.execute("BEGIN")
            return True
        return False

    def end_read(self, raw: Any, began: bool = False) -> None:
        if began and raw.in_transaction:
            raw.execute("ROLLBACK")

    def insert_events(self, cur: Any, rows: list[tuple[Any, ...]], meanwhile: Callable[[], None] | None = None) -> None:
        if len(rows) == 1:
            cur.execute(self.sql_insert_event, rows[0])
        else:
            step, sql = self.INSERT_CHUNK, self._multi_insert
            for i in range(0, len(rows), step):
                chunk = rows[i:i + step]
                cur.execute(sql[len(chunk)], list(chain.from_iterable(chunk)))
        if meanwhile is not None:
            meanwhile()

    def make_engine(self) -> Engine:
        return make_engine(self.url, synchronous=self.synchronous)

    def connect(self) -> Any:
        if self.file is None:
            return super().connect()
        return connect(self.file, self.sync)

    def display_url(self) -> str:
        return self.url  # a SQLite URL holds no password

    def begin_write(self, raw: Any) -> None:
        raw.execute("BEGIN IMMEDIATE")

    def begin_plain_write(self, raw: Any) -> None:
        raw.execute("BEGIN IMMEDIATE")  # take the write lock up front: no upgrade from a stale read

    def commit(self, raw: Any) -> None:
        raw.execute("COMMIT")

    def rollback(self, raw: Any) -> None:
        if raw.in_transaction:
            raw.execute("ROLLBACK")

    def is_unique_violation(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.IntegrityError) and "UNIQUE" in str(exc)

    def scrub(self, raw: Any) -> list[str]:
        # secure_delete zeroes freed cells and pages; VACUUM rewrites the file from the live rows only;
        # the TRUNCATE checkpoint copies the WAL back and empties it (older frames held the old pages).
        if raw.in_transaction:
            raw.execute("ROLLBACK")
        raw.execute("PRAGMA secure_delete=ON")
        raw.execute("VACUUM")
        busy, _, _ = raw.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        done = ["VACUUM rewrote the database file with secure_delete on"]
        if busy:
            raise EvstoreError("The WAL could not be emptied: another process has the store open (a reader or "
                               "`evstore serve`); the erased bytes may remain in the -wal file until it is. "
                               "Stop it and run the command again.")
        done.append("the WAL was checkpointed and truncated")
        return done

    def insert_stream(self, cur: Any, stream_id: str, dialect: str | None, genesis: bytes, now: str) -> int:
        cur.execute(self.sql_insert_stream, (stream_id, dialect, genesis, now))
        return int(cur.lastrowid)
