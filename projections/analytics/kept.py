"""Per-run views kept between metrics reports: the rows of each run view (``Analytics.run_views``) in a
DuckDB file beside the Parquet facts, at the facts' checkpoint, and after new events computed again only
for the streams those events touched.

A metrics report reads its views dozens of times; over the Parquet facts each read evaluated the view
stack again (a task's status history at 10^6 events: 79,485 rows, half a CPU second per evaluation),
so a report after new events cost what the whole store costs.  Kept, a view's rows are evaluated once,
and after new events the report's views cost what the touched runs' facts cost: the streams the new
events belong to are read from the ``events`` facts after the kept checkpoint (their files, by position),
every fact table is narrowed to those streams, each run view is evaluated over what is left and its rows
replace that stream's kept rows.  Exact by construction when the views are per stream (the property
:class:`Analytics.run_views` states; ``tests/test_metrics_partial.py`` holds every declared view to it
and a report after any append sequence to the report computed from scratch).

A table updated stream by stream holds its rows in another order than one built at once; the sections
are written not to depend on the order of their input (lists are sorted, ``arg_max`` breaks ties by
position), as they already had to for DuckDB's parallel scans.  A sum of floats is the one exception
there is: its last bits may differ, below the report's four decimal places.

    >>> with reading(store, materialize=True) as con:   # binds the kept views when it can
    ...     con.execute("SELECT count(*) FROM taskmaster_task_history").fetchall()
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from eventstore.errors import EvstoreError
from projections.analytics.facts import Catalog, catalog
from projections.analytics.files import KEPT, sql_string
from projections.analytics.views import closure, define_facts, facts_within, fitting, insert_rows

if TYPE_CHECKING:
    from eventstore.store import EventStore
    from projections.analytics.files import Manifest

#: Bump when what the file holds changes meaning (its tables are then built again).
KEPT_FORMAT = 2
#: The table, in the kept file, of the position at which each run view's rows last changed (a report at an
#: earlier position shows what a section of those views alone computes now: :func:`unchanged_since`).
CHANGES = "kept_changes"
_CHANGES_COLUMNS = "view VARCHAR, position BIGINT"
#: Past this many touched streams, they are narrowed by a join rather than a list of their ids.
LISTED_STREAMS = 2_000
#: Past this many disjoint stretches of the log holding the touched old streams' facts, the facts are read
#: from the first of them on (a condition of thousands of ranges costs more to evaluate than it skips).
SPANS = 256
#: Past this many fact rows (about 10^6 events of the demo's runs), a first build of the kept rows computes them
#: a share of the runs at a time, each share's facts about this many rows: evaluated at once, the run views
#: over 2.6 * 10^7 fact rows ran out of the report's 100 MB and took 2.2 GB at DuckDB's own limit.
BUILD_ROWS = 2_500_000


@dataclass
class Update:
    """What binding the kept views did: ``streams`` the runs computed again (None: every run, the
    tables built from scratch; 0: already at the checkpoint), ``rows`` the rows written, ``same`` the run
    views whose rows of those runs were kept as they were (no fact table they read has a new fact), ``narrowed``
    the fact tables and views of ``same`` narrowed to those runs for the views computed again."""

    streams: int | None
    rows: int
    same: frozenset[str] = frozenset()
    narrowed: frozenset[str] = frozenset()


#: The last update in this process (what the tests read: how many runs a report computed again).
last: Update | None = None


def _key(cat: Catalog, store_id: str) -> str:
    """What the kept rows depend on besides the log: the store, the catalog and each run view's SQL."""
    parts = [KEPT_FORMAT, store_id, cat.version, [(v, cat.views[v]) for v in cat.run_views]]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]


def check(cat: Catalog, depends: dict[str, frozenset[str]]) -> None:
    """Raise if a run view reads anything but the fact tables and other run views (a link table, a view
    over several streams): evaluated over a few streams' facts it would not give those streams' rows."""
    allowed = set(cat.tables) | set(cat.run_views)
    for view in cat.run_views:
        stray = sorted(depends.get(view, frozenset()) - allowed)
        if stray:
            owner = cat.owners.get(view) or "the shared analytics"
            raise EvstoreError(f'The run view "{view}" ({owner}) reads {", ".join(stray)}, which are not per-run '
                               "facts or run views; remove it from run_views.")


