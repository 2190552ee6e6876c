"""What a dialect declares for analytics, as data: fact tables (event -> rows, column types as
text), DuckDB views (SQL text) and metric sections (SQL text).

A dialect returns one :class:`Analytics` from :meth:`Dialect.analytics`; ``projections.analytics``
turns the tables into Arrow schemas and Parquet files, registers the views in DuckDB, and
``projections.metrics`` runs the sections and ``projections.report`` draws their charts.  Nothing here imports DuckDB or pyarrow: a dialect
states *what* its facts are, the projections decide how they are stored and queried.

Fact rows are flattened *statelessly*: a row function sees one event (its payload decoded) and
appends rows; anything that needs history is a view.  Every row starts with the event's
``position`` and ``stream_id``, then the table's declared columns in order.

    >>> Analytics(
    ...     version=1,
    ...     tables=(Table("mytool_events", (("kind", "VARCHAR"), ("occurred_at", "TIMESTAMPTZ"))),),
    ...     rows={"mytool.step_done": lambda out, e, p, at: out["mytool_events"].append(
    ...         (e.position, e.stream_id, "step_done", at))},
    ...     views={"mytool_steps": "SELECT stream_id, count(*) AS steps FROM mytool_events GROUP BY ALL"},
    ...     sections=(MetricSection("mytool_steps", "Steps per run", ("stream_id", "steps"),
    ...                             "SELECT * FROM mytool_steps WHERE stream_id IN (SELECT stream_id FROM sel)"),))
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from eventstore.store import RecordedEvent

#: The column types a fact table may declare (DuckDB's names; projections map them to Arrow).
COLUMN_TYPES = ("VARCHAR", "BIGINT", "BOOLEAN", "DOUBLE", "TIMESTAMPTZ")

#: Fact rows being collected: table name -> rows (each ``(position, stream_id, *columns)``).
Rows = dict[str, list[tuple[Any, ...]]]
#: ``row_function(rows, event, payload, occurred_at)`` appends the event's rows to ``rows``.
RowFunction = Callable[[Rows, "RecordedEvent", dict[str, Any], "datetime | None"], None]


class RowFunctions(dict[str, RowFunction]):
    """Event type -> row function, filled with a decorator::

        ROWS = RowFunctions()

        @ROWS.on("mytool.step_done", "mytool.step_redone")
        def _step(rows, e, p, at): ...
    """

    def on(self, *types: str) -> Callable[[RowFunction], RowFunction]:
        def register(fn: RowFunction) -> RowFunction:
            for t in types:
                self[t] = fn
            return fn
        return register


@dataclass(frozen=True)
class Table:
    """A fact table: ``position BIGINT, stream_id VARCHAR`` and then ``columns`` (name, type)."""

    name: str
    columns: tuple[tuple[str, str], ...]

    def all_columns(self) -> tuple[tuple[str, str], ...]:
        return (("position", "BIGINT"), ("stream_id", "VARCHAR"), *self.columns)


@dataclass(frozen=True)
class Chart:
    """How the HTML report draws a section, if at all (inline SVG; no library).

    ``kind`` "bars": one horizontal bar per row, its length the column ``values[0]``, whiskers from
    the ``interval`` columns (low, high); rows whose value is null are left out.  ``kind`` "groups":
    vertical bars grouped per row, one series per column of ``values`` (named by ``series``), nulls
    drawn as 0.  ``label`` names a row (``str.format`` over its columns, e.g. ``"iter {iteration}"``);
    values are divided by ``scale`` (60: seconds as minutes); ``integer`` prints them whole."""

    kind: str
    title: str
    label: str
    values: tuple[str, ...]
    series: tuple[str, ...] = ()
    interval: tuple[str, str] | None = None
    max_value: float | None = None
    scale: float = 1.0
    integer: bool = False


@dataclass(frozen=True)
class MetricSection:
    """One section of ``evstore metrics``: ``sql`` gives its rows, ``summary_sql`` (one row) its
    summary figures.  Both run with a table ``sel`` holding the stream ids in scope (filter with
    ``stream_id IN (SELECT stream_id FROM sel)``); every value a user gives is bound there, never
    written into this SQL.  ``finish(rows, summary)`` may add computed columns in Python, or take the summary from
    the rows (a statement whose last row is the total: ``GROUP BY GROUPING SETS``, one reading of its input).

    ``per_run``: the rows and the summary are computed from the run views the SQL reads (``Analytics.run_views``),
    for the runs in ``sel``, and from nothing else: ``runs`` may be read only to look up a column of a run that
    has rows in those views, and ``sel`` only to filter them (``stream_id IN (SELECT stream_id FROM sel)``; not,
    say, to count the runs in scope).  Then a run with no row in those views changes nothing in the section,
    and a report after new events shows the section of the last report kept if no run those events touched
    is in its views (``projections.metrics``; ``tests/test_metrics_partial.py`` holds every such section to
    it).  A section reading anything else is computed every time whatever it declares.

    ``when``: a query that returns a row when the section may have rows to show; when it returns none, the
    section is shown without rows or summary figures, and ``sql`` and ``summary_sql`` are not run (DuckDB plans
    and runs every part of a statement, even one joined to nothing).  Like them it runs with ``sel``."""

    name: str
    title: str
    columns: tuple[str, ...]
    sql: str
    summary_sql: str | None = None
    note: str = ""
    finish: Callable[[list[dict[str, Any]], dict[str, Any]], None] | None = None
    chart: Chart | None = None
    per_run: bool = False
    when: str | None = None

    @property
    def queries(self) -> tuple[str, ...]:
        """Every statement the section may run (``sql``, ``summary_sql``, ``when``): what it reads is what these read."""
        return tuple(q for q in (self.sql, self.summary_sql, self.when) if q)


@dataclass(frozen=True)
class Analytics:
    """A dialect's analytics: its fact tables, the row functions filling them, views, sections.

    * ``rows``: event type -> row function.  Keys are the dialect's own catalog tags, or a
      document event type (``document.observed``, ...), which then applies to this dialect's
      streams only.  A row function may also write the shared tables (``run_attrs``,
      ``phase_events``, ``gate_events``: see ``projections.analytics.facts.CORE``).
      Views may also read the link table ``run_sessions`` (stream_id, session_id: the sessions
      that wrote a run's state versions, filled when the analytics are read).
    * ``views``: view name -> DuckDB ``SELECT`` over the fact tables (and views listed before).
    * ``view_parts``: shared view name (``phases``) -> this dialect's ``SELECT`` of its rows; the
      shared view is the ``UNION ALL`` of every dialect's part.  A part may read the dialect's own views
      (named in it: they are created before the shared views, and read only its fact tables and each other).
    * ``sections``: cross-run metric sections; ``run_sections``: the sections of ``evstore
      metrics STREAM`` for one of this dialect's runs; ``every_run_sections``: for a run of any
      dialect (e.g. the sessions of this dialect that wrote the run's state).
    * ``run_views``: the views among ``views`` whose rows for a stream are computed from that stream's
      facts alone (every row carries its ``stream_id``; no window, join or aggregate crosses streams,
      no link table is read).  A metrics report keeps their rows and, after new events, computes them
      again only for the streams those events touched (``projections.analytics.kept``); a view that
      relates streams (a session and its subagents' transcripts) must not be listed.  A dialect's
      ``view_parts`` of ``phases`` must be per stream in the same way.
    * ``version``: bump when rows change meaning; the Parquet tables are then rebuilt.
    """

    version: int = 1
    tables: tuple[Table, ...] = ()
    rows: Mapping[str, RowFunction] = field(default_factory=dict)
    views: Mapping[str, str] = field(default_factory=dict)
    view_parts: Mapping[str, str] = field(default_factory=dict)
    sections: tuple[MetricSection, ...] = ()
    run_sections: tuple[MetricSection, ...] = ()
    every_run_sections: tuple[MetricSection, ...] = ()
    run_views: tuple[str, ...] = ()


# ------------------------------------------------------------------ helpers for row functions


def ts(value: Any) -> datetime | None:
    """An ISO 8601 time with a zone (None for anything else: a fact never fails on a source's value)."""
    if type(value) is not str or not value:
        return None
    try:
        when = datetime.fromisoformat(value)  # Python 3.11+ reads the "Z" suffix itself
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


def s(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def i(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def b(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def attr(rows: Rows, e: RecordedEvent, name: str, value: Any) -> None:
    """A run attribute (``project``, ``task_id``, ``title``, ``status``) for the ``runs`` view."""
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        rows["run_attrs"].append((e.position, e.stream_id, name, str(value)))


Z95 = 1.959963984540054  # two-sided 95 % normal quantile


def wilson(accepted: int, raised: int, z: float = Z95) -> tuple[float | None, float | None]:
    """Wilson score interval for ``accepted / raised`` (None, None when nothing was raised)."""
    if raised <= 0:
        return None, None
    p = accepted / raised
    denom = 1 + z * z / raised
    center = (p + z * z / (2 * raised)) / denom
    half = z * math.sqrt(p * (1 - p) / raised + z * z / (4 * raised * raised)) / denom
    # Analytically the bound is exactly 0 (1) when nothing (everything) was accepted; rounding
    # would otherwise leave it a hair off and the interval would miss the observed ratio.
    lo = 0.0 if accepted == 0 else max(0.0, min(p, center - half))
    hi = 1.0 if accepted == raised else min(1.0, max(p, center + half))
    return lo, hi


__all__ = ["COLUMN_TYPES", "Analytics", "Chart", "MetricSection", "RowFunction", "RowFunctions", "Rows", "Table", "attr", "b", "d", "i",
           "items", "s", "ts", "wilson"]
