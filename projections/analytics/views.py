"""DuckDB over the Parquet tables: the views (the shared ones and each dialect's, :func:`.facts.catalog`), connections that read one consistent
set of files while other processes refresh, and user queries."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import tempfile
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import duckdb

from eventstore.errors import EvstoreError
from eventstore.store import EventStore
from projections.analytics.facts import Catalog, catalog, empty_select
from projections.analytics.files import Manifest, analytics_dir, io_error, mismatch, refresh, sql_string
from projections.prices import PriceTable

if TYPE_CHECKING:
    from eventstore.dialects.analytics import MetricSection

_T = TypeVar("_T")

#: Tables filled from the store when a connection is bound to one (:func:`reading`): what the
#: log does not state event by event (a run's sessions are matched across streams,
#: ``projections.writers``).  Empty on a bare :func:`connect`.
#: ``model_prices``: the price table in force (``projections.prices``; ``evstore usage --prices`` refills it).
LINKS: dict[str, str] = {"run_sessions": "stream_id VARCHAR, session_id VARCHAR",
                         "model_prices": "model VARCHAR, effective TIMESTAMPTZ, input DOUBLE, output DOUBLE, "
                                         "cache_write DOUBLE, cache_read DOUBLE, cache_write_1h DOUBLE"}


def table_names() -> list[str]:
    """Every fact table, link table and view a connection has, tables first."""
    cat = catalog()
    return list(cat.tables) + list(LINKS) + list(cat.views)


def _sql_list(paths: Sequence[str]) -> str:
    return "[" + ", ".join(sql_string(p) for p in paths) + "]"


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
            for table in catalog().tables:
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


#: Below this many fact rows (all tables), a connection runs its queries on one thread (unless told
#: otherwise): a query over so few rows is planning, not scanning, and DuckDB's worker threads only add
#: their hand-offs.  ``benchmarks/bench_analytics.py --threads`` times a whole ``metrics`` report both
#: ways (2 cores; wall / CPU seconds, one thread vs DuckDB's default of one per core): 5 k rows
#: 0.28 / 0.28 vs 0.41 / 0.42, 51 k rows 0.42 / 0.41 vs 0.41 / 0.48, 255 k rows 0.69 / 0.72 vs
#: 0.55 / 0.70, 1 M rows 0.63 / 0.66 vs 0.51 / 0.75: past about 100 k rows the threads pay for themselves.
SERIAL_ROWS = 100_000
#: From this many fact rows a report keeps the run views' rows between reports (:mod:`.kept`).  Below it a
#: report computes every view in memory (``_materialize``) in well under a second, and building and updating
#: ``kept.duckdb`` cost more than they save (about 0.15 s of CPU more for the first report of a 50-run demo
#: store); the reports are the same either way (``tests/test_metrics_partial.py``).
KEPT_ROWS = SERIAL_ROWS


def _connect(directory: Path, threads: int | None = None, sql: str | None = None, *, views: bool = True,
             facts: bool = True) -> tuple[duckdb.DuckDBPyConnection, Manifest, Callable[[], None], frozenset[str] | None]:
    """(connection, its manifest, a call that closes the files it reads once the connection is closed,
    the names defined in it: None for all of them).

    With ``sql``, only the tables and views that query reads are defined (:func:`reads`), when that
    can be told from its text: binding the whole catalog's views is most of a connection's cost.
    Without ``views``, only the tables are: the caller defines the views (:func:`_define_views`) or
    computes their rows (:func:`_materialize`).  Without ``facts`` (and ``views``), not the fact tables either
    (only the link tables): the caller defines those it reads (:func:`define_facts`)."""
    m, paths, fds = _open_listed(directory)
    try:
        con = duckdb.connect(":memory:")  # a database of its own: no cache shared with other connections
        # Within it, each Parquet file's footer is parsed once, not once per query that reads it (a report
        # runs dozens of queries over the same files: 15 % of `evstore metrics`' CPU on the demo portfolio).
        # The cache dies with the connection, and the files it reads never change while it lives.
        con.execute("SET parquet_metadata_cache = true")
        if threads is None and m.rows() < SERIAL_ROWS:
            threads = 1
        if threads:
            con.execute(f"SET threads = {int(threads)}")
        _facts[con] = _Facts({table: list(zip(paths[table], m.files.get(table, []), strict=True)) for table in paths})
        only = reads(con, sql) if sql is not None else None
        keep = set(table_names()) if only is None else only
        if facts or views:
            define_facts(con, keep)
        for table, columns in LINKS.items():
            if table in keep:
                con.execute(f"CREATE TABLE {table} ({columns})")
        if views:
            _define_views(con, only)
    except BaseException:
        _close_all(fds)
        raise
    return con, m, weakref.finalize(con, _close_all, fds), only


@dataclass
class _Facts:
    """A connection's fact files (:func:`_connect`): per table, the path DuckDB reads each by and its manifest entry;
    and the fact tables defined in it so far (:func:`define_facts`)."""

    listed: dict[str, list[tuple[str, dict[str, Any]]]]
    defined: set[str] = field(default_factory=set)


_facts: weakref.WeakKeyDictionary[duckdb.DuckDBPyConnection, _Facts] = weakref.WeakKeyDictionary()


def define_facts(con: duckdb.DuckDBPyConnection, names: Iterable[str]) -> None:
    """Define in ``con`` (made by :func:`_connect`) each fact table of ``names`` it does not have yet: a view over
    the files its manifest lists, or an empty select for a table it does not list (built before its dialect was
    installed).  DuckDB binds a view when it is created, reading its first file's footer: 2.5-6 ms a table compacted
    into one file of a hundred row groups, 0.08 s for the 23 tables at 10^7 events, of which a report over the
    kept rows reads one, ``events`` (:func:`_facts_beside_run_views`)."""
    cat, facts = catalog(), _facts[con]
    wanted = set(names)
    for table in cat.tables:  # in catalog order
        if table not in wanted or table in facts.defined:
            continue
        paths = [path for path, _f in facts.listed.get(table, ())]
        if paths:
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet({_sql_list(paths)})")
        else:
            con.execute(f"CREATE VIEW {table} AS {empty_select(cat.tables[table].all_columns())}")
        facts.defined.add(table)


def _facts_beside_run_views(con: duckdb.DuckDBPyConnection, cat: Catalog) -> frozenset[str]:
    """The fact tables a report reads when the run views are the kept rows (:mod:`.kept`): those the other views
    and the catalog's sections read, directly or through views that are not run views; every fact table if a
    section's SQL does not say what it reads (:func:`tables_read`).  Once per catalog."""
    global _beside_cache
    if _beside_cache is None or _beside_cache[0] is not cat:
        known = frozenset(table_names())
        start = set(cat.views) - set(cat.run_views)
        for m in cat.every_section:
            got = section_reads(con, m, known)
            if got is None:
                _beside_cache = (cat, frozenset(cat.tables))
                return _beside_cache[1]
            start |= got
        run = set(cat.run_views)
        through = {view: read for view, read in _depends(con, cat, known).items() if view not in run}
        _beside_cache = (cat, closure(through, start) & cat.tables.keys())
    return _beside_cache[1]