def bind(con: duckdb.DuckDBPyConnection, store: EventStore, directory: Path, m: Manifest,
         depends: dict[str, frozenset[str]]) -> bool:
    """Bring the kept run views to ``m``'s checkpoint and make ``con`` read them (the kept file attached read-only
    and in ``con``'s search path: a run view's name finds its kept table); False if they cannot be used (another
    process or connection is updating them, or has moved them past ``m``): ``con`` then reads the views over the
    facts, as before.  ``con`` holds none of the catalog's views and of its fact tables those the caller defined:
    the update evaluates the run views' SQL itself (over the narrowed facts, or over every fact table, which a
    build defines), and the caller defines the other views (over these rows) or, if this fails, every view."""
    global last
    cat = catalog()
    if not cat.run_views:
        return False
    check(cat, depends)
    path = directory / KEPT
    db = con.execute("SELECT current_database()").fetchall()[0][0]
    for _attempt in range(2):
        if not _attach(con, path, read_only=False):
            return False
        # The kept rows' order is no result's (see above): without keeping it, DuckDB streams a view's rows
        # into its table instead of holding them all, and stays within the connection's memory limit.
        con.execute("SET preserve_insertion_order = false")
        stale = False
        try:
            # each statement steps its memory limit up where DuckDB cannot fit it (views.fitting), and so
            # does the whole update (a test makes it fail once)
            update = fitting(con, lambda: _update(con, store, cat, db, m, depends))
        except _Stale:
            stale = True
        finally:
            con.execute("RESET preserve_insertion_order")
            con.execute("DETACH kept")
        if not stale:
            break
        try:  # a new file: nothing of the old rows (an erased payload's) stays in its free pages
            path.unlink(missing_ok=True)
            path.with_name(path.name + ".wal").unlink(missing_ok=True)
        except OSError:
            return False
    else:
        return False
    if update is None:
        return False
    # Read-only from here: other processes may read the same rows at the same time.
    if not _attach(con, path, read_only=True):
        return False
    state = con.execute("SELECT key, position, hash FROM kept.kept_state").fetchall()
    if state != [(_key(cat, m.store_id), m.position, m.hash)]:  # moved on between the two attaches
        con.execute("DETACH kept")
        return False
    # A run view's name finds its kept table: after the connection's own schemas, DuckDB looks in the search path
    # (no temporary view a run view: 30 of them took 9-19 ms to create at 10^7 events, and each query expanded them).
    db_main = con.execute("SELECT current_database()").fetchall()[0][0]
    con.execute(f"SET search_path = {sql_string(f'{db_main}.main,kept.main')}")
    last = update
    return True


def unchanged_since(con: duckdb.DuckDBPyConnection, views: Iterable[str], position: int,
                    changes: dict[str, int] | None = None) -> bool:
    """Whether the kept rows ``con`` reads (:func:`bind` made it) of each of ``views`` (run views) are the rows
    they were at ``position``: no update since changed them (an update changes a view's rows when a stream it
    touched has rows in it before or after; a build changes every view).  False if ``con`` does not read kept
    rows, or a view is not among them.  ``changes``: :func:`changed_at` of ``con``, read once for many views."""
    wanted = set(views)
    if not wanted:
        return False
    if changes is None:
        changes = changed_at(con)
    return wanted <= changes.keys() and max(changes[v] for v in wanted) <= position


