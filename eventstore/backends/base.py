"""The recorder: every statement evstore runs against the log's tables (``events``, ``streams``,
``projection_checkpoints``, ``replay_cache``, ``store_identity``, ``blobs``, ``source_versions``), as typed
methods on a backend.

A method takes the DB-API cursor of the caller's transaction (the streamed reads open a
streaming cursor on its connection), so a projection's rows and its checkpoint still commit together, and it
returns Structs (:mod:`eventstore.records`), never row tuples.  A driver error raised inside one
is translated into evstore's error tree (:meth:`Backend.translate`): ``StorageFull`` for a full
disk, ``DatabaseError`` naming what was being done otherwise.  The append path's methods
(``begin_append``, ``insert_stream``, ``insert_events``, ``find_event_ids``, ``move_stream_heads``,
``end_append``)
are left untranslated: ``EventStore``'s write transaction tells a clash, a refused role and a full
disk apart from the driver's own error.

Nothing outside ``eventstore/backends`` (and the migrations) writes SQL against those tables;
``tests/test_sql_boundary.py`` fails if a module does.

Each backend adds how to begin a write transaction that serialises position allocation and
how to recognise a constraint clash.

A backend is built from the URL alone; its SQLAlchemy engine is made on first use
(:attr:`Backend.engine`: Alembic, SQLAlchemy Core reads, PostgreSQL's pool), and
:meth:`Backend.connect` hands out DB-API connections (a SQLite file's from the stdlib ``sqlite3``
module), so a SQLite command that only appends or reads never imports SQLAlchemy."""

from __future__ import annotations

import abc
import functools
import itertools
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

from eventstore.errors import (
    DatabaseError,
    EvstoreError,
    StorageFull,
    StoreDamaged,
    damaged_message,
    is_damaged,
    is_disk_full,
)
from eventstore.records import (
    CachedState,
    CacheEntry,
    CheckpointNote,
    EventPayload,
    FactEvent,
    LeafEvent,
    OrderEntry,
    ProjectionCheckpoint,
    RecordedEvent,
    RecordedIdentity,
    StoredBlob,
    StreamHead,
    StreamState,
    StreamSummary,
)

F = TypeVar("F", bound=Callable[..., Any])

#: Rows fetched per round trip by the streamed reads (verify, a seal's pass over the log).
STREAM_BATCH = 5000


def where(conditions: Sequence[str]) -> str:
    """``" WHERE c1 AND c2"`` of the SQL ``conditions``, ``""`` without any."""
    return f" WHERE {' AND '.join(conditions)}" if conditions else ""


def conjunction(*conditions: tuple[str, Sequence[Any]] | None) -> tuple[str, list[Any]]:
    """:func:`where` of the conditions given (``(sql, its parameters)``; None: none) and their parameters."""
    given = [c for c in conditions if c is not None]
    return where([sql for sql, _ in given]), [v for _, vs in given for v in vs]


def recorder(what: str) -> Callable[[F], F]:
    """Translate a driver error raised by the decorated recorder method into evstore's error tree;
    ``what`` (e.g. ``"reading a projection checkpoint"``) says in the message what was being done."""

    def wrap(method: F) -> F:
        @functools.wraps(method)
        def translated(self: Backend, *args: Any, **kwargs: Any) -> Any:
            try:
                return method(self, *args, **kwargs)
            except self.driver_errors as exc:
                raise self.translate(exc, what) from exc

        return translated  # type: ignore[return-value]

    return wrap

#: The columns an append writes, in the order of the rows ``_Transaction.add`` builds.
EVENT_COLUMNS = ("position, stream_pk, version, event_id, type, schema_version, data, meta, "
                 "occurred_at, recorded_at, data_sha256, meta_sha256, prev_hash, hash, salt")
#: The columns of ``events`` before revision 0010 (no ``salt``): what a store opened with
#: ``plain_digests`` writes (a database at an older revision, its digests plain SHA-256).
PLAIN_EVENT_COLUMNS = EVENT_COLUMNS.removesuffix(", salt")