_beside_cache: tuple[Catalog, frozenset[str]] | None = None


def facts_within(con: duckdb.DuckDBPyConnection, table: str, spans: Sequence[tuple[int, int | None]], db: str) -> str:
    """What ``con`` reads ``table``'s facts at positions within ``spans`` (first, last; None: no last) from: the files
    whose positions can reach into one of them (each file holds the facts of the positions after its manifest
    entry's ``after`` up to its ``upto``), not every file of the table.  DuckDB opens each file it is given,
    whatever its row groups' positions: finding the runs of one new event in the 107 files of ``events`` at 10^7
    events took 17-21 ms, and grew with the store.  ``db``'s table if ``con``'s files are not known."""
    files = files_within(con, table, spans)
    if files is None:
        return f"{db}.main.{table}"
    if not files:
        return f"({empty_select(catalog().tables[table].all_columns())})"
    return f"read_parquet({_sql_list(files)})"


def files_within(con: duckdb.DuckDBPyConnection, table: str, spans: Sequence[tuple[int, int | None]]) -> list[str] | None:
    """The paths of :func:`facts_within`'s files (None: ``con``'s files are not known)."""
    facts = _facts.get(con)
    if facts is None or table not in facts.listed:
        return None
    return [path for path, f in facts.listed[table] if f["rows"] and any(
        f["upto"] >= first and (last is None or f["after"] < last) for first, last in spans)]