def changed_at(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """The position of the kept update that last changed each run view's rows ``con`` reads (none if it reads
    no kept rows)."""
    try:
        return dict(con.execute(f"SELECT view, max(position) FROM kept.{CHANGES} GROUP BY view").fetchall())
    except duckdb.Error:  # not attached: the views are read over the facts
        return {}


def _attach(con: duckdb.DuckDBPyConnection, path: Path, *, read_only: bool) -> bool:
    mode = " (READ_ONLY)" if read_only else ""
    for attempt in range(2):
        try:
            con.execute(f"ATTACH {sql_string(str(path))} AS kept{mode}")
            return True
        except duckdb.Error as exc:  # locked by another process, attached by another connection, unreadable
            if attempt or read_only or "lock" in str(exc).lower() or "conflict" in str(exc).lower():
                return False
            if not path.exists():
                return False
            try:  # not a DuckDB file this version reads (a crash, an older DuckDB): the rows are derived
                path.unlink()
            except OSError:
                return False
    return False


class _Stale(Exception):
    """The kept rows were computed from other facts (the tables were rebuilt, as an erasure does, or by
    another catalog): they are replaced by a new file."""


def _basis(m: Manifest) -> list[str]:
    """What the kept rows are of: the build of ``m``'s tables (``Manifest.build``: a refresh adds files and a
    compaction merges small ones, of the same facts; a rebuild is another build).  A manifest without one
    (written by an older evstore): its ``events`` files, every one of which must still be listed; there a
    compaction, every ``files.COMPACT_AT`` refreshes, built the kept rows again from every fact (30-40 s at
    10^7 events)."""
    if m.build:
        return [f"build:{m.build}"]
    return sorted(str(f["file"]) for f in m.files["events"])


def _update(con: duckdb.DuckDBPyConnection, store: EventStore, cat: Catalog, db: str,
            m: Manifest, depends: dict[str, frozenset[str]]) -> Update | None:
    """Bring the attached ``kept`` to ``m`` (None: it is past ``m``, leave it)."""
    key, basis = _key(cat, m.store_id), _basis(m)
    con.execute("CREATE TABLE IF NOT EXISTS kept.kept_state (key VARCHAR, position BIGINT, hash VARCHAR, "
                "basis VARCHAR)")
    con.execute(f"CREATE TABLE IF NOT EXISTS kept.{CHANGES} ({_CHANGES_COLUMNS})")
    try:
        state = con.execute("SELECT key, position, hash, basis FROM kept.kept_state").fetchall()
    except duckdb.Error as exc:  # a file of another layout (an older evstore's)
        raise _Stale from exc
    after: int | None = None  # None: build every run view from scratch
    if state:
        old_key, position, hash_, old_basis = state[0]
        if old_key == key and position > m.position:
            return None  # another process brought them past this connection's facts
        if old_key == key and set(json.loads(old_basis)) <= set(basis):
            if position == m.position and hash_ == m.hash:
                return Update(0, 0)
            at = store.hash_at(position) if position else None
            if position and at is not None and at.hex() == hash_:
                after = position
        if after is None:
            raise _Stale
    changed: set[str] = set(cat.run_views)  # the views whose rows this update changed
    same: set[str] = set()
    narrowed: set[str] = set()
    if after is None:
        rows = _build(con, cat, db, m)
        streams: int | None = None
    else:
        con.execute("CREATE OR REPLACE TEMP TABLE kept_touched AS SELECT DISTINCT stream_id FROM "
                    f"{facts_within(con, 'events', [(int(after) + 1, None)], db)} WHERE position > {int(after)}")
        streams = int(con.execute("SELECT count(*) FROM kept_touched").fetchall()[0][0])
        rows, changed = 0, set()
        if streams:
            fresh = _fresh_tables(m, after)
            same = {v for v in cat.run_views if not _facts_read(cat, depends, v) & fresh}
            read = set().union(*(_facts_read(cat, depends, v) for v in cat.run_views if v not in same))
            rows, changed, narrowed = _narrowed(con, cat, db, streams, after, same=same, held=read, depends=depends)
    con.execute("BEGIN")
    try:
        con.execute("DELETE FROM kept.kept_state")
        con.execute("INSERT INTO kept.kept_state VALUES (?, ?, ?, ?)", [key, m.position, m.hash, json.dumps(basis)])
        # a view without a row (a file an older evstore wrote) counts as changed now
        changed |= set(cat.run_views) - {r[0] for r in con.execute(f"SELECT view FROM kept.{CHANGES}").fetchall()}
        if changed:
            con.execute(f"DELETE FROM kept.{CHANGES} WHERE list_contains(?::VARCHAR[], view)", [sorted(changed)])
            insert_rows(con, f"kept.{CHANGES}", _CHANGES_COLUMNS, [(v, m.position) for v in sorted(changed)])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return Update(streams, rows, frozenset(same), frozenset(narrowed))


def _clear(con: duckdb.DuckDBPyConnection) -> None:
    """Drop every kept table (inside the caller's transaction): a build starts from none."""
    con.execute("DELETE FROM kept.kept_state")  # until the rows are all written, they are no position's
    con.execute(f"DELETE FROM kept.{CHANGES}")  # every view changes (_update says so when the rows are written)
    for (name,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = 'kept' "
                               f"AND table_name NOT IN ('kept_state', '{CHANGES}')").fetchall():
        con.execute(f"DROP TABLE kept.main.{name}")


def _build(con: duckdb.DuckDBPyConnection, cat: Catalog, db: str, m: Manifest) -> int:
    """Every run view's rows, from every fact (the first report, in a new file): at once, or past
    ``BUILD_ROWS`` fact rows a share of the runs at a time (:func:`_build_in_shares`).  Each view's table is
    written in a statement of its own (:func:`_created`), not in one transaction: a statement DuckDB cannot fit
    runs again (an aborted transaction would run everything again), and what an unfinished build wrote is no
    position's (``kept_state`` is emptied first and written last, by :func:`_update`)."""
    define_facts(con, cat.tables)  # every fact is read (the views' SQL names the tables; the shares read events)
    if m.rows() > BUILD_ROWS:
        return _build_in_shares(con, cat, db, m)
    con.execute("BEGIN")
    try:
        _clear(con)
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    rows, made = 0, []
    try:
        for view in cat.run_views:  # a later run view reads the rows of an earlier one, not its view again
            rows += _created(con, f"kept.main.{view}", cat.views[view], "SELECT DISTINCT stream_id FROM events")
            con.execute(f"CREATE TEMP VIEW {view} AS SELECT * FROM kept.main.{view}")
            made.append(view)
    finally:
        for view in made:
            con.execute(f"DROP VIEW IF EXISTS temp.main.{view}")
    return rows


#: Where DuckDB cannot fit a run view's statement at the connection's memory limit, its rows are computed a range
#: of the runs at a time, in each of these numbers of ranges in turn, before :func:`views.fitting` steps the limit
#: up.  The rows of a view per run are those of its ranges together; a range is a filter on ``stream_id``, which
#: DuckDB pushes into each run view's scans of the facts (past its aggregates: a test holds every run view to it).
#: The aggregate of every API message of 10^6 transcript lines (``claude_stream_messages``: 274,281 groups of 21
#: states, which DuckDB does not spill) held 290 MB on two threads; in four ranges it fits 100 MB, and the first
#: report's process peaked at 199 MB instead of 408-420 (``benchmarks/bench_claude_store.py``).
RANGES = (2, 4, 16)


def _created(con: duckdb.DuckDBPyConnection, table: str, sql: str, runs: str) -> int:
    """``CREATE TABLE table AS sql`` (a run view's rows; ``table``: in the kept file, or without a schema a
    temporary one), outside a transaction: the rows written.  Where DuckDB cannot fit it, ``table`` is written
    a range of the runs at a time (:data:`RANGES`; ``runs``: a query of the stream ids the view has rows of, which
    cuts them), and in the most ranges at each of :func:`views.fitting`'s steps up."""
    for ranges in (1, *RANGES[:-1]):
        try:
            return _in_ranges(con, table, sql, runs, ranges)
        except duckdb.OutOfMemoryException:
            pass
    return fitting(con, partial(_in_ranges, con, table, sql, runs, RANGES[-1]))


def _in_ranges(con: duckdb.DuckDBPyConnection, table: str, sql: str, runs: str, ranges: int) -> int:
    """``table`` with ``sql``'s rows, at once or in ``ranges`` ranges of the stream ids of ``runs`` (as many ids
    each), then the rows without a stream (a run view has none; were there any, here they are too): the rows
    written, each count fetched before anything else runs (after a statement that ran again at a higher limit,
    ``views.fitting`` sets the limit back, and an answer not fetched yet would be that ``SET``'s)."""
    create = f"CREATE TABLE {table}" if "." in table else f"CREATE TEMP TABLE {table}"
    if ranges == 1:
        return int(con.execute(f"{create} AS {sql}").fetchall()[0][0])  # (a statement that failed made none)
    bounds = sorted(con.execute(f"SELECT list_distinct(quantile_disc(stream_id, ?)) FROM ({runs})",
                                [[i / ranges for i in range(1, ranges)]]).fetchall()[0][0] or [])
    edges = [None, *bounds, None]
    parts: list[tuple[str, list[str]]] = []
    for lo, hi in zip(edges, edges[1:], strict=False):
        conditions = [c for c, edge in (("stream_id >= ?", lo), ("stream_id < ?", hi)) if edge is not None]
        parts.append((" AND ".join(conditions) or "stream_id IS NOT NULL", [e for e in (lo, hi) if e is not None]))
    parts.append(("stream_id IS NULL", []))
    con.execute(f"DROP TABLE IF EXISTS {table}")  # what an attempt in fewer ranges wrote
    con.execute(f"{create} AS SELECT * FROM ({sql}) LIMIT 0")
    return sum(int(con.execute(f"INSERT INTO {table} SELECT * FROM ({sql}) WHERE {where}", params).fetchall()[0][0])
               for where, params in parts)


def _build_in_shares(con: duckdb.DuckDBPyConnection, cat: Catalog, db: str, m: Manifest) -> int:
    """Every run view's rows, computed for a share of the runs at a time: runs in the order they began, cut
    where their events reach about ``BUILD_ROWS`` fact rows, each share's facts read from its runs' stretches
    of the log.  A run view's rows for a run come from that run's facts alone, so the rows are those of one
    evaluation over every fact; but what one evaluation holds (a window over every task's history, at 10^7
    events) grew with the store, past the connection's memory bound, where a share's does not."""
    con.execute("BEGIN")
    made: list[str] = []
    try:
        _clear(con)
        for view in cat.run_views:  # empty, with each view's columns (a later one reads an earlier one's)
            con.execute(f"CREATE TABLE kept.main.{view} AS SELECT * FROM ({cat.views[view]}) LIMIT 0")
            con.execute(f"CREATE TEMP VIEW {view} AS SELECT * FROM kept.main.{view}")
            made.append(view)
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    finally:
        for view in made:
            con.execute(f"DROP VIEW IF EXISTS temp.main.{view}")
    events = sum(int(f["rows"]) for f in m.files["events"])
    share = max(1, BUILD_ROWS * events // max(m.rows(), 1))  # events a share
    con.execute(f"""CREATE OR REPLACE TEMP TABLE kept_shares AS
        SELECT stream_id, first_position, last_position,
               (sum(events) OVER (ORDER BY first_position, stream_id ROWS UNBOUNDED PRECEDING) - 1) // {share} AS share
        FROM (SELECT stream_id, min(position) AS first_position, max(position) AS last_position, count(*) AS events
              FROM {db}.main.events GROUP BY stream_id)""")
    rows = 0
    try:
        shares = int(con.execute("SELECT coalesce(max(share) + 1, 0) FROM kept_shares").fetchall()[0][0])
        for i in range(shares):
            con.execute(f"CREATE OR REPLACE TEMP TABLE kept_touched AS SELECT stream_id FROM kept_shares WHERE share = {i}")
            stretches = con.execute("SELECT first_position, last_position FROM kept_shares "
                                    f"WHERE share = {i} ORDER BY 1").fetchall()
            if stretches:
                rows += _narrowed(con, cat, db, len(stretches), 0, stretches)[0]
                # the share's rows written out: until a checkpoint, the attached file's new blocks stay in
                # the connection's memory, and the shares' together would fill it
                con.execute("CHECKPOINT kept")
    finally:
        con.execute("DROP TABLE IF EXISTS temp.main.kept_shares")
    return rows


def _stretches_kept(con: duckdb.DuckDBPyConnection) -> list[tuple[int, int]]:
    """Where in the log the touched streams the kept rows had were (first, last position), ordered.  With
    the new events (after the kept checkpoint) they hold every fact of the touched streams: the facts' files
    are written in log order, and DuckDB skips a file's row groups whose positions are outside every stretch
    unread (:func:`_spans`), so new events in old runs cost those runs' stretches of the log, not
    everything after the oldest of them (past ``SPANS`` disjoint stretches, everything from the oldest's first
    event)."""
    return con.execute("SELECT first_position, last_position FROM kept.main.stream_positions "
                       "WHERE stream_id IN (SELECT stream_id FROM kept_touched) ORDER BY 1").fetchall()


def _spans_sql(spans: list[tuple[int, int | None]], after: int | None) -> str:
    """``position`` within one of ``spans`` (:func:`_spans`) as SQL."""
    terms = [f"position BETWEEN {a} AND {b}" if b is not None
             else f"position > {after}" if after is not None and a == after + 1 else f"position >= {a}"
             for a, b in spans]
    return terms[0] if len(terms) == 1 else "(" + " OR ".join(terms or ["false"]) + ")"


def _spans(stretches: list[tuple[int, int]], after: int | None) -> list[tuple[int, int | None]]:
    """The positions within one of ``stretches`` (first, last; ordered by first), merged where they touch, or after
    ``after`` (None: nothing after), as (first, last) spans (last None: no end); past ``SPANS`` disjoint ones, from
    the first of them on (to the last of them, without ``after``).  They also say which files of a fact table can
    hold them (``views.facts_within``); :func:`_spans_sql` makes them a condition."""
    merged: list[list[int]] = []
    for first, last in stretches:
        if merged and first <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], int(last))
        else:
            merged.append([int(first), int(last)])
    if len(merged) > SPANS:
        return [(merged[0][0], None if after is not None else max(b for _a, b in merged))]
    return [(a, b) for a, b in merged] + ([(int(after) + 1, None)] if after is not None else [])


