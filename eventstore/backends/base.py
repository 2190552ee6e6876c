"""What a backend provides to the recorder: SQL text in the driver's paramstyle, how to begin a
write transaction that serialises position allocation, and how to detect a constraint clash."""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy.engine import Engine

#: The columns an append writes, in the order of the rows ``_Transaction.add`` builds.
EVENT_COLUMNS = ("position, stream_pk, version, event_id, type, schema_version, data, meta, "
                 "occurred_at, recorded_at, data_sha256, meta_sha256, prev_hash, hash")


class Backend(abc.ABC):
    name = ""
    p = "?"  # DBAPI paramstyle placeholder

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        p = self.p
        self.sql_insert_event = f"INSERT INTO events ({EVENT_COLUMNS}) VALUES ({', '.join([p] * 14)})"
        self.sql_stream = f"SELECT stream_pk, version, head_hash FROM streams WHERE stream_id = {p}"
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
        sel = ("SELECT e.position, s.stream_id, e.version, e.event_id, e.type, e.schema_version, "
               "e.data, e.meta, e.occurred_at, e.recorded_at, e.prev_hash, e.hash "
               "FROM events e JOIN streams s ON s.stream_pk = e.stream_pk ")
        self.sql_read_stream = (sel + f"WHERE e.stream_pk = {p} AND e.version > {p} AND e.version <= {p} "
                                "ORDER BY e.version")
        self.sql_read_all = sel + f"WHERE e.position > {p} ORDER BY e.position LIMIT {p}"
        self.sql_read_all_types = sel + f"WHERE e.position > {p} AND e.type IN ({{types}}) ORDER BY e.position LIMIT {p}"
        self.sql_find_ids = (
            "SELECT e.event_id, s.stream_id, e.version, e.position, e.type, e.data_sha256, e.meta_sha256, "
            "e.occurred_at, e.schema_version FROM events e JOIN streams s ON s.stream_pk = e.stream_pk WHERE e.event_id IN ({ids})"
        )

    def read_all_query(self, after: int, limit: int, types: Sequence[str] | None) -> tuple[str, tuple[Any, ...]]:
        """(sql, params) of up to ``limit`` events after position ``after`` (of ``types`` only, if given)."""
        if types:
            return self.sql_read_all_types.format(types=", ".join([self.p] * len(types))), (after, *types, limit)
        return self.sql_read_all, (after, limit)

    @abc.abstractmethod
    def begin_write(self, raw: Any) -> None:
        """Start a transaction holding the store-wide append lock."""

    def begin_plain_write(self, raw: Any) -> None:
        """Start a write transaction that does not take the append lock (caches)."""

    def commit(self, raw: Any) -> None:
        raw.commit()

    def rollback(self, raw: Any) -> None:
        raw.rollback()

    def begin_read(self, raw: Any) -> None:
        pass

    def end_read(self, raw: Any) -> None:
        pass

    def is_unique_violation(self, exc: BaseException) -> bool:
        return False

    def is_permission_denied(self, exc: BaseException) -> bool:
        """The database refused for lack of a privilege (a read-only role appending)."""
        return False

    #: How the append path hands BLOB values to the driver (``bytes`` returns a bytes object itself).
    blob: Callable[[bytes], Any] = bytes

    def insert_events(self, cur: Any, rows: list[tuple[Any, ...]]) -> None:
        if len(rows) == 1:  # one statement, one round trip (executemany costs more on psycopg)
            cur.execute(self.sql_insert_event, rows[0])
        else:
            cur.executemany(self.sql_insert_event, rows)

    @abc.abstractmethod
    def insert_stream(self, cur: Any, stream_id: str, dialect: str | None, genesis: bytes, now: str) -> int:
        """Create the stream row, return its surrogate key."""