class Backend(abc.ABC):
    name = ""
    p = "?"  # DBAPI paramstyle placeholder

    def __init__(self, url: str, *, synchronous: str | None = None, engine: Engine | None = None) -> None:
        self.url = url
        self.synchronous = synchronous
        self._engine = engine
        p = self.p
        self.event_columns = EVENT_COLUMNS
        self.sql_insert_event = f"INSERT INTO events ({EVENT_COLUMNS}) VALUES ({', '.join([p] * 15)})"
        self.sql_stream = f"SELECT stream_pk, version, head_hash FROM streams WHERE stream_id = {p}"
        self.sql_streams = "SELECT stream_id, stream_pk, version, head_hash FROM streams WHERE stream_id IN ({ids})"
        self.sql_insert_stream = (
            f"INSERT INTO streams (stream_id, dialect, version, head_hash, created_at) "
            f"VALUES ({p}, {p}, 0, {p}, {p})"
        )
        self.sql_update_stream = f"UPDATE streams SET version = {p}, head_hash = {p} WHERE stream_pk = {p}"
        self.sql_max_position = "SELECT COALESCE(MAX(position), 0) FROM events"
        self.sql_max_position_and_stream = (
            "SELECT (SELECT COALESCE(MAX(position), 0) FROM events), s.stream_pk, s.version, s.head_hash "
            f"FROM (SELECT 1 AS one) x LEFT JOIN streams s ON s.stream_id = {p}"
        )
        # A cache row takes the position and hash of the event at its version from the log itself.
        self.sql_insert_cache = (
            "INSERT INTO replay_cache (stream_pk, name, version, position, event_hash, state, state_sha256, "
            f"created_at) SELECT {p}, {p}, version, position, hash, {p}, {p}, {p} FROM events "
            f"WHERE stream_pk = {p} AND version = {p} ON CONFLICT (stream_pk, name, version) DO NOTHING"
        )
        self.sql_stream_head = f"SELECT stream_pk, version, dialect FROM streams WHERE stream_id = {p}"
        self.sql_read_payloads = (
            "SELECT position, version, type, schema_version, data, occurred_at, recorded_at FROM events "
            f"WHERE stream_pk = {p} AND version > {p} AND version <= {p} ORDER BY version"
        )
        # The newest cache row at or below a version, with the hash the log has at its version
        # (replay_cache.usable decides whether the row agrees with the log).
        self.sql_latest_cache = (
            "SELECT c.version, c.state, c.state_sha256, c.event_hash, e.hash FROM replay_cache c "
            "LEFT JOIN events e ON e.stream_pk = c.stream_pk AND e.version = c.version "
            f"WHERE c.stream_pk = {p} AND c.name = {p} AND c.version <= {p} ORDER BY c.version DESC LIMIT 1"
        )
        # A projection's folded document of a stream (migration 0013): the row, with the log's hash at its version.
        self.sql_latest_projection_state = (
            "SELECT c.version, c.state, c.state_sha256, c.event_hash, e.hash FROM projection_states c "
            "LEFT JOIN events e ON e.stream_pk = c.stream_pk AND e.version = c.version "
            f"WHERE c.stream_pk = {p} AND c.name = {p} AND c.version <= {p}"
        )
        # Written for a stream none of whose events is erased: a process whose memory still holds a
        # document folded before an erasure must not store its content again (an erasure deletes the rows).
        # ("WHERE ... ON CONFLICT" after a SELECT: SQLite's parser needs the WHERE.)
        self.sql_save_projection_state = (
            "INSERT INTO projection_states (stream_pk, name, version, event_hash, state, state_sha256) "
            f"SELECT s.stream_pk, {p}, {p}, {p}, {p}, {p} FROM streams s WHERE s.stream_id = {p} "
            "AND NOT EXISTS (SELECT 1 FROM erasures x JOIN events e ON e.position = x.position "
            "WHERE e.stream_pk = s.stream_pk) "
            "ON CONFLICT (stream_pk, name) DO UPDATE SET version = excluded.version, "
            "event_hash = excluded.event_hash, state = excluded.state, state_sha256 = excluded.state_sha256"
        )
        sel = ("SELECT e.position, s.stream_id, e.version, e.event_id, e.type, e.schema_version, "
               "e.data, e.meta, e.occurred_at, e.recorded_at, e.prev_hash, e.hash "
               "FROM events e JOIN streams s ON s.stream_pk = e.stream_pk ")
        self.sql_read_stream = (sel + f"WHERE e.stream_pk = {p} AND e.version > {p} AND e.version <= {p} "
                                "ORDER BY e.version")
        self.sql_read_all = sel + f"WHERE e.position > {p} ORDER BY e.position LIMIT {p}"
        self.sql_read_select = sel
        # The analytics facts' read: no event id, schema version or hashes (a third less to fetch).
        self.sql_read_facts = ("SELECT e.position, s.stream_id, e.version, e.type, e.data, e.meta, e.occurred_at, "
                               "e.recorded_at FROM events e JOIN streams s ON s.stream_pk = e.stream_pk "
                               f"WHERE e.position > {p} AND e.position <= {p} ORDER BY e.position LIMIT {p}")
        self.sql_read_all_types = sel + f"WHERE e.position > {p} AND e.type IN ({{types}}) ORDER BY e.position LIMIT {p}"
        self.sql_list_streams = "SELECT stream_id, dialect, version FROM streams ORDER BY stream_id"
        self.sql_store_id = "SELECT store_id FROM store_identity"
        self.sql_hash_at = f"SELECT hash FROM events WHERE position = {p}"
        self.sql_count_after = f"SELECT COUNT(*) FROM events WHERE position > {p}"
        self.sql_count_after_types = f"SELECT COUNT(*) FROM events WHERE position > {p} AND type IN ({{types}})"
        self.sql_read_checkpoint = (
            f"SELECT name, version, position, updated_at FROM projection_checkpoints WHERE name = {p}")
        # UPDATE ... RETURNING row-locks the checkpoint until commit: a second runner waits, then sees ours.
        self.sql_claim_checkpoint = (f"UPDATE projection_checkpoints SET updated_at = {p} WHERE name = {p} "
                                     "RETURNING name, version, position, updated_at")
        self.sql_advance_checkpoint = (
            f"UPDATE projection_checkpoints SET position = {p}, updated_at = {p} WHERE name = {p} AND version = {p} "
            f"AND position = {p}")
        self.sql_update_checkpoint = (f"UPDATE projection_checkpoints SET version = {p}, position = {p}, "
                                      f"updated_at = {p} WHERE name = {p}")
        self.sql_insert_checkpoint = ("INSERT INTO projection_checkpoints (name, version, position, updated_at) "
                                      f"VALUES ({p}, {p}, {p}, {p})")
        self.sql_chain = (
            "SELECT s.stream_id, s.version, s.head_hash, e.version, e.event_id, e.type, e.schema_version, e.data, "
            "e.meta, e.occurred_at, e.recorded_at, e.data_sha256, e.meta_sha256, e.prev_hash, e.hash, e.position, "
            "e.salt FROM streams s LEFT JOIN events e ON e.stream_pk = s.stream_pk {where} ORDER BY s.stream_id, e.version"
        )
        self.sql_cache_entries = (
            "SELECT c.stream_pk, s.stream_id, s.dialect, c.name, c.version, c.event_hash, c.state, "
            "c.state_sha256, e.hash FROM replay_cache c JOIN streams s ON s.stream_pk = c.stream_pk "
            "LEFT JOIN events e ON e.stream_pk = c.stream_pk AND e.version = c.version {where} "
            "ORDER BY s.stream_id, c.name, c.version"
        )
        self.sql_order = ("SELECT e.position, s.stream_id, e.version, e.hash FROM events e "
                          f"JOIN streams s ON s.stream_pk = e.stream_pk WHERE e.position <= {p} ORDER BY e.position")
        self.sql_stream_ids = "SELECT stream_id FROM streams ORDER BY stream_id"
        # Content-addressed blobs (migration 0005): written once, whoever writes them first.
        self.sql_insert_blob = (f"INSERT INTO blobs (sha256, size, data, created_at) VALUES ({p}, {p}, {p}, {p}) "
                                "ON CONFLICT (sha256) DO NOTHING")
        self.sql_blobs_present = "SELECT sha256 FROM blobs WHERE sha256 IN ({ids})"
        self.sql_read_blob = f"SELECT size, data FROM blobs WHERE sha256 = {p}"
        self.sql_blobs = "SELECT sha256, size, data FROM blobs {where} ORDER BY sha256"
        # The Merkle tree (migration 0007, eventstore/tree.py): leaf i is the event at position i + 1.
        self.sql_leaf_data = f"SELECT hash FROM events WHERE position > {p} AND position <= {p} ORDER BY position"
        self.sql_tree_nodes = (f"SELECT hash FROM tree_nodes WHERE level = {p} AND idx >= {p} AND idx < {p} "
                               "ORDER BY idx")
        self.sql_leaves = f"SELECT position, hash FROM events WHERE position <= {p} ORDER BY position"
        self.sql_all_tree_nodes = "SELECT level, idx, hash FROM tree_nodes ORDER BY level, idx"
        self.sql_level_nodes = f"SELECT idx, hash FROM tree_nodes WHERE level = {p} ORDER BY idx"
        self.sql_first_level = "SELECT MIN(level) FROM tree_nodes"
        self.sql_next_level = f"SELECT MIN(level) FROM tree_nodes WHERE level > {p}"
        self.sql_insert_checkpoint_note = (
            f"INSERT INTO tree_checkpoints (origin, tree_size, root_hash, note, created_at) VALUES ({p}, {p}, {p}, "
            f"{p}, {p})")
        self.sql_checkpoint_notes = ("SELECT checkpoint_pk, origin, tree_size, root_hash, note, created_at "
                                     "FROM tree_checkpoints {where} ORDER BY checkpoint_pk DESC LIMIT {limit}")
        self.sql_event_at = ("SELECT e.position, s.stream_id, e.version, e.event_id, e.hash FROM events e "
                             f"JOIN streams s ON s.stream_pk = e.stream_pk WHERE e.position = {p}")
        self.sql_event_by_version = ("SELECT e.position, s.stream_id, e.version, e.event_id, e.hash FROM events e "
                                     f"JOIN streams s ON s.stream_pk = e.stream_pk WHERE s.stream_id = {p} "
                                     f"AND e.version = {p}")
        self.sql_event_by_id = ("SELECT e.position, s.stream_id, e.version, e.event_id, e.hash FROM events e "
                                f"JOIN streams s ON s.stream_pk = e.stream_pk WHERE e.event_id = {p}")
        # Capture-once (migration 0006): the source versions streams recorded, by the primary key's prefix.
        self.sql_insert_source = f"INSERT INTO source_versions (stream_pk, version, source_id) VALUES ({p}, {p}, {p})"
        self.sql_recorded_sources = (
            "SELECT s.stream_id, v.version, v.source_id FROM source_versions v "
            "JOIN streams s ON s.stream_pk = v.stream_pk WHERE s.stream_id IN ({ids}) ORDER BY v.stream_pk, v.version"
        )
        self.sql_source_rows = (
            "SELECT s.stream_id, v.version, v.source_id FROM source_versions v "
            "JOIN streams s ON s.stream_pk = v.stream_pk {where} ORDER BY s.stream_id, v.version"
        )
        self.sql_find_ids = (
            "SELECT e.event_id, s.stream_id, e.version, e.position, e.type, e.data_sha256, e.meta_sha256, "
            "e.occurred_at, e.schema_version, e.salt, length(e.data) FROM events e JOIN streams s ON s.stream_pk = e.stream_pk "
            "WHERE e.event_id IN ({ids})"
        )

    #: Whether appends write plain SHA-256 digests and no ``salt`` (:meth:`write_plain_digests`).
    plain_digests = False

    def write_plain_digests(self) -> None:
        """Append as evstore did before revision 0010: no ``salt`` column (a database at an older
        revision, opened with ``check_schema=False``), digests the plain SHA-256 of data and meta."""
        p = self.p
        self.plain_digests = True
        self.event_columns = PLAIN_EVENT_COLUMNS
        self.sql_insert_event = f"INSERT INTO events ({PLAIN_EVENT_COLUMNS}) VALUES ({', '.join([p] * 14)})"
        self.sql_find_ids = self.sql_find_ids.replace("e.salt", "NULL")
        self.sql_chain = self.sql_chain.replace("e.salt", "NULL")

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine for this URL, made (and SQLAlchemy imported) on first use."""
        if self._engine is None:
            self._engine = self.make_engine()
        return self._engine

    @abc.abstractmethod
    def make_engine(self) -> Engine:
        """A new SQLAlchemy engine for this backend's URL, with its settings."""

    def connect(self) -> Any:
        """A new connection handle: ``.driver_connection`` is the DB-API connection the SQL here
        runs on, ``.close()`` gives it back (by default a checkout of the engine's pool)."""
        return self.engine.raw_connection()

    def dispose(self) -> None:
        """Close the engine's pooled connections, if an engine was made."""
        if self._engine is not None:
            self._engine.dispose()

    def display_url(self) -> str:
        """The URL without its password (for messages)."""
        from eventstore.config import shown_url

        return shown_url(self.engine.url)

    def read_all_query(self, after: int, limit: int, types: Sequence[str] | None) -> tuple[str, tuple[Any, ...]]:
        """(sql, params) of up to ``limit`` events after position ``after`` (of ``types`` only, if given)."""
        if types:
            return self.sql_read_all_types.format(types=", ".join([self.p] * len(types))), (after, *types, limit)
        return self.sql_read_all, (after, limit)

    # -- the append path (run by EventStore's write transaction, which translates its failures) --

    def begin_append(self, cur: Any, stream_id: str | None) -> tuple[int, StreamState | None]:
        """The last position and (if ``stream_id`` is given) that stream's row, in one round trip;
        called once the append lock is held."""
        if stream_id is None:
            cur.execute(self.sql_max_position)
            return int(cur.fetchone()[0]), None
        cur.execute(self.sql_max_position_and_stream, (stream_id,))
        row = cur.fetchone()
        return int(row[0]), None if row[1] is None else StreamState(row[1], row[2], bytes(row[3]))

    def execute_planned(self, cur: Any, sql: str, params: Sequence[Any]) -> None:
        """``cur.execute`` planned for these values each time (PostgreSQL: see its override)."""
        cur.execute(sql, params)

    def begin_locked_append(self, raw: Any, cur: Any, stream_id: str | None) -> tuple[int, StreamState | None]:
        """:meth:`begin_write` then :meth:`begin_append` (PostgreSQL: in one round trip)."""
        self.begin_write(raw)
        return self.begin_append(cur, stream_id)

    def group_lookups(self, cur: Any, stream_ids: Sequence[str],
                      event_ids: Sequence[str]) -> tuple[dict[str, StreamState], list[RecordedIdentity]]:
        """:meth:`stream_states` and :meth:`find_event_ids` of a group of appends (PostgreSQL: in one
        round trip); raises the driver's errors untranslated."""
        return (self.stream_states(cur, stream_ids) if stream_ids else {},
                self.find_event_ids(cur, event_ids) if event_ids else [])

    @staticmethod
    def _identity(r: Sequence[Any]) -> RecordedIdentity:
        return RecordedIdentity(r[0], r[1], r[2], r[3], r[4], bytes(r[5]), bytes(r[6]), r[7], r[8],
                                None if r[9] is None else bytes(r[9]), int(r[10]) == 0)

    def find_event_ids(self, cur: Any, event_ids: Sequence[str]) -> list[RecordedIdentity]:
        """Where each of ``event_ids`` that is already recorded was recorded, and its digests."""
        return [self._identity(r) for r in self._rows_in(cur, self.sql_find_ids, event_ids)]

    def _rows_in(self, cur: Any, template: str, values: Sequence[str]) -> Iterator[Sequence[Any]]:
        """The rows of ``template`` (its ``{ids}``: an IN list) for ``values``, 500 bound values a
        statement: a group's ids stay within every SQLite's limit of bound values."""
        for i in range(0, len(values), 500):
            chunk = list(values[i:i + 500])
            self.execute_planned(cur, template.format(ids=", ".join([self.p] * len(chunk))), chunk)
            yield from cur.fetchall()

    def insert_source_versions(self, cur: Any, rows: list[tuple[int, int, str]]) -> None:
        """Record ``(stream_pk, version, meta.source.id)`` of the events an append writes."""
        if len(rows) == 1:
            cur.execute(self.sql_insert_source, rows[0])
        else:
            cur.executemany(self.sql_insert_source, rows)

    def move_stream_heads(self, cur: Any, heads: Iterable[tuple[int, int, bytes]]) -> None:
        """Set each ``(stream_pk, version, head_hash)`` as its stream's head."""
        for pk, version, head in heads:
            cur.execute(self.sql_update_stream, (version, head, pk))

    def end_append(self, cur: Any, nodes: list[tuple[int, int, bytes]], heads: list[tuple[int, int, bytes]]) -> None:
        """An append's last writes before its commit: the Merkle tree's new ``nodes`` (level, index,
        hash) and the streams' new ``heads`` (stream_pk, version, head_hash)."""
        self.insert_tree_nodes(cur, nodes)
        self.move_stream_heads(cur, heads)

    # -- errors ---------------------------------------------------------------------

    #: The driver's base exception classes (set by each backend).
    driver_errors: tuple[type[BaseException], ...] = ()

    def is_driver_error(self, exc: BaseException) -> bool:
        return isinstance(exc, self.driver_errors)

    def translate(self, exc: BaseException, what: str) -> EvstoreError:
        """The driver's ``exc``, raised while doing ``what``, as an evstore error."""
        from eventstore.config import sqlite_file

        reason = (str(exc).strip() or type(exc).__name__).splitlines()[0]
        path = sqlite_file(self.url)
        if is_disk_full(exc, path):
            return StorageFull(f"No space left while {what} ({reason}). The disk is full: free space and retry.")
        if is_damaged(exc):
            return StoreDamaged(damaged_message(path or "the database", reason))
        if self.is_permission_denied(exc):
            return DatabaseError(f"The database refused {what} ({reason}); this database role may not do it.")
        return DatabaseError(f"The database failed {what} ({reason}); check --url / EVSTORE_URL "
                             "and that `evstore init` ran.")

    # -- the log ----------------------------------------------------------------------

    @recorder("reading the last position")
    def max_position(self, cur: Any) -> int:
        """The position of the last committed event (0 for an empty store)."""
        cur.execute(self.sql_max_position)
        return int(cur.fetchone()[0])

    @recorder("reading a stream")
    def stream_state(self, cur: Any, stream_id: str) -> StreamState | None:
        self.execute_planned(cur, self.sql_stream, (stream_id,))
        row = cur.fetchone()
        return None if row is None else StreamState(row[0], row[1], bytes(row[2]))

    def stream_states(self, cur: Any, stream_ids: Sequence[str]) -> dict[str, StreamState]:
        """:meth:`stream_state` of each of ``stream_ids`` that exists, in one round trip per 500 (a
        group of appends looks its streams up together); raises the driver's errors untranslated."""
        return {row[0]: StreamState(row[1], row[2], bytes(row[3]))
                for row in self._rows_in(cur, self.sql_streams, stream_ids)}

    @recorder("reading a stream")
    def stream_head(self, cur: Any, stream_id: str) -> StreamHead | None:
        cur.execute(self.sql_stream_head, (stream_id,))
        row = cur.fetchone()
        return None if row is None else StreamHead(*row)

    @recorder("listing the streams")
    def list_streams(self, cur: Any) -> list[StreamSummary]:
        """Every stream, by stream id (the database's collation)."""
        cur.execute(self.sql_list_streams)
        return [StreamSummary(*r) for r in cur.fetchall()]

    @recorder("listing the streams")
    def streams_ending(self, cur: Any, name: str) -> list[str]:
        """The ids of the streams whose id ends in ``/name`` or ``:name`` (case and every character as given), by
        stream id: compared by the database over the ids, not in Python over every stream's row."""
        p, n = self.p, len(name)
        cur.execute(f"SELECT stream_id FROM streams WHERE length(stream_id) > {p} "
                    f"AND substr(stream_id, CAST(length(stream_id) - {p} AS INTEGER)) IN ({p}, {p}) ORDER BY stream_id",
                    (n, n, "/" + name, ":" + name))
        return [r[0] for r in cur.fetchall()]

    @recorder("reading an event's hash")
    def hash_at(self, cur: Any, position: int) -> bytes | None:
        """The hash of the event at ``position`` (None if there is none): one indexed row, one column."""
        cur.execute(self.sql_hash_at, (position,))
        row = cur.fetchone()
        return None if row is None else bytes(row[0])

    @recorder("reading the store's identity")
    def store_id(self, cur: Any) -> str:
        cur.execute(self.sql_store_id)
        return str(cur.fetchone()[0])

    @recorder("reading a stream's events")
    def read_stream(self, cur: Any, stream_pk: int, after_version: int, upto_version: int) -> list[RecordedEvent]:
        """Events of one stream with ``after_version < version <= upto_version``, by version."""
        cur.execute(self.sql_read_stream, (stream_pk, after_version, upto_version))
        return [RecordedEvent(*r) for r in cur.fetchall()]

    @recorder("reading a stream's events")
    def read_payloads(self, cur: Any, stream_pk: int, after_version: int, upto_version: int) -> list[EventPayload]:
        """:meth:`read_stream` without meta, ids or hashes (what a replay folds)."""
        cur.execute(self.sql_read_payloads, (stream_pk, after_version, upto_version))
        return [EventPayload(*r) for r in cur.fetchall()]

    @recorder("reading the log")
    def read_all(self, cur: Any, after_position: int, limit: int,
                 types: Sequence[str] | None = None) -> list[RecordedEvent]:
        """Up to ``limit`` events after ``after_position`` (of ``types`` only, if given), by position."""
        cur.execute(*self.read_all_query(after_position, limit, types))
        return [RecordedEvent(*r) for r in cur.fetchall()]

    @recorder("reading the log")
    def read_facts(self, cur: Any, after_position: int, upto_position: int, limit: int) -> list[FactEvent]:
        """:meth:`read_all` without event ids, schema versions or hashes (what the analytics facts read),
        up to ``upto_position``."""
        cur.execute(self.sql_read_facts, (after_position, upto_position, limit))
        return [FactEvent(*r) for r in cur.fetchall()]

    @recorder("reading events by position")
    def read_positions(self, cur: Any, positions: Sequence[int]) -> list[RecordedEvent]:
        """The events at ``positions`` (those that exist), by position: one query."""
        if not positions:
            return []
        cur.execute(self.sql_read_select + f"WHERE e.position IN ({', '.join([self.p] * len(positions))}) "
                    "ORDER BY e.position", tuple(positions))
        return [RecordedEvent(*r) for r in cur.fetchall()]

    @recorder("counting events")
    def count_events(self, cur: Any, after_position: int, types: Sequence[str] | None = None) -> int:
        """Events after ``after_position`` (of ``types`` only, if given)."""
        if types:
            cur.execute(self.sql_count_after_types.format(types=", ".join([self.p] * len(types))),
                        (after_position, *types))
        else:
            cur.execute(self.sql_count_after, (after_position,))
        return int(cur.fetchone()[0])

    # -- projection checkpoints ----------------------------------------------------------

    @recorder("reading a projection checkpoint")
    def read_checkpoint(self, cur: Any, name: str) -> ProjectionCheckpoint | None:
        cur.execute(self.sql_read_checkpoint, (name,))
        row = cur.fetchone()
        return None if row is None else ProjectionCheckpoint(row[0], int(row[1]), int(row[2]), str(row[3]))

    @recorder("writing a projection checkpoint")
    def advance_checkpoint(self, cur: Any, name: str, version: int, at: int, position: int, now: str) -> bool:
        """Move the checkpoint from ``at`` to ``position`` in one statement, if it is at ``at`` for
        ``version`` (an inline projection's common case: no gap, nothing to rebuild); False otherwise,
        with nothing changed."""
        cur.execute(self.sql_advance_checkpoint, (position, now, name, version, at))
        return bool(cur.rowcount == 1)

    @recorder("claiming a projection checkpoint")
    def claim_checkpoint(self, cur: Any, name: str, now: str) -> ProjectionCheckpoint | None:
        """The checkpoint, row-locked until the caller's transaction ends: a second runner waits,
        then sees what the first committed."""
        cur.execute(self.sql_claim_checkpoint, (now, name))
        row = cur.fetchone()
        return None if row is None else ProjectionCheckpoint(row[0], int(row[1]), int(row[2]), str(row[3]))

    @recorder("writing a projection checkpoint")
    def set_checkpoint(self, cur: Any, name: str, version: int, position: int, now: str) -> None:
        """Move (or create) the checkpoint, in the caller's transaction: the projection's rows and
        its checkpoint commit together or not at all."""
        cur.execute(self.sql_update_checkpoint, (version, position, now, name))
        if cur.rowcount == 0:
            cur.execute(self.sql_insert_checkpoint, (name, version, position, now))

    # -- the replay cache ---------------------------------------------------------------

    @recorder("reading the replay cache")
    def latest_cached_state(self, cur: Any, stream_pk: int, name: str, upto_version: int) -> CachedState | None:
        """The newest row named ``name`` at or below ``upto_version``, with the log's hash there."""
        cur.execute(self.sql_latest_cache, (stream_pk, name, upto_version))
        row = cur.fetchone()
        return None if row is None else CachedState(*row)

    @recorder("writing the replay cache")
    def insert_cached_state(self, cur: Any, stream_pk: int, name: str, version: int, state: bytes,
                            state_sha256: bytes, now: str) -> None:
        """Cache ``state`` at ``version``, bound to the hash and position of the event stored there
        (read in the same statement); a row already there for that version wins."""
        cur.execute(self.sql_insert_cache, (stream_pk, name, self.blob(state), self.blob(state_sha256), now,
                                            stream_pk, version))

    # -- projections' folded documents (projection_states) ----------------------------------

    @recorder("reading a projection's folded document")
    def latest_projection_state(self, cur: Any, stream_pk: int, name: str, upto_version: int) -> CachedState | None:
        """The stream's row named ``name`` if it is at or below ``upto_version``, with the log's hash
        there (:func:`eventstore.replay_cache.usable` decides whether it agrees with the log)."""
        cur.execute(self.sql_latest_projection_state, (stream_pk, name, upto_version))
        row = cur.fetchone()
        return None if row is None else CachedState(*row)

    @recorder("writing a projection's folded documents")
    def save_projection_states(self, cur: Any, rows: Sequence[tuple[str, str, int, bytes, bytes, bytes]]) -> None:
        """Each ``(stream id, name, version, event hash, state, state SHA-256)`` as the stream's row
        named ``name`` (replacing the one there), unless an event of the stream is erased."""
        blob = self.blob
        cur.executemany(self.sql_save_projection_state,
                        [(name, version, blob(h), blob(state), blob(digest), sid)
                         for sid, name, version, h, state, digest in rows])

    @recorder("reading the replay cache")
    def cache_entries(self, cur: Any, stream_id: str | None = None, *, after: tuple[str, str, int] | None = None,
                      limit: int | None = None) -> list[CacheEntry]:
        """The replay-cache rows (of one stream, if given) by stream id, name and version: those after
        ``after`` (a row's stream id, name and version), at most ``limit`` of them (a page)."""
        p = self.p
        within, params = conjunction((f"s.stream_id = {p}", (stream_id,)) if stream_id is not None else None,
                                     (f"(s.stream_id, c.name, c.version) > ({p}, {p}, {p})", after)
                                     if after is not None else None)
        sql = self.sql_cache_entries.format(where=within)
        cur.execute(sql if limit is None else f"{sql} LIMIT {int(limit)}", params)
        return [CacheEntry(*r) for r in cur.fetchall()]

    # -- streamed passes over the whole log (verify, seals) ---------------------------------

    def stream_cursor(self, conn: Any) -> Any:
        """A cursor whose result is read in batches, not held whole (SQLite steps lazily anyway)."""
        return conn.cursor()

    def _streamed(self, cur: Any, sql: str, params: Sequence[Any], what: str) -> Iterator[Sequence[Any]]:
        """Rows of ``sql`` through a streaming cursor on ``cur``'s connection (same transaction); the
        rows of each batch are handed on in C (no generator step per row: verify reads every event)."""
        return itertools.chain.from_iterable(self._streamed_batches(cur, sql, params, what))

    def _streamed_batches(self, cur: Any, sql: str, params: Sequence[Any], what: str) -> Iterator[list[Any]]:
        """:meth:`_streamed`'s rows, a batch of up to :data:`STREAM_BATCH` at a time."""
        cur = self.stream_cursor(cur.connection)
        try:
            cur.execute(sql, params)
            while rows := cur.fetchmany(STREAM_BATCH):
                yield rows
        except self.driver_errors as exc:
            raise self.translate(exc, what) from exc
        finally:
            cur.close()

    def chain_rows(self, cur: Any, stream_id: str | None = None, after_position: int = 0) -> Iterator[Sequence[Any]]:
        """Every event with its stream's recorded head (one stream's, if given), by stream id and
        version, streamed as plain rows (``evstore verify``'s loop: no object per event); a stream
        without events gives one row whose event columns are NULL.  Columns: stream id, the head's
        version and hash, then the event's version, event id, type, schema version, data, meta,
        occurred at, recorded at, data and meta SHA-256, prev hash, hash, position and salt (None: plain digests).

        ``after_position``: only the events after it (``verify --since``), and no stream without one."""
        params: list[Any]
        if after_position:
            where, params = f"WHERE e.position > {self.p}", [after_position]
            if stream_id is not None:
                where, params = f"{where} AND s.stream_id = {self.p}", [after_position, stream_id]
            sql = self.sql_chain.replace("LEFT JOIN", "JOIN").format(where=where)
        elif stream_id is None:
            sql, params = self.sql_chain.format(where=""), []
        else:
            sql, params = self.sql_chain.format(where=f"WHERE s.stream_id = {self.p}"), [stream_id]
        return self._streamed(cur, sql, params, "reading the log")

    def order_entries(self, cur: Any, upto_position: int) -> Iterator[OrderEntry]:
        """(position, stream id, version, hash) of every event up to ``upto_position``, by position, streamed."""
        for r in self._streamed(cur, self.sql_order, (upto_position,), "reading the log"):
            yield OrderEntry(r[0], r[1], r[2], bytes(r[3]))

    @recorder("listing the streams")
    def stream_ids(self, cur: Any) -> list[str]:
        """Every stream id in the database's collation order (how v1 seals ordered their leaves)."""
        cur.execute(self.sql_stream_ids)
        return [r[0] for r in cur.fetchall()]

    #: What :meth:`storage_check` runs, in words (empty: this backend has none).
    storage_check_name = ""

    def storage_check(self, cur: Any) -> list[str]:
        """The database engine's own check of its files (:attr:`storage_check_name`): the problems
        it reports, empty if none (or if the backend has no such check)."""
        return []

    # -- source versions (migration 0006; written by the append path: insert_source_versions) -------

    @recorder("reading the recorded source versions")
    def recorded_sources(self, cur: Any, stream_ids: Sequence[str]) -> dict[str, list[tuple[int, str]]]:
        """``stream_id -> [(version, source id), ...]`` by version, for the streams that have any."""
        out: dict[str, list[tuple[int, str]]] = {}
        for i in range(0, len(stream_ids), 500):
            chunk = stream_ids[i:i + 500]
            cur.execute(self.sql_recorded_sources.format(ids=", ".join([self.p] * len(chunk))), list(chunk))
            for sid, version, ident in cur.fetchall():
                out.setdefault(sid, []).append((int(version), str(ident)))
        return out

    def source_rows(self, cur: Any, stream_id: str | None = None) -> Iterator[tuple[str, int, str]]:
        """Every ``(stream_id, version, source id)`` row (of one stream, if given), streamed (verify)."""
        where, params = ("", []) if stream_id is None else (f"WHERE s.stream_id = {self.p}", [stream_id])
        for r in self._streamed(cur, self.sql_source_rows.format(where=where), params, "reading the source versions"):
            yield str(r[0]), int(r[1]), str(r[2])

    # -- content-addressed blobs (migration 0005; written by the append path: insert_blobs) --------

    @recorder("reading a blob")
    def read_blob(self, cur: Any, sha256: bytes) -> StoredBlob | None:
        """The blob stored under the raw digest ``sha256`` (None: not stored), not checked."""
        cur.execute(self.sql_read_blob, (self.blob(sha256),))
        row = cur.fetchone()
        return None if row is None else StoredBlob(sha256, int(row[0]), bytes(row[1]))

    def stored_blobs(self, cur: Any, digests: Sequence[bytes] | None = None) -> Iterator[StoredBlob]:
        """Every stored blob (or those of ``digests`` that are stored) by digest, streamed
        (what ``evstore verify`` re-hashes)."""
        if digests is None:
            chunks: Iterable[Sequence[bytes] | None] = [None]
        else:
            chunks = [digests[i:i + 500] for i in range(0, len(digests), 500)]
        for chunk in chunks:
            if chunk is None:
                sql, params = self.sql_blobs.format(where=""), []
            elif not chunk:
                continue
            else:
                sql = self.sql_blobs.format(where=f"WHERE sha256 IN ({', '.join([self.p] * len(chunk))})")
                params = [self.blob(d) for d in chunk]
            for r in self._streamed(cur, sql, params, "reading the blobs"):
                yield StoredBlob(bytes(r[0]), int(r[1]), bytes(r[2]))

    # -- the Merkle tree (migration 0007; eventstore/tree.py) -------------------------------

    @recorder("reading the log's leaves")
    def leaf_data(self, cur: Any, start: int, end: int) -> list[bytes]:
        """``events.hash`` of leaves ``start <= i < end`` (positions ``start + 1 .. end``), in order."""
        cur.execute(self.sql_leaf_data, (start, end))
        return [bytes(r[0]) for r in cur.fetchall()]

    @recorder("reading the Merkle tree")
    def tree_nodes(self, cur: Any, level: int, start: int, end: int) -> list[bytes]:
        """The stored hashes of ``level``, indexes ``start <= j < end``, in order."""
        cur.execute(self.sql_tree_nodes, (level, start, end))
        return [bytes(r[0]) for r in cur.fetchall()]

    @recorder("reading the Merkle tree")
    def tree_ranges(self, cur: Any, node_ranges: Sequence[tuple[int, int, int]], leaf_ranges: Sequence[tuple[int, int]]
                    ) -> tuple[dict[tuple[int, int], bytes], dict[int, bytes]]:
        """Stored nodes of several ``(level, start, end)`` ranges and the leaves of several ``(start, end)``
        ranges, one statement each (a proof's reads: one round trip, not one a subtree)."""
        p = self.p
        nodes: dict[tuple[int, int], bytes] = {}
        leaves: dict[int, bytes] = {}
        for i in range(0, len(node_ranges), 200):
            chunk = node_ranges[i:i + 200]
            cur.execute("SELECT level, idx, hash FROM tree_nodes WHERE "
                        + " OR ".join([f"(level = {p} AND idx >= {p} AND idx < {p})"] * len(chunk)),
                        [v for r in chunk for v in r])
            nodes.update(((int(r[0]), int(r[1])), bytes(r[2])) for r in cur.fetchall())
        for i in range(0, len(leaf_ranges), 200):
            lchunk = leaf_ranges[i:i + 200]
            cur.execute("SELECT position, hash FROM events WHERE "
                        + " OR ".join([f"(position > {p} AND position <= {p})"] * len(lchunk)),
                        [v for r in lchunk for v in r])
            leaves.update((int(r[0]) - 1, bytes(r[1])) for r in cur.fetchall())
        return nodes, leaves

    def insert_tree_nodes(self, cur: Any, nodes: list[tuple[int, int, bytes]]) -> None:
        """Add ``(level, index, hash)`` nodes (the append path: left untranslated, as its other writes),
        as multi-row INSERTs of up to 100 rows: one statement, not one a row (psycopg's executemany of
        the ~67 nodes of a 1,000-event append cost a millisecond of client CPU)."""
        blob, p = self.blob, self.p
        for i in range(0, len(nodes), 100):
            chunk = nodes[i:i + 100]
            cur.execute(f"INSERT INTO tree_nodes (level, idx, hash) VALUES {', '.join([f'({p}, {p}, {p})'] * len(chunk))}",
                        [v for level, idx, h in chunk for v in (level, idx, blob(h))])

    def leaves(self, cur: Any, upto_position: int) -> Iterator[tuple[int, bytes]]:
        """(position, hash) of every event up to ``upto_position``, by position, streamed."""
        for r in self._streamed(cur, self.sql_leaves, (upto_position,), "reading the log's leaves"):
            yield int(r[0]), bytes(r[1])

    def leaf_batches(self, cur: Any, upto_position: int) -> Iterator[list[Any]]:
        """:meth:`leaves` as the driver gives them, a batch of rows at a time (verify's tree check)."""
        return self._streamed_batches(cur, self.sql_leaves, (upto_position,), "reading the log's leaves")

    def all_tree_nodes(self, cur: Any) -> Iterator[tuple[int, int, bytes]]:
        """Every stored tree node by level and index, streamed."""
        for r in self._streamed(cur, self.sql_all_tree_nodes, (), "reading the Merkle tree"):
            yield int(r[0]), int(r[1]), bytes(r[2])

    @recorder("reading the Merkle tree")
    def tree_levels(self, cur: Any) -> list[int]:
        """The levels that have stored nodes, ascending: one lookup in the key a level, not a scan."""
        levels: list[int] = []
        cur.execute(self.sql_first_level)
        while (row := cur.fetchone()) is not None and row[0] is not None:
            levels.append(int(row[0]))
            cur.execute(self.sql_next_level, (levels[-1],))
        return levels

    def level_nodes(self, cur: Any, level: int) -> Iterator[tuple[int, bytes]]:
        """The stored nodes ``(index, hash)`` of one level, by index, streamed (verify reads every level
        at once, each beside the others)."""
        for r in self._streamed(cur, self.sql_level_nodes, (level,), "reading the Merkle tree"):
            yield int(r[0]), bytes(r[1])

    @recorder("finding an event")
    def leaf_event(self, cur: Any, *, position: int | None = None, stream_id: str | None = None,
                   version: int | None = None, event_id: str | None = None) -> LeafEvent | None:
        """The event at ``position``, at ``stream_id`` / ``version``, or with ``event_id``."""
        if position is not None:
            cur.execute(self.sql_event_at, (position,))
        elif event_id is not None:
            cur.execute(self.sql_event_by_id, (event_id,))
        else:
            cur.execute(self.sql_event_by_version, (stream_id, version))
        row = cur.fetchone()
        return None if row is None else LeafEvent(int(row[0]), row[1], int(row[2]), row[3], bytes(row[4]))

    @recorder("recording a checkpoint")
    def insert_checkpoint_note(self, cur: Any, origin: str, tree_size: int, root_hash: bytes, note: str,
                               now: str) -> None:
        cur.execute(self.sql_insert_checkpoint_note, (origin, tree_size, self.blob(root_hash), note, now))

    @recorder("reading the recorded checkpoints")
    def checkpoint_notes(self, cur: Any, *, origin: str | None = None, tree_size: int | None = None,
                         limit: int = 100) -> list[CheckpointNote]:
        """The recorded checkpoints (of ``origin``, at ``tree_size``, if given), newest first."""
        within, params = conjunction((f"origin = {self.p}", (origin,)) if origin is not None else None,
                                     (f"tree_size = {self.p}", (tree_size,)) if tree_size is not None else None)
        cur.execute(self.sql_checkpoint_notes.format(where=within, limit=int(limit)), params)
        return [CheckpointNote(int(r[0]), r[1], int(r[2]), bytes(r[3]), r[4], r[5]) for r in cur.fetchall()]

    # -- named tokens of `evstore serve` (eventstore/tokens.py; migration 0008) ---------------

    TOKEN_COLUMNS = "name, scope, created_at, expires_at, revoked_at, last_used_at"

    @recorder("reading the API tokens")
    def token_by_digest(self, cur: Any, digest: bytes) -> tuple[Any, ...] | None:
        """The token whose secret has SHA-256 ``digest``: (name, scope, created, expires, revoked, last used)."""
        cur.execute(f"SELECT {self.TOKEN_COLUMNS} FROM api_tokens WHERE token_sha256 = {self.p}", (self.blob(digest),))
        row = cur.fetchone()
        return None if row is None else tuple(row)

    def tokens_by_digests(self, cur: Any, digests: list[bytes]) -> dict[bytes, tuple[Any, ...]]:
        """The tokens whose secrets have these SHA-256 digests (one round trip), by digest, as
        :meth:`token_by_digest` returns each."""
        if not digests:
            return {}
        marks = ", ".join([self.p] * len(digests))
        cur.execute(f"SELECT token_sha256, {self.TOKEN_COLUMNS} FROM api_tokens WHERE token_sha256 IN ({marks})",
                    [self.blob(d) for d in digests])
        return {bytes(row[0]): tuple(row[1:]) for row in cur.fetchall()}

    @recorder("reading the API tokens")
    def token_rows(self, cur: Any, name: str | None = None) -> list[tuple[Any, ...]]:
        """Every token (or the one named ``name``), by name."""
        if name is None:
            cur.execute(f"SELECT {self.TOKEN_COLUMNS} FROM api_tokens ORDER BY name")
        else:
            cur.execute(f"SELECT {self.TOKEN_COLUMNS} FROM api_tokens WHERE name = {self.p}", (name,))
        return [tuple(r) for r in cur.fetchall()]

    @recorder("counting the API tokens in force")
    def write_tokens_in_force(self, cur: Any, now: str) -> int:
        """How many tokens that may write (append, admin) are neither revoked nor expired at ``now``."""
        cur.execute(f"SELECT COUNT(*) FROM api_tokens WHERE scope IN ('append', 'admin') AND revoked_at IS NULL "
                    f"AND (expires_at IS NULL OR expires_at > {self.p})", (now,))
        return int(cur.fetchone()[0])

    @recorder("adding an API token")
    def insert_token(self, cur: Any, name: str, scope: str, digest: bytes, created: str, expires: str | None) -> None:
        p = self.p
        cur.execute(f"INSERT INTO api_tokens (name, scope, token_sha256, created_at, expires_at) "
                    f"VALUES ({p}, {p}, {p}, {p}, {p})", (name, scope, self.blob(digest), created, expires))

    @recorder("revoking an API token")
    def revoke_token(self, cur: Any, name: str, now: str) -> int:
        cur.execute(f"UPDATE api_tokens SET revoked_at = {self.p} WHERE name = {self.p} AND revoked_at IS NULL",
                    (now, name))
        return int(cur.rowcount)

    @recorder("deleting an API token")
    def delete_token(self, cur: Any, name: str) -> None:
        cur.execute(f"DELETE FROM api_tokens WHERE name = {self.p}", (name,))

    @recorder("noting an API token's use")
    def touch_token(self, cur: Any, name: str, now: str) -> None:
        cur.execute(f"UPDATE api_tokens SET last_used_at = {self.p} WHERE name = {self.p}", (now, name))

    @abc.abstractmethod
    def begin_write(self, raw: Any) -> None:
        """Start a transaction holding the store-wide append lock."""

    def begin_plain_write(self, raw: Any) -> None:
        """Start a write transaction that does not take the append lock (caches)."""

    def commit(self, raw: Any) -> None:
        raw.commit()

    def rollback(self, raw: Any) -> None:
        raw.rollback()

    def in_transaction(self, raw: Any) -> bool:
        """Whether ``raw`` is inside a transaction (begun and not yet ended)."""
        return bool(raw.in_transaction)  # sqlite3's

    def begin_read(self, raw: Any, snapshot: bool = False) -> bool:
        """Start a read; with ``snapshot``, every statement until :meth:`end_read` sees the same
        committed state (what a check that compares two tables needs while appends go on).
        True if it began a transaction that ``end_read`` must end."""
        return False

    def end_read(self, raw: Any, began: bool = False) -> None:
        pass

    def is_unique_violation(self, exc: BaseException) -> bool:
        return False

    def is_permission_denied(self, exc: BaseException) -> bool:
        """The database refused for lack of a privilege (a read-only role appending)."""
        return False

    #: How the append path hands BLOB values to the driver (``bytes`` returns a bytes object itself).
    blob: Callable[[bytes], Any] = bytes

    def insert_events(self, cur: Any, rows: list[tuple[Any, ...]], meanwhile: Callable[[], None] | None = None) -> None:
        """Insert the events' ``rows``; ``meanwhile`` (client work that uses no connection) is called
        once the rows are sent, while the database may still be writing them (PostgreSQL's COPY), or
        after them."""
        if len(rows) == 1:  # one statement, one round trip (executemany costs more on psycopg)
            cur.execute(self.sql_insert_event, rows[0])
        else:
            cur.executemany(self.sql_insert_event, rows)
        if meanwhile is not None:
            meanwhile()

    def blobs_present(self, cur: Any, digests: Sequence[bytes]) -> set[bytes]:
        """Which of ``digests`` (raw SHA-256) are stored, without reading their bytes."""
        present: set[bytes] = set()
        for i in range(0, len(digests), 500):
            chunk = digests[i:i + 500]
            cur.execute(self.sql_blobs_present.format(ids=", ".join([self.p] * len(chunk))),
                        [self.blob(d) for d in chunk])
            present.update(bytes(r[0]) for r in cur.fetchall())
        return present

    def insert_blobs(self, cur: Any, blobs: dict[bytes, bytes], now: str) -> int:
        """Insert the blobs (SHA-256 digest -> bytes) not stored yet; returns how many were new.
        Present ones are looked up first so their bytes are not sent again."""
        present = self.blobs_present(cur, list(blobs))
        rows = [(self.blob(d), len(data), self.blob(data), now) for d, data in blobs.items() if d not in present]
        if len(rows) == 1:
            cur.execute(self.sql_insert_blob, rows[0])
        elif rows:
            cur.executemany(self.sql_insert_blob, rows)
        return len(rows)

    # -- erasure (migration 0009; eventstore/erasure.py) -----------------------------------------

    #: A condition true when the BLOB column ``{col}`` contains the bytes bound at ``{p}``.
    sql_contains = "instr({col}, {p}) > 0"

    @recorder("looking up events to erase")
    def erasable_events(self, cur: Any, *, exclude_stream: str, stream_ids: Sequence[str] | None = None,
                        event_id: str | None = None, needles: Sequence[bytes] = (), recorded_before: str | None = None,
                        after_position: int = 0, limit: int = 500) -> list[tuple[int, str, int, bytes]]:
        """(position, stream id, version, meta) of events whose payload is still stored (not erased),
        outside ``exclude_stream``, that match every filter given, by position from ``after_position``."""
        p = self.p
        where = [f"e.position > {p}", "length(e.data) > 0", f"s.stream_id <> {p}"]
        params: list[Any] = [after_position, exclude_stream]
        if stream_ids is not None:
            if not stream_ids:
                return []
            where.append(f"s.stream_id IN ({', '.join([p] * len(stream_ids))})")
            params.extend(stream_ids)
        if event_id is not None:
            where.append(f"e.event_id = {p}")
            params.append(event_id)
        if recorded_before is not None:
            where.append(f"e.recorded_at < {p}")
            params.append(recorded_before)
        if needles:
            where.append("(" + " OR ".join(self.sql_contains.format(col=f"e.{c}", p=p)
                                           for _ in needles for c in ("data", "meta")) + ")")
            params.extend(self.blob(n) for n in needles for _ in ("data", "meta"))
        cur.execute("SELECT e.position, s.stream_id, e.version, e.meta FROM events e JOIN streams s "
                    f"ON s.stream_pk = e.stream_pk WHERE {' AND '.join(where)} ORDER BY e.position LIMIT {p}",
                    [*params, limit])
        return [(int(r[0]), str(r[1]), int(r[2]), bytes(r[3])) for r in cur.fetchall()]

    @recorder("looking up blobs to erase")
    def blobs_containing(self, cur: Any, needles: Sequence[bytes]) -> list[bytes]:
        """The digests of the stored (not erased) blobs whose bytes contain one of ``needles``."""
        if not needles:
            return []
        cond = " OR ".join(self.sql_contains.format(col="data", p=self.p) for _ in needles)
        cur.execute(f"SELECT sha256 FROM blobs WHERE length(data) > 0 AND ({cond})", [self.blob(n) for n in needles])
        return [bytes(r[0]) for r in cur.fetchall()]

    @recorder("looking up the events naming a blob")
    def blob_still_named(self, cur: Any, hex_digest: str) -> bool:
        """Whether an event whose payload is still stored names the blob (its meta holds the digest)."""
        cond = self.sql_contains.format(col="meta", p=self.p)
        cur.execute(f"SELECT 1 FROM events WHERE length(data) > 0 AND {cond} LIMIT 1", (self.blob(hex_digest.encode()),))
        return cur.fetchone() is not None

    @recorder("erasing payloads")
    def tombstone_events(self, cur: Any, rows: Sequence[tuple[int, str, str, str, str, str | None]]) -> None:
        """Record (position, kind, reason, admin event id, time, kept) in ``erasures`` and empty those
        events' ``data`` and ``meta`` and clear their ``salt`` (the one UPDATE the triggers allow):
        without the salt, the digests that stay no longer confirm a guess of what was erased."""
        p = self.p
        cur.executemany(f"INSERT INTO erasures (position, kind, reason, admin_event_id, erased_at, kept) "
                        f"VALUES ({p}, {p}, {p}, {p}, {p}, {p}) ON CONFLICT (position) DO NOTHING", list(rows))
        empty = self.blob(b"")
        cur.executemany(f"UPDATE events SET data = {p}, meta = {p}, salt = NULL WHERE position = {p}",
                        [(empty, empty, r[0]) for r in rows])

    @recorder("reading the source identities of erased events")
    def source_ids_at(self, cur: Any, positions: Sequence[int]) -> list[tuple[int, int, str]]:
        """(stream_pk, version, source id) of the ``source_versions`` rows of the events at ``positions``."""
        p = self.p
        found: list[tuple[int, int, str]] = []
        for i in range(0, len(positions), 500):
            chunk = list(positions[i:i + 500])
            cur.execute("SELECT v.stream_pk, v.version, v.source_id FROM source_versions v JOIN events e ON "
                        "e.stream_pk = v.stream_pk AND e.version = v.version "
                        f"WHERE e.position IN ({', '.join([p] * len(chunk))})", chunk)
            found += [(int(r[0]), int(r[1]), str(r[2])) for r in cur.fetchall()]
        return found

    @recorder("replacing the source identities of erased events")
    def replace_source_ids(self, cur: Any, rows: Sequence[tuple[int, int, str]]) -> None:
        """Set each (stream_pk, version)'s source id to the one given: the one UPDATE of
        ``source_versions`` its triggers allow (migration 0011), for an erased event's version."""
        p = self.p
        cur.executemany(f"UPDATE source_versions SET source_id = {p} WHERE stream_pk = {p} AND version = {p}",
                        [(ident, pk, v) for pk, v, ident in rows])

    @recorder("erasing blobs")
    def tombstone_blobs(self, cur: Any, digests: Sequence[bytes], admin_event_id: str, now: str) -> None:
        p = self.p
        cur.executemany(f"INSERT INTO erased_blobs (sha256, admin_event_id, erased_at) VALUES ({p}, {p}, {p}) "
                        "ON CONFLICT (sha256) DO NOTHING", [(self.blob(d), admin_event_id, now) for d in digests])
        # The row goes, then the erased_blobs key becomes random bytes: nothing left is a digest of the
        # blob's bytes (the one DELETE and UPDATE migration 0012's triggers allow).
        cur.executemany(f"DELETE FROM blobs WHERE sha256 = {p}", [(self.blob(d),) for d in digests])
        cur.executemany(f"UPDATE erased_blobs SET sha256 = {p} WHERE sha256 = {p}",
                        [(self.blob(os.urandom(32)), self.blob(d)) for d in digests])

    @recorder("dropping replay-cache rows")
    def drop_cached_states(self, cur: Any, stream_ids: Sequence[str]) -> int:
        """Delete the replay-cache rows of ``stream_ids`` and the projections' folded documents of them
        (folded documents hold their content); returns the replay-cache rows deleted."""
        if not stream_ids:
            return 0
        where = f"WHERE stream_pk IN (SELECT stream_pk FROM streams WHERE stream_id IN ({', '.join([self.p] * len(stream_ids))}))"
        cur.execute(f"DELETE FROM projection_states {where}", list(stream_ids))
        cur.execute(f"DELETE FROM replay_cache {where}", list(stream_ids))
        return int(cur.rowcount or 0)

    @recorder("reading the erasures")
    def erasure_rows(self, cur: Any, positions: Sequence[int] | None = None) -> dict[int, tuple[str, str, str, str]]:
        """position -> (kind, reason, admin event id, time) of every erased event (or of ``positions``)."""
        sql = "SELECT position, kind, reason, admin_event_id, erased_at FROM erasures"
        if positions is not None:
            if not positions:
                return {}
            sql += f" WHERE position IN ({', '.join([self.p] * len(positions))})"
        cur.execute(sql, list(positions or ()))
        return {int(r[0]): (str(r[1]), str(r[2]), str(r[3]), str(r[4])) for r in cur.fetchall()}

    @recorder("reading what an erasure kept")
    def kept_meta(self, cur: Any, position: int) -> str | None:
        """The capture bookkeeping kept from an erased event's meta (JSON), if any."""
        cur.execute(f"SELECT kept FROM erasures WHERE position = {self.p}", (position,))
        row = cur.fetchone()
        return None if row is None or row[0] is None else str(row[0])

    @recorder("reading the erased blobs")
    def erased_blob_digests(self, cur: Any) -> set[bytes]:
        cur.execute("SELECT sha256 FROM erased_blobs")
        return {bytes(r[0]) for r in cur.fetchall()}

    def scrub(self, raw: Any) -> list[str]:
        """Make the bytes of erased payloads unrecoverable from the database's files (outside a
        transaction); what was done, one line each."""
        return []

    #: Whether the database has locks that several processes (on several machines) share and that
    #: die with the session holding them (:mod:`eventstore.locks`); without them, callers keep
    #: their own file lock (one machine: a SQLite file is on one).
    has_session_locks = False

    # Without shared locks a store is on one machine and its callers keep their own file lock: the
    # session lock is always this session's (what eventstore.locks.ExclusiveLock does without asking).

    def try_session_lock(self, raw: Any, key: int, label: str) -> bool:
        """Take the session-wide lock ``key`` on ``raw`` without waiting (False: another session
        holds it); ``label`` says who holds it to those who find it taken."""
        return True

    def holds_session_lock(self, raw: Any, key: int) -> bool:
        """Whether ``raw``'s session holds the lock ``key`` (raises if the session is gone)."""
        return True

    def release_session_lock(self, raw: Any, key: int) -> None:
        """Let the lock ``key`` go."""

    def session_lock_holder(self, raw: Any, key: int) -> str | None:
        """Who holds the lock ``key`` (the label it gave, its session), or None if nobody does
        (or, without shared locks, nobody else can)."""
        return None

    #: Whether the database has roles to grant rights to (``evstore db roles``).
    has_roles = False

    def create_roles(self, conn: Any, writer: str, reader: str, grants: dict[str, str]) -> list[str]:
        """Create a writer and a reader role and grant ``writer`` ``grants`` (table -> rights);
        what was done, one line each (backends with ``has_roles``; the others say why not)."""
        raise EvstoreError("Database roles are a PostgreSQL feature; on SQLite the file's permissions decide "
                           "who can write (e.g. chmod 640 and a group for readers).")

    @abc.abstractmethod
    def insert_stream(self, cur: Any, stream_id: str, dialect: str | None, genesis: bytes, now: str) -> int:
        """Create the stream row, return its surrogate key."""
