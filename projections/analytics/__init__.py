"""Analytics: domain events flattened into columnar tables, written as Parquet, read by DuckDB.

An async, checkpointed projection.  :func:`refresh` reads the log after the checkpoint (position
order, so the cost depends on the new events only), turns every domain event into rows of a
few *fact tables* (:data:`SCHEMAS`), and writes one Parquet file per table and refresh.  The
views the issue names (``runs``, ``phases``, ``review_findings``, ``review_deltas``, ...) are
DuckDB views over those facts (:data:`VIEWS`): they pick the latest state of an iteration, pair
questions with answers, and so on, at query time.

One module per concern: :mod:`.facts` (events -> fact rows and their schemas), :mod:`.files`
(Parquet files, the manifest, refresh, compaction, status), :mod:`.views` (DuckDB views and
connections), :mod:`.kept` (the run views' rows kept between metrics reports, updated for the runs new
events touch) and :mod:`.export` (the log and the tables for other tools); this package re-exports
their public names.

Why facts + views: flattening is *stateless* (each event maps to rows on its own), so applying
events in one batch or in a hundred gives byte-for-byte the same facts, and "incremental ==
rebuild" holds by construction; anything that needs history (latest iteration entry, previous
delta, next answer) is a window function over the facts.

Exactly once, without a database transaction (Parquet lives in a directory):

* every data file is named after the position range it covers plus a random suffix
  (``<table>/part-<after>-<upto>-<rand>.parquet``, never rewritten in place) and written to a
  temporary name, then renamed;
* ``manifest.json`` is the checkpoint *and* the list of live files; it is replaced atomically
  (a uniquely named temporary file, fsync, ``os.replace``) only after every file it lists is in
  place; a refresh writes facts every :data:`FLUSH_EVENTS` events, so memory stays bounded;
* readers (the views) open exactly the files the manifest lists, so a crash between the data
  files and the manifest leaves orphans that nobody reads; the next refresh deletes files the
  manifest does not list before it writes, and re-applies the same positions.

Bound to one store's log: the manifest names the store's identity (:meth:`EventStore.store_id`),
its checkpoint position and the hash of the event there.  Tables of another store, of a deleted
and recreated store, or of a log that no longer has that event are rebuilt by a refresh and
refused by a reader (:func:`mismatch`).  The default directory is the store's own
(:func:`eventstore.config.analytics_directory`), never the working directory's.

Several processes at once: one refresh writes at a time (an inter-process lock file,
:data:`LOCK`); readers take no lock.  A reader opens every file its manifest lists and DuckDB
reads them through those descriptors, so a refresh may delete files a newer manifest no longer
lists (compaction, rebuild) while a query still reads them (:func:`connect`).

Compaction: when a table has more than :data:`COMPACT_AT` *small* files (under
:data:`SMALL_ROWS` rows), they are merged into one file named after their combined range; big
files are never rewritten, so a refresh's cost does not grow with the store's size.  A new
manifest lists the merged file, then the small files are deleted.

Bumping :data:`FLATTEN_VERSION` rebuilds: a manifest with another version is discarded.

    >>> result = refresh(store)                   # writes the store's analytics directory
    >>> with reading(store) as con:               # DuckDB, views registered, checked against the log
    ...     con.sql("SELECT model, count(*) FROM review_findings GROUP BY ALL").fetchall()
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from projections.analytics.export import export_jsonl, export_parquet, jsonable
    from projections.analytics.facts import FLATTEN_VERSION, Catalog, Flattener, catalog
    from projections.analytics.files import (
        COMPACT_AT,
        FLUSH_EVENTS,
        LOCK,
        MANIFEST,
        NAME,
        SMALL_ROWS,
        AnalyticsIOError,
        Manifest,
        RefreshResult,
        analytics_dir,
        compact_tables,
        io_error,
        mismatch,
        refresh,
        replacing,
        status,
    )
    from projections.analytics.views import QueryError, connect, open_analytics, query, reading, table_names

#: Where each public name lives.  The package imports a submodule when one of its names is first asked
#: for (PEP 562), so a command that only refreshes or reads a kept report (``metrics`` on an unchanged
#: store, ``projections status``) never imports DuckDB (0.2-0.4 s): export and views import it.
_WHERE = {
    **dict.fromkeys(("export_jsonl", "export_parquet", "jsonable"), "export"),
    **dict.fromkeys(("FLATTEN_VERSION", "SCHEMAS", "VIEWS", "Catalog", "Flattener", "catalog"), "facts"),
    **dict.fromkeys(("COMPACT_AT", "FLUSH_EVENTS", "LOCK", "MANIFEST", "NAME", "SMALL_ROWS", "AnalyticsIOError",
                     "Manifest", "RefreshResult", "analytics_dir", "compact_tables", "io_error", "mismatch",
                     "refresh", "replacing", "status"), "files"),
    **dict.fromkeys(("QueryError", "connect", "open_analytics", "query", "reading", "table_names"), "views"),
}


def __getattr__(name: str) -> Any:
    # SCHEMAS (fact table -> Arrow schema) and VIEWS (view -> SQL) are the catalog of the dialects
    # registered when asked (a plugin installed later is seen), not frozen at import: facts computes them.
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{where}"), name)


__all__ = ["AnalyticsIOError", "COMPACT_AT", "Catalog", "FLATTEN_VERSION", "FLUSH_EVENTS", "Flattener",
           "LOCK", "MANIFEST", "Manifest", "NAME", "QueryError", "RefreshResult", "SMALL_ROWS",
           "analytics_dir", "catalog", "compact_tables", "connect", "export_jsonl", "export_parquet", "io_error", "jsonable",
           "mismatch", "open_analytics", "query", "reading", "refresh", "replacing", "status", "table_names"]
