"""DuckDB over the Parquet tables: the views (the shared ones and each dialect's, :func:`.facts.catalog`), connections that read one consistent
set of files while other processes refresh, and user queries."""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb

from eventstore.errors import EvstoreError
from eventstore.store import EventStore
from projections.analytics.facts import catalog, empty_select
from projections.analytics.files import Manifest, analytics_dir, io_error, mismatch, refresh

#: Tables filled from the store when a connection is bound to one (:func:`reading`): what the
#: log does not state event by event (a run's sessions are matched across streams,
#: ``projections.writers``).  Empty on a bare :func:`connect`.
LINKS: dict[str, str] = {"run_sessions": "stream_id VARCHAR, session_id VARCHAR"}


def table_names() -> list[str]:
    """Every fact table, link table and view a connection has, tables first."""
    cat = catalog()
    return list(cat.schemas) + list(LINKS) + list(cat.views)


def _sql_list(paths: Sequence[str]) -> str:
    return "[" + ", ".join("'" + p.replace("'", "''") + "'" for p in paths) + "]"


_FD_DIR = next((d for d in ("/proc/self/fd", "/dev/fd") if os.path.isdir(d)), None)


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)
    fds.clear()


def _open_listed(directory: Path, attempts: int = 50) -> tuple[Manifest, dict[str, list[str]], list[int]]:
    """The manifest and, per table, a path DuckDB can read each listed file through, plus the open
    descriptors that keep those files readable.

    A refresh in another process may replace the manifest and delete the files the new one no
    longer lists (compaction, rebuild) at any moment.  Readers never lock writers out: a reader
    opens every file its manifest lists and hands DuckDB ``/proc/self/fd/N``, and an open file
    stays readable after it is deleted (POSIX), so a query reads exactly the generation its
    manifest named.  A file deleted before it could be opened means a newer manifest is in place:
    read that one."""
    for _ in range(attempts):
        m = Manifest.load(directory)
        if m is None:
            raise EvstoreError(f"No analytics tables in {directory}; run `evstore query` or `evstore metrics` "
                               "to build them.")
        fds: list[int] = []
        paths: dict[str, list[str]] = {}
        try:
            for table in catalog().schemas:
                paths[table] = []
                for p in m.paths(directory, table):
                    if _FD_DIR is None:  # no descriptor paths on this system: read the files by name
                        paths[table].append(str(p))
                        continue
                    fds.append(os.open(p, os.O_RDONLY))
                    paths[table].append(f"{_FD_DIR}/{fds[-1]}")
        except FileNotFoundError:
            _close_all(fds)
            time.sleep(0.01)
            continue
        except OSError as exc:
            _close_all(fds)
            raise io_error("read the analytics tables in", directory, exc) from exc
        return m, paths, fds
    raise EvstoreError(f"The analytics tables in {directory} changed {attempts} times while being opened; try again.")


def _connect(directory: Path, threads: int | None = None) -> tuple[duckdb.DuckDBPyConnection, Manifest,
                                                                   Callable[[], None]]:
    """(connection, its manifest, a call that closes the files it reads once the connection is closed)."""
    m, paths, fds = _open_listed(directory)
    try:
        con = duckdb.connect(":memory:")  # a database of its own: no cache shared with other connections
        if threads:
            con.execute(f"SET threads = {int(threads)}")
        cat = catalog()
        for table in cat.schemas:
            if paths[table]:
                con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet({_sql_list(paths[table])})")
            else:  # a table the manifest does not list (built before its dialect was installed): empty
                con.execute(f"CREATE VIEW {table} AS {empty_select(cat.tables[table].all_columns())}")
        for table, columns in LINKS.items():
            con.execute(f"CREATE TABLE {table} ({columns})")
        for view, sql in cat.views.items():
            con.execute(f"CREATE VIEW {view} AS {sql}")
    except BaseException:
        _close_all(fds)
        raise
    return con, m, weakref.finalize(con, _close_all, fds)


def connect(directory: str | os.PathLike[str], *, threads: int | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with a view per fact table and per :data:`VIEWS` entry, over
    the files the manifest lists now (concurrent refreshes do not disturb it; its files are
    released when the connection is garbage-collected).  :func:`reading` also checks the tables
    belong to a store."""
    return _connect(Path(directory), threads)[0]


def _store_connect(store: EventStore, directory: str | os.PathLike[str] | None,
                   fresh: bool) -> tuple[duckdb.DuckDBPyConnection, Callable[[], None]]:
    out = analytics_dir(store, directory)
    if fresh:
        refresh(store, out)
    con, m, release = _connect(out)
    problem = mismatch(store, m)
    if problem:
        con.close()
        release()
        hint = "try again" if fresh else "run without --no-refresh to rebuild them"
        raise EvstoreError(f"The analytics tables in {out} are not this store's: {problem}; {hint}.")
    try:
        fill_links(con, store)
    except BaseException:
        con.close()
        release()
        raise
    return con, release


def fill_links(con: duckdb.DuckDBPyConnection, store: EventStore) -> None:
    """Fill the :data:`LINKS` tables from ``store`` (a run's sessions: ``projections.writers``)."""
    from projections import writers

    rows = [(run, session) for run, sessions in writers.run_sessions(store).items() for session in sessions]
    con.execute("DELETE FROM run_sessions")
    if rows:
        con.executemany("INSERT INTO run_sessions VALUES (?, ?)", rows)


@contextmanager
def reading(store: EventStore, directory: str | os.PathLike[str] | None = None, *,
            fresh: bool = True) -> Iterator[duckdb.DuckDBPyConnection]:
    """Refresh (unless ``fresh`` is False), connect, and check the tables are ``store``'s log;
    the connection and its files are closed on exit.  Tables that are not this store's (another
    or a recreated store, a log that lost their checkpoint's event) are refused, never read."""
    con, release = _store_connect(store, directory, fresh)
    try:
        yield con
    finally:
        con.close()
        release()


def open_analytics(store: EventStore, directory: str | os.PathLike[str] | None = None, *,
                   fresh: bool = True) -> duckdb.DuckDBPyConnection:
    """Refresh (unless ``fresh`` is False) and connect: the one call notebooks use (tables that
    are not this store's are refused, as :func:`reading` does)."""
    return _store_connect(store, directory, fresh)[0]


class QueryError(EvstoreError):
    """A DuckDB error in user SQL; the message is DuckDB's own."""


def query(con: duckdb.DuckDBPyConnection, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run ``sql`` (DuckDB dialect) and fetch the whole result: (column names, rows)."""
    try:
        rel = con.execute(sql)
        columns = [d[0] for d in rel.description or []]
        rows = rel.fetchall() if rel.description else []
    except duckdb.Error as exc:
        raise QueryError(str(exc)) from exc
    return columns, rows


