"""PostgreSQL (psycopg 3): position allocation serialised by a transaction-scoped advisory
lock, so commit order equals position order and a ``position > n`` reader never skips an event
that commits late; server-side cursors for the streamed reads; the roles of ``evstore db roles``."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from eventstore.backends.base import Backend
from eventstore.errors import EvstoreError
from eventstore.records import RecordedIdentity, StreamState

_IDLE = 0  # psycopg.pq.TransactionStatus.IDLE (not imported: psycopg loads only with this backend)

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

_COPY_TYPES = ["int8", "int8", "int4", "varchar", "varchar", "int2", "bytea", "bytea", "varchar", "varchar",
               "bytea", "bytea", "bytea", "bytea", "bytea"]

#: Arbitrary constant naming evstore's append lock (pg_advisory_xact_lock key).
_CURSORS = itertools.count(1)
APPEND_LOCK_KEY = 0x65767374  # "evst"


def import_psycopg() -> Any:
    """``psycopg``, imported without the standard library's ``importlib.metadata`` where it can be.

    ``psycopg.version`` and its C implementation's ``psycopg_binary.version`` each ask
    ``importlib.metadata`` for their distribution's version: importing it (with ``email``,
    ``zipfile``, ``csv``, ``importlib.resources``) is about a sixth of the CPU of an ``evstore log``
    on PostgreSQL, for strings nothing on the way reads.  A version is also in the name of the
    distribution's ``.dist-info`` folder beside the package, so these two modules are made from
    there (``psycopg.__version__`` and ``psycopg_binary.__version__`` stay right); a package
    without exactly one such folder (another way of installing) imports its module as it would."""
    import sys

    if "psycopg" not in sys.modules:
        made = [name for name in ("psycopg", "psycopg_binary") if _version_module(sys.modules, name)]
        import psycopg

        for name in made:  # as the import system would have set them (it sets none for a module it finds made)
            package = sys.modules.get(name)
            if package is not None and not hasattr(package, "version"):
                package.version = sys.modules[f"{name}.version"]  # type: ignore[attr-defined]
    import psycopg

    return psycopg


def _version_module(modules: dict[str, Any], package: str) -> bool:
    """Put ``<package>.version`` in ``modules``, with the version its ``.dist-info`` folder names."""
    import os
    import types
    from importlib.util import find_spec

    if f"{package}.version" in modules:
        return False
    try:
        spec = find_spec(package)
    except (ImportError, ValueError):
        return False
    if spec is None or not spec.submodule_search_locations:
        return False
    folder = os.path.dirname(list(spec.submodule_search_locations)[0])
    prefix = package + "-"
    try:
        found = [n for n in os.listdir(folder) if n.startswith(prefix) and n.endswith(".dist-info")]
    except OSError:
        return False
    if len(found) != 1:  # none, or several installs: importlib.metadata decides
        return False
    module = types.ModuleType(f"{package}.version", f"{package} distribution version (from {found[0]}).")
    module.__version__ = found[0][len(prefix):-len(".dist-info")]  # type: ignore[attr-defined]
    modules[f"{package}.version"] = module
    return True


def _lock_ids(key: int) -> tuple[int, int]:
    """``pg_locks``' (classid, objid) of the bigint advisory lock ``key`` (its high and low 32 bits)."""
    unsigned = key & 0xFFFF_FFFF_FFFF_FFFF
    return unsigned >> 32, unsigned & 0xFFFF_FFFF


def make_engine(url: str) -> Engine:
    from sqlalchemy import create_engine

    if url.startswith("postgresql://") or url.startswith("postgres://"):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    # READ COMMITTED whatever the server's default_transaction_isolation: an append reads the
    # max position *after* taking the advisory lock, which needs each statement to see what committed before it
    # (under REPEATABLE READ the view would predate the lock and positions would clash).
    # use_native_hstore=False: no column is an hstore, and the dialect otherwise looks the type up in the
    # catalog on every new connection (a savepoint and a query: 0.5 ms of the server's ~7 a store opening).
    return create_engine(url, pool_size=10, max_overflow=20, isolation_level="READ COMMITTED",
                         use_native_hstore=False)