def _define_views(con: duckdb.DuckDBPyConnection, only: frozenset[str] | None, *, temp: bool = False) -> None:
    """Define the catalog's views in ``con`` (those in ``only``; None: all of them; ``temp``: as temporary views, in
    the connection's temporary schema: over the kept run views' tables :func:`kept.bind` attached)."""
    for view, sql_text in catalog().views.items():  # in catalog order: a view after the views it reads
        if only is None or view in only:
            con.execute(f"CREATE {'TEMP ' if temp else ''}VIEW {view} AS {sql_text}")


def _materialize(con: duckdb.DuckDBPyConnection, only: frozenset[str] | None, skip: frozenset[str] = frozenset()) -> None:
    """Shadow each catalog view (those in ``only``; None: all of them) with a temporary table of its rows,
    computed from the view's SQL: planned once, whether or not the view is also defined in ``con`` (a
    small store's report defines none: binding each view and then planning it again was about a third of
    a report connection's CPU on ``evstore demo``'s store, 280 ms against 175, connection and tables).

    A name resolves to the temporary schema first, so every later query, and every view built on
    another, reads the table: the view stack is planned and run once, not by each query of a
    report.  The rows are the view's for the connection's whole life (its files never change, and
    the link tables are filled before this)."""
    for view, sql_text in catalog().views.items():  # in catalog order: a view's table exists before those reading it
        if (only is None or view in only) and view not in skip:  # skip: already read from the kept tables
            con.execute(f"CREATE TEMP TABLE {view} AS {sql_text}")


def _walk(node: Any) -> Iterator[dict[str, Any]]:
    """Every object in DuckDB's JSON form of a parsed statement (``json_serialize_sql``)."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            yield item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def section_reads(con: duckdb.DuckDBPyConnection, m: MetricSection, known: frozenset[str]) -> frozenset[str] | None:
    """The names a metric section's statements read (:func:`tables_read` of each of ``m.queries``, remembered: the
    catalog's own SQL); None if one of them does not say."""
    read: set[str] = set()
    for sql in m.queries:
        got = tables_read(con, sql, known, remember=True)
        if got is None:
            return None
        read |= got
    return frozenset(read)


def tables_read(con: duckdb.DuckDBPyConnection, sql: str, known: frozenset[str], *,
                remember: bool = False) -> set[str] | None:
    """The unqualified table names ``sql`` reads (lower case; not its CTEs' own names), from DuckDB's
    parser (``json_serialize_sql``); None when that does not say what it reads: it is not a query the
    parser serialises (a PRAGMA, a statement that writes, a syntax error), or it reads through a table
    function or a schema-qualified name.  ``known``: the catalog's names (a CTE named as one is kept).
    With ``remember`` (the catalog's own SQL, not a user's), what the parser said is kept for the text, and
    kept in the analytics folder by :func:`reading` (:data:`PARSED`)."""
    digest = hashlib.sha256(sql.encode()).hexdigest()[:32] if remember else ""
    if digest and digest in _parsed:
        got = _parsed[digest]
    else:
        got = _parse(con, sql)
        if digest:
            _parsed[digest] = got
            _parsed_new.add(digest)
    if got is None:
        return None
    names, ctes = got
    return set(names) - (set(ctes) - known)  # a CTE that shadows a table: both, to be safe


def _parse(con: duckdb.DuckDBPyConnection, sql: str) -> tuple[list[str], list[str]] | None:
    """(the table names, the CTE names) DuckDB's parser finds in ``sql``, or None (:func:`tables_read`)."""
    try:
        parsed = json.loads(con.execute("SELECT json_serialize_sql(?)", [sql]).fetchall()[0][0])
    except (duckdb.Error, ValueError, IndexError):
        return None
    if parsed.get("error") is not False:
        return None
    names: set[str] = set()
    ctes: set[str] = set()
    for node in _walk(parsed.get("statements")):
        ctes.update(str(c.get("key")).lower() for c in (node.get("cte_map") or {}).get("map", ()))
        kind = node.get("type")
        if kind in ("SHOW_REF", "TABLE_FUNCTION"):
            return None
        if kind == "BASE_TABLE":
            if node.get("schema_name") or node.get("catalog_name"):
                return None
            names.add(str(node.get("table_name")).lower())
    return sorted(names), sorted(ctes)


