"""Projections: replay, runs index, analytics, metrics, reports.

For notebooks and scripts, one call gives DuckDB with every analytics view registered::

    import eventstore, projections
    store = eventstore.open()
    con = projections.duckdb(store)          # refreshed Parquet tables, views: runs, gates, ...
    con.sql("select * from gates").df()      # a pandas DataFrame (.pl() for polars)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import duckdb as _duckdb

    from eventstore.store import EventStore

__all__ = ["duckdb"]


def duckdb(store: EventStore, *, refresh: bool = True, directory: Any = None) -> _duckdb.DuckDBPyConnection:
    """A DuckDB connection over ``store``'s analytics tables with every view registered
    (``runs``, ``phases``, ``review_findings``, ``review_deltas``, ``gates``, ``breaker_trips``, ...).

    The Parquet tables are caught up with the log first unless ``refresh`` is False."""
    from projections.analytics import open_analytics

    return open_analytics(store, directory, fresh=refresh)