def conninfo(url: str, *, options: str | None = None) -> str:
    """The libpq URI of an evstore PostgreSQL URL (``postgresql+psycopg://`` as ``postgresql://``).
    libpq reads the same user, password, host, port and database, percent-decoded; the query is
    decoded as SQLAlchemy decodes it (``+`` is a space, as in the URL SQLAlchemy renders) and
    percent-encoded again, since libpq would keep a ``+``.  ``options``: server settings for the
    session (``-c name=value``), after the URL's own."""
    from urllib.parse import parse_qsl, quote, urlencode

    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("postgresql", "postgres", "postgresql+psycopg"):
        raise EvstoreError(f"Not a PostgreSQL URL for psycopg: {scheme}://...")
    base, _, query = rest.partition("?")
    pairs = parse_qsl(query, keep_blank_values=True) if query else []
    if options:
        given = [i for i, (key, _) in enumerate(pairs) if key == "options"]
        if given:
            pairs[given[-1]] = ("options", f"{pairs[given[-1]][1]} {options}")
        else:
            pairs.append(("options", options))
    if pairs:
        base += "?" + urlencode(pairs, quote_via=quote)
    return "postgresql://" + base


#: The backend's own connections default to READ COMMITTED, whatever the server's or role's default,
#: set in the startup packet (no round trip): their reads run in autocommit (begin_read), where each
#: statement takes the session's default level, not the one psycopg's BEGIN names.
_READ_COMMITTED_SESSION = "-c default_transaction_isolation=read\\ committed"


class _Direct:
    """A psycopg connection opened without SQLAlchemy, as a handle like the pool's proxy
    (``driver_connection``, ``close()``, ``invalidate()``).  ``close()`` rolls back and keeps the
    connection for the backend's next ``connect()`` (up to :attr:`PostgresBackend.IDLE` of them),
    as SQLAlchemy's pool would: a ``log`` checks a connection out and back seven times."""

    __slots__ = ("driver_connection", "_backend")

    def __init__(self, conn: Any, backend: PostgresBackend) -> None:
        self.driver_connection = conn
        self._backend = backend

    def close(self) -> None:
        self._backend._give_back(self.driver_connection)

    def invalidate(self) -> None:
        """Close without a rollback (the connection may be busy with an interrupted statement)."""
        self.driver_connection.close()