#: The file, in the analytics folder, of what DuckDB's parser found in the catalog's SQL (:func:`tables_read`
#: with ``remember``), by each text's digest and for this DuckDB: parsing the views' and sections' SQL again in
#: each process (``json_serialize_sql``, then walking its JSON) was 0.2-0.25 s of every report that computes.
PARSED = "parsed.json"
_parsed: dict[str, tuple[list[str], list[str]] | None] = {}
_parsed_new: set[str] = set()
_parsed_read: set[str] = set()


def _load_parsed(directory: Path) -> None:
    """Take what :data:`PARSED` in ``directory`` holds for this DuckDB (once per folder and process); a file
    that is not such (missing, damaged, of another DuckDB) is as good as empty."""
    if str(directory) in _parsed_read:
        return
    _parsed_read.add(str(directory))
    try:
        data = json.loads((directory / PARSED).read_bytes())
        if data.get("duckdb") != duckdb.__version__:
            return
        for digest, got in data["sql"].items():
            if digest not in _parsed and type(digest) is str:
                _parsed[digest] = None if got is None else (list(map(str, got[0])), list(map(str, got[1])))
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError):
        return


def _save_parsed(directory: Path) -> None:
    """Write :data:`PARSED` if this process parsed a text it did not hold (a folder that cannot be written
    keeps nothing: the next process parses again)."""
    from projections.analytics.files import replacing

    if not _parsed_new:
        return
    try:
        with replacing(directory / PARSED) as tmp:
            tmp.write_text(json.dumps({"duckdb": duckdb.__version__, "sql": _parsed}, sort_keys=True))
        _parsed_new.clear()
    except OSError:
        pass


def _depends(con: duckdb.DuckDBPyConnection, cat: Catalog, known: frozenset[str]) -> dict[str, frozenset[str]]:
    """Each view of ``cat``: the catalog's tables and views its SQL reads (a view whose SQL does not say
    reads them all); parsed once per catalog, as :func:`.facts.catalog` builds one per dialect list."""
    global _depends_cache
    if _depends_cache is None or _depends_cache[0] is not cat:
        _depends_cache = (cat, {view: known if (read := tables_read(con, sql, known, remember=True)) is None
                                else known & read for view, sql in cat.views.items()})
    return _depends_cache[1]


_depends_cache: tuple[Catalog, dict[str, frozenset[str]]] | None = None


def reads(con: duckdb.DuckDBPyConnection, sql: str) -> frozenset[str] | None:
    """The catalog's tables and views the query ``sql`` reads, with every view those read in turn;
    None (define them all) when its text does not say (:func:`tables_read`: SHOW, DESCRIBE and
    SUMMARIZE, ``information_schema``, ``duckdb_views()`` and any other table function, PRAGMAs, syntax
    errors), or when it names a table the catalog lacks (DuckDB's "Did you mean" then has every name to
    suggest)."""
    known = frozenset(table_names())
    names = tables_read(con, sql, known)
    if names is None or not names <= known:
        return None
    return closure(_depends(con, catalog(), known), names)


def closure(depends: dict[str, frozenset[str]], names: Iterable[str]) -> frozenset[str]:
    """``names`` and every table and view they read, in turn (``depends``: :func:`_depends`)."""
    out: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name not in out:
            out.add(name)
            todo.extend(depends.get(name, ()))
    return frozenset(out)