def _fresh_tables(m: Manifest, after: int) -> set[str]:
    """The fact tables that may hold a fact after position ``after``: a file of rows reaching past it."""
    return {table for table, listed in m.files.items() if any(f["rows"] and f["upto"] > after for f in listed)}


def _facts_read(cat: Catalog, depends: dict[str, frozenset[str]], view: str) -> frozenset[str]:
    """The fact tables ``view`` reads, through the views it reads."""
    return frozenset(closure(depends, [view]) & cat.tables.keys())


def _narrowed(con: duckdb.DuckDBPyConnection, cat: Catalog, db: str, streams: int, after: int,
              stretches: list[tuple[int, int]] | None = None, *, same: set[str] | frozenset[str] = frozenset(),
              held: set[str] | frozenset[str] = frozenset(),
              depends: dict[str, frozenset[str]] | None = None) -> tuple[int, set[str], set[str]]:
    """Replace the touched streams' rows of every run view with the rows of their facts alone (``stretches``:
    where in the log those facts are, (first, last) positions ordered by first, if not where the kept rows and
    the new events say; given, the touched streams have no kept rows yet): the rows written, and the views
    whose rows changed (a touched stream had rows in it, or has: a view none of the touched streams is in,
    before or after, holds the rows it held), and the names narrowed (below).
    The views in ``same`` read no fact table that has a fact after the kept checkpoint: a run's rows come from
    its facts alone, so theirs are the rows kept, not computed again (a view read by a later one is read from
    the kept rows).  The fact tables in ``held`` are narrowed once, into a temporary table each, rather than in
    every view that reads them: at 10^7 events each scan of the ``events`` files for the touched runs took
    35-40 ms, and six run views read them.  When no touched stream had a fact before (new runs only: none is in
    ``stream_positions``, which every stream with an event is in), no kept row is theirs, and the kept tables
    are not searched for rows to delete (a scan of each whole table).

    With ``depends`` (what each view reads: ``views._depends``), only the fact tables and the views in ``same`` that
    a view computed here reads are narrowed (DuckDB creates and drops each in half a millisecond or more: the 17
    fact tables and 23 views of ``same`` a note touches at 10^7 events took 0.06 s); without it, all of them."""
    if streams <= LISTED_STREAMS:
        # A list of ids is pushed into the Parquet scans as a filter.  A view takes no parameter, so the
        # ids are bound to a variable that its filter reads (DuckDB folds it into the scan's filter,
        # as it would a literal list): stream ids are data, never SQL text.
        ids = [r[0] for r in con.execute("SELECT stream_id FROM kept_touched ORDER BY 1").fetchall()]
        con.execute("SET VARIABLE kept_touched_ids = ?::VARCHAR[]", [ids])
        within = "list_contains(getvariable('kept_touched_ids'), stream_id)"
    else:
        within = "stream_id IN (SELECT stream_id FROM kept_touched)"
    tail: int | None
    if stretches is None:  # where the kept rows had the touched streams, and the new events
        stretches = old = _stretches_kept(con)
        tail = after
    else:  # given: no kept row is the touched streams', and nothing after
        old, tail = [], None
    spans = _spans(stretches, tail)
    within = f"{_spans_sql(spans, tail)} AND {within}"
    rows, made, changed, narrowed = 0, [], set(), set()
    computed = [v for v in cat.run_views if v not in same]
    read = None if depends is None else set().union(*(depends.get(v, cat.tables.keys() | same) for v in computed))
    # The facts, narrowed (from the files that can hold them): the catalog's views read these names first
    # (temporary objects shadow them).
    for table in cat.tables:
        if read is not None and table not in read:
            continue
        source = facts_within(con, table, spans, db)
        narrowed.add(table)
        if table in held and streams <= LISTED_STREAMS:  # a few runs' facts (past that, read where they are)
            con.execute(f"CREATE TEMP TABLE kept_facts_{table} AS SELECT * FROM {source} WHERE {within}")
            con.execute(f"CREATE TEMP VIEW {table} AS SELECT * FROM kept_facts_{table}")
            made += [f"TABLE temp.main.kept_facts_{table}", f"VIEW temp.main.{table}"]
        else:
            con.execute(f"CREATE TEMP VIEW {table} AS SELECT * FROM {source} WHERE {within}")
            made.append(f"VIEW temp.main.{table}")
    try:
        for view in cat.run_views:  # in catalog order: a run view read by a later one is computed first
            if view in same:
                if read is not None and view not in read:
                    continue
                narrowed.add(view)
                con.execute(f"CREATE TEMP VIEW {view} AS SELECT * FROM kept.main.{view} "
                            "WHERE stream_id IN (SELECT stream_id FROM kept_touched)")
                made.append(f"VIEW temp.main.{view}")
                continue
            # outside a transaction: a statement DuckDB cannot fit runs again at a higher limit (views.fitting)
            made.append(f"TABLE temp.main.kept_new_{view}")  # (a CREATE TABLE AS answers the rows it wrote)
            new = _created(con, f"kept_new_{view}", cat.views[view], "SELECT stream_id FROM kept_touched")
            con.execute(f"CREATE TEMP VIEW {view} AS SELECT * FROM kept_new_{view}")  # what later ones read
            made.append(f"VIEW temp.main.{view}")
            rows += new
            if new:
                changed.add(view)
        con.execute("BEGIN")
        try:
            con.execute("DELETE FROM kept.kept_state")
            for view in computed:
                if old:  # else no touched stream has a kept row (above)
                    gone = con.execute(f"DELETE FROM kept.main.{view} "
                                       "WHERE stream_id IN (SELECT stream_id FROM kept_touched)").fetchall()
                    if gone and gone[0][0]:
                        changed.add(view)
                con.execute(f"INSERT INTO kept.main.{view} BY NAME SELECT * FROM kept_new_{view}")
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
    finally:
        for what in reversed(made):
            kind, name = what.split(" ", 1)
            con.execute(f"DROP {kind} IF EXISTS {name}")
        con.execute("RESET VARIABLE kept_touched_ids")
    return rows, changed, narrowed


__all__ = ["CHANGES", "KEPT", "KEPT_FORMAT", "Update", "bind", "changed_at", "check", "unchanged_since"]