class PostgresBackend(Backend):
    name = "postgresql"
    p = "%s"
    has_roles = True

    #: Idle direct connections kept for the next ``connect()`` (the engine's pool_size).
    IDLE = 10

    def __init__(self, url: str, *, synchronous: str | None = None, engine: Engine | None = None) -> None:
        super().__init__(url, synchronous=synchronous, engine=engine)
        import threading
        import weakref

        psycopg = import_psycopg()
        self.driver_errors = (psycopg.Error,)
        self._idle: list[Any] = []
        self._idle_lock = threading.Lock()
        #: Connections whose session defaults to READ COMMITTED (the backend's own): reads in autocommit.
        self._read_committed: weakref.WeakSet[Any] = weakref.WeakSet()

    def make_engine(self) -> Engine:
        return make_engine(self.url)

    def connect(self) -> Any:
        """Until something needs the SQLAlchemy engine (Alembic, a projection's DDL, Core reads), a
        psycopg connection of its own, with the engine's settings (READ COMMITTED, not autocommit):
        importing SQLAlchemy and its dialect's first connect cost a ``log`` or ``replay`` process
        about 0.15 s of CPU, as much as SQLite's whole command.  Once the engine exists, its pool."""
        if self._engine is not None:
            return super().connect()
        with self._idle_lock:
            conn = self._idle.pop() if self._idle else None
        if conn is not None:
            return _Direct(conn, self)
        import psycopg

        # A failure to connect is psycopg's OperationalError, which the CLI reports as it reports
        # SQLAlchemy's (eventstore.cli._database_error).
        conn = psycopg.connect(conninfo(self.url, options=_READ_COMMITTED_SESSION), autocommit=False)
        conn.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
        self._read_committed.add(conn)
        return _Direct(conn, self)

    def _give_back(self, conn: Any) -> None:
        """Roll back ``conn`` and keep it idle (closed instead if it is broken or enough are kept)."""
        try:
            if conn.autocommit:  # a read ended without end_read (begin_read's autocommit)
                conn.autocommit = False
            conn.rollback()
        except Exception:  # the server went away, or the connection is unusable: drop it
            conn.close()
            return
        with self._idle_lock:
            if not conn.closed and len(self._idle) < self.IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def dispose(self) -> None:
        with self._idle_lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
        super().dispose()

    sql_contains = "position({p}::bytea in {col}) > 0"

    def scrub(self, raw: Any) -> list[str]:
        # VACUUM FULL writes new table files (and TOAST) from the live rows and drops the old ones;
        # plain VACUUM would leave the dead versions' bytes in pages it only marks free.
        # Every table of the store's schema: besides events, blobs and the replay cache, the projections'
        # tables (the search index, the runs index: rebuilt, their old rows only dead) and
        # source_versions (an erased version's old identity) keep dead rows that held erased content.
        # VACUUM FULL keeps the dead rows a running transaction may still read: a session that holds a
        # snapshot (a client killed mid-transaction whose backend has not noticed yet, a long report)
        # is waited for, two seconds, then named in a warning.
        import time

        raw.rollback()
        raw.autocommit = True
        try:
            with raw.cursor() as cur:
                cur.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY tablename")
                tables = [str(r[0]) for r in cur.fetchall()]
                deadline = time.monotonic() + 2
                while True:
                    cur.execute("SELECT pid, application_name FROM pg_stat_activity WHERE datname = current_database() "
                                "AND pid <> pg_backend_pid() AND backend_xmin IS NOT NULL")
                    holders = cur.fetchall()
                    if not holders or time.monotonic() > deadline:
                        break
                    time.sleep(0.1)
            for table in tables:
                raw.execute(f'VACUUM FULL "{table}"')  # a table name from the catalog (VACUUM binds none)
        finally:
            raw.autocommit = False
        done = []
        if holders:  # other sessions of the database (its other stores too) hold the dead rows back
            named = ", ".join(f"pid {pid} ({app or 'no application name'})" for pid, app in holders[:3])
            done.append(f"warning: {named} held a snapshot while VACUUM FULL ran; old rows such a snapshot may still "
                        "read were kept, so erased bytes may remain in the table files — run the command again "
                        "once it has ended")
        return [f"VACUUM FULL rewrote the store's {len(tables)} tables (events, blobs, the replay cache, the "
                "projections' tables; the old files were dropped)", *done]

    def execute_planned(self, cur: Any, sql: str, params: Sequence[Any]) -> None:
        # Not prepared: psycopg prepares a statement from its fifth run on, and PostgreSQL then plans it
        # once for any values (a generic plan) from statistics of when the table was small.  An append's
        # look-ups (its event ids, its stream) took 8x and 2x longer that way on a store filling up
        # (9.5 ms against 1.25 ms for 20 ids).
        cur.execute(sql, params, prepare=False)

    def begin_write(self, raw: Any) -> None:
        self.begin_plain_write(raw)
        raw.execute(f"SELECT pg_advisory_xact_lock({APPEND_LOCK_KEY})")

    def begin_plain_write(self, raw: Any) -> None:
        # A write inside a read block (begin_read's autocommit) is a transaction all the same (and so is
        # a server-side cursor: stream_cursor).
        if raw.autocommit and raw.info.transaction_status == _IDLE:
            raw.autocommit = False

    def begin_locked_append(self, raw: Any, cur: Any, stream_id: str | None) -> tuple[int, StreamState | None]:
        """BEGIN, the append lock and the last position (and the stream's row) sent together, one
        round trip instead of three: the server runs them in order, so the read's snapshot is taken
        once the lock is held."""
        self.begin_plain_write(raw)  # a connection left in autocommit by a read: a transaction all the same
        with raw.pipeline():
            raw.execute(f"SELECT pg_advisory_xact_lock({APPEND_LOCK_KEY})")
            if stream_id is None:
                cur.execute(self.sql_max_position)
            else:
                cur.execute(self.sql_max_position_and_stream, (stream_id,))
        row = cur.fetchone()
        return int(row[0]), None if stream_id is None or row[1] is None else StreamState(row[1], row[2], bytes(row[3]))

    def group_lookups(self, cur: Any, stream_ids: Sequence[str],
                      event_ids: Sequence[str]) -> tuple[dict[str, StreamState], list[RecordedIdentity]]:
        """Both reads in one round trip (a pipeline), each one statement whatever the count (arrays)."""
        conn = cur.connection
        with conn.cursor() as other:
            with conn.pipeline():
                # the base class's IN lists as one array parameter each
                cur.execute(self.sql_streams.replace("IN ({ids})", "= ANY(%s)"), (list(stream_ids),), prepare=False)
                other.execute(self.sql_find_ids.replace("IN ({ids})", "= ANY(%s)"), (list(event_ids),), prepare=False)
            states = {r[0]: StreamState(r[1], r[2], bytes(r[3])) for r in cur.fetchall()}
            return states, [self._identity(r) for r in other.fetchall()]

    # Session-level advisory locks (eventstore.locks): held until unlocked or until the session ends,
    # so a holder killed (or its connection cut) frees it for the next process at once.  The bigint
    # keys are hashes of names, never APPEND_LOCK_KEY (tests/test_team_locks.py checks).
    has_session_locks = True

    def try_session_lock(self, raw: Any, key: int, label: str) -> bool:
        with raw.cursor() as cur:
            # Shown in pg_stat_activity: who holds the lock, to those who find it taken.
            cur.execute("SELECT set_config('application_name', %s, false)", (label[:63],))
            cur.execute("SELECT pg_try_advisory_lock(%s)", (key,))
            taken = bool(cur.fetchone()[0])
        raw.commit()  # a session lock outlives the transaction: the connection waits idle, not in one
        return taken

    def holds_session_lock(self, raw: Any, key: int) -> bool:
        classid, objid = _lock_ids(key)
        with raw.cursor() as cur:
            cur.execute("SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted "
                        "AND pid = pg_backend_pid() AND classid = %s AND objid = %s AND objsubid = 1)",
                        (classid, objid))
            held = bool(cur.fetchone()[0])
        raw.commit()
        return held

    def release_session_lock(self, raw: Any, key: int) -> None:
        with raw.cursor() as cur:
            cur.execute("SELECT pg_advisory_unlock(%s)", (key,))
            cur.execute("SELECT set_config('application_name', '', false)")
        raw.commit()

    def session_lock_holder(self, raw: Any, key: int) -> str | None:
        classid, objid = _lock_ids(key)
        with raw.cursor() as cur:
            cur.execute(
                "SELECT l.pid, a.application_name, host(a.client_addr) FROM pg_locks l "
                "LEFT JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE l.locktype = 'advisory' AND l.granted AND l.classid = %s AND l.objid = %s "
                "AND l.objsubid = 1 AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                (classid, objid))
            row = cur.fetchone()
        raw.rollback()
        if row is None:
            return None
        pid, name, addr = row
        where = f"PostgreSQL session {pid}" + (f" from {addr}" if addr else "")
        return f"{name} ({where})" if name else where

    def stream_cursor(self, conn: Any) -> Any:
        # A server-side cursor: psycopg's client-side one would hold the whole result in memory.  Named
        # apart: verify reads two at once in one transaction (the log, and the source rows beside it).
        # It lives in a transaction: a read begun in autocommit (begin_read) becomes one here.
        self.begin_plain_write(conn)
        return conn.cursor(name=f"evstore_streamed_read_{next(_CURSORS)}")

    def in_transaction(self, raw: Any) -> bool:
        return bool(raw.info.transaction_status != _IDLE)

    def begin_read(self, raw: Any, snapshot: bool = False) -> bool:
        # READ COMMITTED (the engine's level) takes a new snapshot per statement; REPEATABLE READ
        # one for the transaction (the first statement after the implicit BEGIN sets it).  A read
        # that needs no snapshot runs its statements in autocommit, which gives each statement its
        # own snapshot just as READ COMMITTED does, without a BEGIN and a ROLLBACK, each a round trip
        # to the server (two thirds of a `log`'s), around each; end_read turns autocommit off again.
        if raw.info.transaction_status == _IDLE:
            if snapshot:
                raw.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            elif raw in self._read_committed:  # (the engine's connections: BEGIN ISOLATION LEVEL READ COMMITTED)
                raw.autocommit = True
        return False  # end_read always ends it

    def end_read(self, raw: Any, began: bool = False) -> None:
        if raw.autocommit:  # begun in autocommit (and still so): no transaction to end
            raw.autocommit = False
        else:
            raw.rollback()

    #: From this many rows per append, COPY beats executemany (measured ~2x at 1,000 rows).
    COPY_FROM = 50

    def insert_events(self, cur: Any, rows: list[tuple[Any, ...]], meanwhile: Callable[[], None] | None = None) -> None:
        if len(rows) < self.COPY_FROM:
            super().insert_events(cur, rows, meanwhile)
            return
        with cur.copy(f"COPY events ({self.event_columns}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(_COPY_TYPES[:len(rows[0])])  # binary COPY: no text escaping of the bytea columns
            for row in rows:
                copy.write_row(row)
            if meanwhile is not None:
                # All but the last buffer is sent and the server is still writing the rows (it finishes
                # tens of milliseconds after a 1,000-row COPY's last row is sent): the client's work
                # runs meanwhile, not after.  It must not use the connection (busy with the COPY).
                meanwhile()

    def insert_tree_nodes(self, cur: Any, nodes: list[tuple[int, int, bytes]]) -> None:
        """One statement of three arrays sent in binary, whatever the count: its text never changes, so
        psycopg parses it once and the server prepares it.  The multi-row VALUES of an append's ~67
        nodes (201 parameters) was parsed anew by psycopg at each append and its bytea escaped as text:
        1.1 ms of client CPU against 0.2 ms now (measured on a loaded machine)."""
        if nodes:
            levels, indexes, hashes = zip(*nodes, strict=True)
            cur.execute(self.sql_insert_tree_nodes, (list(levels), list(indexes), list(hashes)))

    sql_insert_tree_nodes = ("INSERT INTO tree_nodes (level, idx, hash) "
                             "SELECT * FROM unnest(%b::smallint[], %b::bigint[], %b::bytea[])")

    def end_append(self, cur: Any, nodes: list[tuple[int, int, bytes]], heads: list[tuple[int, int, bytes]]) -> None:
        """The tree's nodes and the streams' new heads in one statement (one round trip, however many
        streams a group of appends moved)."""
        if not nodes or not heads:
            super().end_append(cur, nodes, heads)
            return
        levels, indexes, hashes = zip(*nodes, strict=True)
        if len(heads) == 1:
            pk, version, head = heads[0]
            cur.execute(self.sql_end_append, (list(levels), list(indexes), list(hashes), version, head, pk))
            return
        pks, versions, head_hashes = zip(*heads, strict=True)
        cur.execute(self.sql_end_append_heads, (list(levels), list(indexes), list(hashes), list(pks), list(versions),
                                                list(head_hashes)))

    def move_stream_heads(self, cur: Any, heads: Iterable[tuple[int, int, bytes]]) -> None:
        heads = list(heads)
        if len(heads) < 2:
            super().move_stream_heads(cur, heads)
            return
        pks, versions, head_hashes = zip(*heads, strict=True)
        cur.execute(self.sql_move_heads, (list(pks), list(versions), list(head_hashes)))

    sql_end_append = (f"WITH nodes AS ({sql_insert_tree_nodes}) "
                      "UPDATE streams SET version = %s, head_hash = %s WHERE stream_pk = %s")
    sql_move_heads = ("UPDATE streams AS s SET version = h.version, head_hash = h.head_hash "
                      "FROM unnest(%b::bigint[], %b::integer[], %b::bytea[]) AS h(stream_pk, version, head_hash) "
                      "WHERE s.stream_pk = h.stream_pk")
    sql_end_append_heads = f"WITH nodes AS ({sql_insert_tree_nodes}) {sql_move_heads}"

    def is_unique_violation(self, exc: BaseException) -> bool:
        import psycopg

        return isinstance(exc, psycopg.errors.UniqueViolation)

    def is_permission_denied(self, exc: BaseException) -> bool:
        import psycopg

        return isinstance(exc, psycopg.errors.InsufficientPrivilege)

    def insert_stream(self, cur: Any, stream_id: str, dialect: str | None, genesis: bytes, now: str) -> int:
        cur.execute(self.sql_insert_stream + " RETURNING stream_pk", (stream_id, dialect, genesis, now))
        return int(cur.fetchone()[0])

    def create_roles(self, conn: Any, writer: str, reader: str, grants: dict[str, str]) -> list[str]:
        """Create (if absent) the two LOGIN roles on ``conn`` and grant ``writer`` ``grants`` (table ->
        rights) and ``reader`` SELECT on every table of the current schema, in one transaction."""
        from psycopg import sql

        done: list[str] = []
        with conn.transaction():
            schema = conn.execute("SELECT current_schema()").fetchone()[0]
            tables = {r[0] for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)).fetchall()}
            missing = sorted(set(grants) - tables)
            if missing:
                raise EvstoreError(f'Schema "{schema}" has no table {", ".join(missing)}; run `evstore init` first.')
            s = sql.Identifier(schema)
            for role in (writer, reader):
                r = sql.Identifier(role)
                if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
                    done.append(f"role {role} exists")
                else:
                    conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(r))
                    done.append(f"created role {role} (LOGIN, no password)")
                conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(s, r))
            w, rd = sql.Identifier(writer), sql.Identifier(reader)
            for table, rights in grants.items():
                conn.execute(sql.SQL("GRANT " + rights + " ON {}.{} TO {}").format(s, sql.Identifier(table), w))
            conn.execute(sql.SQL("GRANT USAGE ON ALL SEQUENCES IN SCHEMA {} TO {}").format(s, w))
            done.append(f"granted {writer}: " + "; ".join(f"{t} {r}" for t, r in grants.items())
                        + f"; sequences of {schema} USAGE")
            conn.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA {} TO {}").format(s, rd))
            # Tables created later by this role (projections) are readable too.
            conn.execute(sql.SQL("ALTER DEFAULT PRIVILEGES IN SCHEMA {} GRANT SELECT ON TABLES TO {}").format(s, rd))
            done.append(f"granted {reader}: SELECT on every table of {schema} (also tables created later)")
        return done