def connect(directory: str | os.PathLike[str], *, threads: int | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with a view per fact table and per :data:`VIEWS` entry, over
    the files the manifest lists now (concurrent refreshes do not disturb it; its files are
    released when the connection is garbage-collected).  :func:`reading` also checks the tables
    belong to a store.  DuckDB runs on ``threads`` threads; by default on one for tables under
    :data:`SERIAL_ROWS` rows, else on one per core."""
    return _connect(Path(directory), threads)[0]


def _store_connect(store: EventStore, directory: str | os.PathLike[str] | None, fresh: bool,
                   sql: str | None = None, materialize: bool = False,
                   memory: str | None = None) -> tuple[duckdb.DuckDBPyConnection,
                                                                                Callable[[], None]]:
    out = analytics_dir(store, directory)
    if fresh:
        refresh(store, out)
    _load_parsed(out)
    con, m, release, only = _connect(out, sql=sql, views=False, facts=False)
    problem = mismatch(store, m)
    if problem:
        con.close()
        release()
        hint = "try again" if fresh else "run without --no-refresh to rebuild them"
        raise EvstoreError(f"The analytics tables in {out} are not this store's: {problem}; {hint}.")
    try:
        if only is None or not only.isdisjoint(LINKS):
            fill_links(con, store, only)
        if materialize and memory is not None:
            release = _bounded(con, release, memory)
        cat = catalog()
        if materialize and m.rows() < min(SERIAL_ROWS, KEPT_ROWS):  # every view's rows computed once
            define_facts(con, cat.tables if only is None else only)
            _materialize(con, only)
            return con, release
        bound = False
        if materialize and only is None and m.rows() >= KEPT_ROWS:
            from projections.analytics import kept

            # The run views are read from the kept rows: they are not defined over the facts (DuckDB binds each
            # view it is given, 50 ms of the 36 at 10^7 events); the kept update evaluates their SQL itself, and
            # defines the fact tables only if it builds the rows from every fact.
            bound = kept.bind(con, store, out, m, _depends(con, cat, frozenset(table_names())))
        if not bound:
            define_facts(con, cat.tables if only is None else only)
            _define_views(con, only)
        else:  # the fact tables the other views and the sections read
            define_facts(con, _facts_beside_run_views(con, cat))
            if m.rows() >= SERIAL_ROWS:  # the views that are not run views, over the run views' kept rows
                _define_views(con, frozenset(cat.views) - frozenset(cat.run_views), temp=True)
        if materialize and m.rows() < SERIAL_ROWS:
            _materialize(con, only, frozenset(cat.run_views) if bound else frozenset())
    except BaseException:
        con.close()
        release()
        raise
    return con, release


#: The memory a report's DuckDB connection may hold (``SET memory_limit``); its sorts, joins and aggregates
#: spill to a folder of their own past it, and a statement that cannot runs again at
#: :data:`REPORT_MEMORY_MAX`, then without the cap (:func:`fitting`: ``metrics.section``, ``kept``).  With
#: DuckDB's default (80 % of the machine's memory) the first `metrics` of a 10^6-event store peaked at
#: 390-442 MB, buffers DuckDB kept because it could; at 100 MB at 261-263 MB, build included, with the same
#: output (``benchmarks/bench_metrics.py --first``).
REPORT_MEMORY = "100MB"
#: The step up of :func:`fitting` (after :data:`ONE_THREAD`): a report's process stays under about 300 MB (Python, DuckDB and the
#: store's driver take about 90 MB before a query) unless a statement does not fit this either.
REPORT_MEMORY_MAX = "200MB"
#: A step of :func:`fitting`: the same memory limit, on one thread.  DuckDB holds a partial state of an
#: aggregate per thread and then combines them; a quantile over every number does not fit where one state
#: would (the ``histories`` section at 10^7 events: 140 MB on two threads, 93 MB on one).
ONE_THREAD = "one thread"


def fitting(con: duckdb.DuckDBPyConnection, run: Callable[[], _T],
            steps: Sequence[str | None] = (ONE_THREAD, REPORT_MEMORY_MAX, None)) -> _T:
    """``run()`` at ``con``'s memory limit; where DuckDB cannot fit it (an OutOfMemoryException: an operator
    it cannot spill, such as a holistic aggregate over many rows), again at each of ``steps`` in turn
    (:data:`ONE_THREAD`: at the same limit on one thread, unless the connection runs on one already; a limit
    on the connection's threads; None: DuckDB's own limit), so that a bound on memory never fails a report,
    then the limit and threads as they were.  ``run`` must be safe to repeat: a statement that failed changed
    nothing."""
    try:
        return run()
    except duckdb.OutOfMemoryException:
        threads = int(con.execute("SELECT current_setting('threads')").fetchall()[0][0])
        tried = [step for step in steps if step != ONE_THREAD or threads > 1]
        if not tried:
            raise
    was = _limits.get(con)  # as set (DuckDB shows it rounded, and would take the rounded value back)
    try:
        for i, step in enumerate(tried):
            if step == ONE_THREAD:
                con.execute("SET threads = 1")
            else:
                con.execute(f"SET threads = {threads}")
                con.execute("RESET memory_limit" if step is None else f"SET memory_limit = {sql_string(step)}")
            try:
                return run()
            except duckdb.OutOfMemoryException:
                if i == len(tried) - 1:
                    raise
        raise AssertionError("unreachable")
    finally:
        con.execute(f"SET threads = {threads}")
        con.execute("RESET memory_limit" if was is None else f"SET memory_limit = {sql_string(was)}")


_spills = itertools.count()
_limits: weakref.WeakKeyDictionary[duckdb.DuckDBPyConnection, str] = weakref.WeakKeyDictionary()


def _bounded(con: duckdb.DuckDBPyConnection, release: Callable[[], None], memory: str) -> Callable[[], None]:
    """Cap ``con``'s memory (``memory``: :data:`REPORT_MEMORY` for a report) and give it a private spill folder (an in-memory
    database spills into ``.tmp`` in the working directory by default, a folder other processes share):
    the returned call releases the files, then removes the folder."""
    spill = Path(tempfile.gettempdir()) / f"evstore-duckdb-{os.getpid()}-{next(_spills)}"
    con.execute(f"SET temp_directory = {sql_string(str(spill))}")
    con.execute(f"SET memory_limit = {sql_string(memory)}")
    _limits[con] = memory

    def both() -> None:
        release()
        shutil.rmtree(spill, ignore_errors=True)
    return both


def fill_links(con: duckdb.DuckDBPyConnection, store: EventStore, only: frozenset[str] | None = None) -> None:
    """Fill the :data:`LINKS` tables from ``store`` (a run's sessions: ``projections.writers``) and
    the price table (``projections.prices.load_prices``: the package's, or ``$EVSTORE_PRICES``)."""
    from projections import writers
    from projections.prices import load_prices

    if only is None or "run_sessions" in only:
        rows = [(run, session) for run, sessions in writers.run_sessions(store).items() for session in sessions]
        con.execute("DELETE FROM run_sessions")
        insert_rows(con, "run_sessions", LINKS["run_sessions"], rows)
    if only is None or "model_prices" in only:
        fill_prices(con, load_prices())


def fill_prices(con: duckdb.DuckDBPyConnection, table: PriceTable) -> None:
    """Put ``table``'s rows in ``model_prices`` (each effective from midnight UTC of its date)."""
    from datetime import UTC, datetime, time

    con.execute("DELETE FROM model_prices")
    rows = [(m, datetime.combine(day, time(), UTC), *rates) for m, day, *rates in table.sql_rows()]
    insert_rows(con, "model_prices", LINKS["model_prices"], rows)


def insert_rows(con: duckdb.DuckDBPyConnection, table: str, columns: str, rows: Sequence[Sequence[Any]]) -> None:
    """Insert ``rows`` into ``table``, whose ``columns`` are as its CREATE TABLE gives them (``"name TYPE, ..."``,
    in order), in one statement, a list a column, bound: DuckDB's ``executemany`` runs one INSERT a row (the 17
    prices: 5.9-6.2 ms against 1.2)."""
    if rows:
        cols = ", ".join(f"unnest(?::{column.split()[1]}[])" for column in columns.split(", "))
        con.execute(f"INSERT INTO {table} SELECT {cols}", [list(c) for c in zip(*rows, strict=True)])


@contextmanager
def reading(store: EventStore, directory: str | os.PathLike[str] | None = None, *,
            fresh: bool = True, sql: str | None = None, materialize: bool = False,
            memory: str | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """Refresh (unless ``fresh`` is False), connect, and check the tables are ``store``'s log;
    the connection and its files are closed on exit.  Tables that are not this store's (another
    or a recreated store, a log that lost their checkpoint's event) are refused, never read.
    With ``sql``, the connection is for that one query: only what it reads is defined (:func:`reads`).
    With ``materialize``, for a connection that runs many queries (a metrics report), each view's rows
    are computed once, into a temporary table, when the tables hold under :data:`SERIAL_ROWS` rows:
    connecting and a whole report on ``evstore demo``'s 40 runs took 480 ms of CPU through the views and
    329 ms so (best of 6 each, interleaved); over more rows the views stay views (the tables would hold
    the views' rows in memory); the run views' rows are then read from the ones kept between reports
    (:mod:`.kept`).  With ``memory`` (``"150MB"``; only with ``materialize``), DuckDB holds at most that much
    and spills to a private folder past it (:data:`REPORT_MEMORY`)."""
    con, release = _store_connect(store, directory, fresh, sql, materialize, memory)
    try:
        yield con
    finally:
        con.close()
        release()
        _save_parsed(analytics_dir(store, directory))


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


