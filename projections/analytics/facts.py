"""Analytics facts: every domain event flattened into rows of fact tables, as the dialects declare them.

Each registered dialect declares its fact tables (column types as text), the row functions that
fill them, its views and its metric sections (:meth:`Dialect.analytics`, data of
:mod:`eventstore.dialects.analytics`).  This module gathers those declarations from the registry
into one :class:`Catalog` beside the shared tables (:data:`CORE`) and turns the column types into
Arrow schemas; nothing here names a dialect.

Flattening is *stateless*: each event maps to rows on its own (:class:`Flattener`), so applying
events in one batch or in a hundred gives byte-for-byte the same facts, and "incremental ==
rebuild" holds by construction; anything that needs history is a view (:mod:`.views`).
Bumping :data:`FLATTEN_VERSION` (or a dialect's ``Analytics.version``, or changing any declared
table) changes :attr:`Catalog.version`, which rebuilds every store's tables.

    >>> cat = catalog()
    >>> cat.schemas["events"].names[:3]
    ['position', 'stream_id', 'version']
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache, cached_property
from typing import TYPE_CHECKING, Any

import msgspec

from eventstore import codec
from eventstore.dialects import available, get_dialect
from eventstore.dialects.analytics import COLUMN_TYPES, Chart, MetricSection, RowFunction, Rows, Table, d, s, ts
from eventstore.errors import EvstoreError
from eventstore.records import FactEvent
from eventstore.store import RecordedEvent
from projections.prices import PRICE_KEY_SQL

if TYPE_CHECKING:
    import pyarrow as pa

FLATTEN_VERSION = 5  # 2: claude_events; 3: facts declared by the dialects; 4: state_versions, patched_keys;
# 5: the events' writers (meta.sent_by), api_usage's position

_decode = codec.decode


@cache
def arrow_types() -> dict[str, pa.DataType]:
    """The Arrow type of each declared column type.  pyarrow is imported here,
    when a table is written, not with this module: reading the tables is DuckDB's, and importing
    pyarrow (and numpy) is 0.28 s of CPU that a command reading fresh tables would spend for nothing."""
    import pyarrow as pa

    return {"VARCHAR": pa.string(), "BIGINT": pa.int64(), "BOOLEAN": pa.bool_(), "DOUBLE": pa.float64(),
            "TIMESTAMPTZ": pa.timestamp("us", tz="UTC")}

_T = "TIMESTAMPTZ"

#: The shared fact tables: every event (``events``), run attributes any dialect states
#: (``run_attrs``: project, task_id, title, status, for the ``runs`` view), phases and gate verdicts
#: (``phase_events``, ``gate_events``: a dialect writes its rows with its name in ``dialect``).
CORE: tuple[Table, ...] = (
    # writer_*: who sent the event over the HTTP API (meta.sent_by: the token's name, the machine the client
    # named); ``writer`` is "TOKEN/MACHINE" (or "TOKEN"), NULL for an event written where the store is.
    Table("events", (("version", "BIGINT"), ("type", "VARCHAR"), ("dialect", "VARCHAR"), ("occurred_at", _T),
                     ("recorded_at", _T), ("writer", "VARCHAR"), ("writer_token", "VARCHAR"),
                     ("writer_machine", "VARCHAR"))),
    Table("run_attrs", (("attr", "VARCHAR"), ("value", "VARCHAR"))),
    Table("phase_events", (("dialect", "VARCHAR"), ("phase", "VARCHAR"), ("kind", "VARCHAR"), ("status", "VARCHAR"),
                           ("model", "VARCHAR"), ("retry_count", "BIGINT"), ("sub_step", "VARCHAR"),
                           ("started_at", _T), ("finished_at", _T), ("occurred_at", _T))),
    Table("gate_events", (("dialect", "VARCHAR"), ("gate", "VARCHAR"), ("verdict", "VARCHAR"), ("verdict_at", _T),
                          ("sha", "VARCHAR"), ("occurred_at", _T))),
    # One row per captured source version (the event closing it carries ``meta.source``), any dialect:
    # kind "valid", "unreadable" (document.unreadable) or "removed"; ``captured_at`` its source time, else store time.
    Table("state_versions", (("version", "BIGINT"), ("dialect", "VARCHAR"), ("kind", "VARCHAR"),
                             ("lens_failed", "BOOLEAN"), ("captured_at", _T))),
    # One row per top-level key a document.patched event changes ("" : the whole document), any dialect.
    Table("patched_keys", (("dialect", "VARCHAR"), ("key", "VARCHAR"), ("captured_at", _T))),
)

#: Views every dialect may add rows to (``Analytics.view_parts``): name -> columns (name, type).
#: The view is the ``UNION ALL BY NAME`` of an empty row of these columns and every dialect's part.
SHARED_VIEWS: dict[str, tuple[tuple[str, str], ...]] = {
    "phases": (("stream_id", "VARCHAR"), ("dialect", "VARCHAR"), ("phase", "VARCHAR"), ("started_at", _T),
               ("finished_at", _T), ("status", "VARCHAR"), ("model", "VARCHAR"), ("retries", "BIGINT"),
               ("failures", "BIGINT"), ("skipped", "BOOLEAN"), ("duration_s", "DOUBLE")),
    # One row per model API call (message) an agent session made, counted once, with its final usage:
    # what `evstore usage` and the `usage` view price (projections.usage).
    "api_usage": (("stream_id", "VARCHAR"), ("session_id", "VARCHAR"), ("subagent", "VARCHAR"),
                  ("dialect", "VARCHAR"), ("message_id", "VARCHAR"), ("request_id", "VARCHAR"), ("model", "VARCHAR"),
                  ("occurred_at", _T), ("cwd", "VARCHAR"), ("lines", "BIGINT"), ("input_tokens", "BIGINT"),
                  ("output_tokens", "BIGINT"), ("cache_read_tokens", "BIGINT"), ("cache_creation_tokens", "BIGINT"),
                  ("first_output_tokens", "BIGINT"), ("position", "BIGINT"),
                  # the cache writes by lifetime (NULL from a dialect that does not split them: all 5-minute)
                  ("cache_creation_5m_tokens", "BIGINT"), ("cache_creation_1h_tokens", "BIGINT"),
                  # who sent the event at ``position`` over the HTTP API (the ``events`` facts' writer columns;
                  # NULL: written where the store is)
                  ("writer", "VARCHAR"), ("writer_token", "VARCHAR"), ("writer_machine", "VARCHAR")),
}

#: Views over the shared tables (DuckDB SQL); the dialects' views follow them.
CORE_VIEWS: dict[str, str] = {
    # api_usage priced: the newest row of model_prices (a link table: projections.prices) for the
    # message's model effective at its time (ASOF join); cost_usd NULL, never 0, when there is none.
    # Cache writes at two prices: 5-minute ones at cache_write, 1-hour ones at cache_write_1h (a message
    # with 1-hour writes priced by a row without that price has no price, never a guess).  A message's
    # writer is that of the event recording it first (api_usage.position), which api_usage carries: joined
    # here with the events facts by position, each report read every event of the store (0.4 s at 10^7).
    "usage": f"""
        WITH a AS (SELECT * EXCLUDE (cache_creation_5m_tokens, cache_creation_1h_tokens, writer, writer_token,
                                     writer_machine),
                          coalesce(cache_creation_5m_tokens,
                                   cache_creation_tokens - coalesce(cache_creation_1h_tokens, 0), 0)
                              AS cache_creation_5m_tokens,
                          coalesce(cache_creation_1h_tokens, 0) AS cache_creation_1h_tokens,
                          writer, writer_token, writer_machine
                   FROM api_usage),
        m AS (SELECT a.*, {PRICE_KEY_SQL.format(col="a.model")} AS price_model,
                     coalesce(a.occurred_at, TIMESTAMPTZ '9999-12-31 00:00:00+00') AS priced_at
              FROM a),
        j AS (SELECT m.* EXCLUDE (priced_at), p.effective AS price_effective,
                     p.model IS NOT NULL AND (m.cache_creation_1h_tokens = 0 OR p.cache_write_1h IS NOT NULL) AS priced,
                     p.input, p.output, p.cache_write, p.cache_read, p.cache_write_1h
              FROM m ASOF LEFT JOIN model_prices p ON m.price_model = p.model AND m.priced_at >= p.effective)
        SELECT j.* EXCLUDE (input, output, cache_write, cache_read, cache_write_1h),
               CASE WHEN priced THEN
                   (coalesce(input_tokens, 0) * input + coalesce(output_tokens, 0) * output
                    + cache_creation_5m_tokens * cache_write
                    + CASE WHEN cache_creation_1h_tokens = 0 THEN 0 ELSE cache_creation_1h_tokens * cache_write_1h END
                    + coalesce(cache_read_tokens, 0) * cache_read) / 1e6 END AS cost_usd
        FROM j""",
    # Per stream: what its sessions cost (a session's own stream, and a run through the sessions that
    # wrote its state versions: run_sessions), for the runs index and the run pages.
    "run_usage": """
        WITH own AS (SELECT session_id AS stream_id, session_id FROM (SELECT DISTINCT session_id FROM api_usage)),
        links AS (SELECT DISTINCT stream_id, session_id FROM run_sessions UNION SELECT * FROM own)
        SELECT l.stream_id, count(DISTINCT u.session_id) AS sessions, count(DISTINCT u.subagent) AS subagents,
               count(u.message_id) AS api_messages, sum(u.input_tokens) AS input_tokens,
               sum(u.output_tokens) AS output_tokens, sum(u.cache_creation_tokens) AS cache_creation_tokens,
               sum(u.cache_creation_5m_tokens) AS cache_creation_5m_tokens,
               sum(u.cache_creation_1h_tokens) AS cache_creation_1h_tokens,
               sum(u.cache_read_tokens) AS cache_read_tokens, sum(u.cost_usd) AS cost_usd,
               count_if(NOT u.priced) AS unpriced_messages
        FROM links l JOIN usage u ON u.session_id = l.session_id GROUP BY l.stream_id""",
    "runs": """
        WITH ev AS (
            SELECT stream_id, max(dialect) AS dialect, min(coalesce(occurred_at, recorded_at)) AS started_at,
                   max(coalesce(occurred_at, recorded_at)) AS last_event_at, count(*) AS events,
                   max(version) AS version
            FROM events GROUP BY stream_id),
        -- each attribute's last value, one row per stream: a subquery per attribute made DuckDB hold
        -- 80 MB where this holds 30 (10^6 events; benchmarks/bench_metrics.py --first)
        attrs AS (
            SELECT stream_id, arg_max(value, position) FILTER (WHERE attr = 'project') AS project,
                   arg_max(value, position) FILTER (WHERE attr = 'task_id') AS task_id,
                   arg_max(value, position) FILTER (WHERE attr = 'title') AS title,
                   arg_max(value, position) FILTER (WHERE attr = 'status') AS status
            FROM run_attrs WHERE attr IN ('project', 'task_id', 'title', 'status') GROUP BY stream_id)
        SELECT ev.stream_id, ev.dialect, a.project, coalesce(a.task_id, ev.stream_id) AS task_id, a.title,
               a.status, ev.started_at, ev.last_event_at, ev.events, ev.version
        FROM ev LEFT JOIN attrs a USING (stream_id)""",
    "gates": """
        SELECT stream_id, dialect, gate, verdict, verdict_at, sha, occurred_at, position,
               row_number() OVER (PARTITION BY stream_id, gate ORDER BY position) AS attempt
        FROM gate_events""",
    # One row per captured state version with the time since the stream's version before it (the
    # ``histories`` section; kept per run, the window is not evaluated again over every version).
    "version_gaps": """
        SELECT stream_id, dialect, kind, lens_failed, position,
               epoch(captured_at) - epoch(lag(captured_at) OVER (PARTITION BY stream_id ORDER BY position)) AS gap_s
        FROM state_versions""",
    # Per stream and dialect: its captured versions, the unreadable and removed ones and the lens's failures
    # (the ``histories`` section adds these up: a report reads a row per stream, not one per version).
    "version_counts": """
        SELECT stream_id, dialect, count(*) AS n, count_if(kind = 'unreadable') AS unreadable,
               count_if(kind = 'removed') AS removed, count_if(lens_failed) AS lens_failures
        FROM version_gaps GROUP BY ALL""",
    # Per gate and stream: its verdicts counted, its first pass/fail verdict, its first fail and last pass (the
    # ``gates`` section adds these up, a row per run and gate, where it grouped every verdict: 61 MB at 10^7).
    "gate_runs": """
        SELECT gate, stream_id, count_if(verdict = 'pass') AS pass, count_if(verdict = 'fail') AS fail,
               count_if(verdict = 'not-applicable') AS not_applicable,
               count_if(verdict NOT IN ('pass', 'fail', 'not-applicable') OR verdict IS NULL) AS other,
               arg_min(verdict, position) FILTER (WHERE verdict IN ('pass', 'fail')) AS first_verdict,
               min(position) FILTER (WHERE verdict = 'fail') AS first_fail,
               max(position) FILTER (WHERE verdict = 'pass') AS last_pass
        FROM gates GROUP BY ALL""",
    # Where each stream starts and ends in the log: an update of the kept run views reads the touched
    # streams' facts from those stretches only (projections.analytics.kept).
    "stream_positions": """
        SELECT stream_id, min(position) AS first_position, max(position) AS last_position
        FROM events GROUP BY stream_id""",
    # Per stream and writer: its events, first and last store time (the ``writers`` section).
    "run_writers": """
        SELECT stream_id, writer, any_value(writer_token) AS token, any_value(writer_machine) AS machine,
               count(*) AS events, min(recorded_at) AS first_at, max(recorded_at) AS last_at
        FROM events GROUP BY stream_id, writer""",
    # Per stream, dialect and top-level key (as the ``changing_keys`` section names it: "" is the whole
    # document): the patches changing it and the last one's time.  The key is named here, not in the
    # section, so that a stream has one row per name the section groups by.
    "key_changes": """
        SELECT stream_id, dialect, CASE WHEN key = '' THEN '(whole document)' ELSE key END AS key,
               count(*) AS changes, max(captured_at) AS last_changed
        FROM patched_keys GROUP BY ALL""",
}

#: The shared views computed stream by stream (``Analytics.run_views``): ``usage`` and ``run_usage`` are
#: not (the price table and the links between runs and sessions are read from outside the facts).
CORE_RUN_VIEWS: tuple[str, ...] = ("phases", "runs", "gates", "version_gaps", "version_counts", "gate_runs",
                                   "stream_positions", "run_writers", "key_changes")

_IN = "stream_id IN (SELECT stream_id FROM sel)"

_USAGE_COLUMNS = ("model", "sessions", "api_messages", "input_tokens", "output_tokens", "cache_creation_tokens",
                  "cache_write_5m", "cache_write_1h", "cache_read_tokens", "cost_usd", "unpriced_messages",
                  "price_effective")
_USAGE_NOTE = ("one count per API message (message id + request id) with the usage of its last transcript line; "
               "subagents in their session; cache_creation_tokens split by lifetime into cache_write_5m and cache_write_1h "
               "(priced apart; all 5-minute where a transcript does not split them); cost_usd from the price table in force at each message's time "
               "(`evstore usage` says which), empty where a model has no price (unpriced_messages counts them); "
               "views: api_usage, usage, run_usage.")


_USAGE_SUMS = """count(DISTINCT session_id) AS sessions, count(*) AS api_messages,
                   sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
                   sum(cache_creation_tokens) AS cache_creation_tokens,
                   sum(cache_creation_5m_tokens) AS cache_write_5m, sum(cache_creation_1h_tokens) AS cache_write_1h,
                   sum(cache_read_tokens) AS cache_read_tokens,
                   sum(cost_usd) AS cost_usd, count_if(NOT priced) AS unpriced_messages"""


def _usage_sql(where: str) -> str:
    """A row per model, then the row of every model together (the section's summary: :func:`_usage_total`), from
    one reading of ``usage``: a statement for each read every API message's rows and priced them twice (the
    summary was 47-55 ms of a report after one new line in a store of 10^6 session transcript lines)."""
    return f"""SELECT grouping(model) AS every_model, model, {_USAGE_SUMS},
                   max(price_effective)::DATE::VARCHAR AS price_effective
               FROM usage WHERE {where} GROUP BY GROUPING SETS ((model), ())
               ORDER BY every_model, cost_usd DESC NULLS LAST, model"""


def _usage_total(rows: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    """The usage section's rows and summary from :func:`_usage_sql`'s: its last row (every model together; there
    is one whether or not a message is in scope) is the summary, without the model and price date."""
    if rows and rows[-1]["every_model"]:
        total = rows.pop()
        summary.update((k, v) for k, v in total.items() if k not in ("every_model", "model", "price_effective"))
    for row in rows:
        del row["every_model"]


# A cross-run report's sessions are the streams in scope; a run's are its own and those that wrote it.
_USAGE_ALL = "session_id IN (SELECT split_part(stream_id, '/', 1) FROM sel)"
_USAGE_RUN = ("(session_id IN (SELECT split_part(stream_id, '/', 1) FROM sel) OR session_id IN "
              "(SELECT session_id FROM run_sessions WHERE stream_id IN (SELECT stream_id FROM sel)))")

USAGE_SECTION = MetricSection("usage", "Model usage and cost (per model)", _USAGE_COLUMNS, _usage_sql(_USAGE_ALL),
                              None, _USAGE_NOTE, chart=Chart("bars", "Cost per model (USD)", "{model}", ("cost_usd",)),
                              finish=_usage_total)
RUN_USAGE_SECTION = MetricSection("usage", "Model usage and cost of the sessions that wrote this run",
                                  _USAGE_COLUMNS, _usage_sql(_USAGE_RUN), None, _USAGE_NOTE, finish=_usage_total)

# Who sent the events in scope to a team server, with the API messages (and their cost) they sent first.
WRITERS_SECTION = MetricSection(
    "writers", "Writers: who sent the events (token and machine, over the HTTP API)",
    ("writer", "token", "machine", "events", "streams", "api_messages", "cost_usd", "unpriced_messages",
     "first_at", "last_at"),
    f"""WITH e AS (SELECT * FROM run_writers WHERE {_IN}),
        u AS (SELECT writer, count(*) AS api_messages, sum(cost_usd) AS cost_usd,
                     count_if(NOT priced) AS unpriced_messages
              FROM usage WHERE {_USAGE_ALL} GROUP BY writer),
        w AS (SELECT writer, any_value(token) AS token, any_value(machine) AS machine,
                     sum(events)::BIGINT AS events, count(DISTINCT stream_id) AS streams, min(first_at) AS first_at,
                     max(last_at) AS last_at
              FROM e GROUP BY writer)
        SELECT coalesce(w.writer, '(local)') AS writer, w.token, w.machine, w.events, w.streams,
               coalesce(u.api_messages, 0) AS api_messages, u.cost_usd, coalesce(u.unpriced_messages, 0)
                   AS unpriced_messages, w.first_at, w.last_at
        FROM w LEFT JOIN u ON u.writer IS NOT DISTINCT FROM w.writer
        ORDER BY w.events DESC, w.writer NULLS LAST""",
    None,
    "writer = TOKEN/MACHINE: the token a team server took the events with and the machine the client named "
    "(meta.sent_by, committed by the hash chain); (local) = written where the store is, not over the HTTP API; "
    "api_messages and cost_usd: the API messages whose transcript line that writer sent first. Shown when some "
    "event in scope came over HTTP; `evstore metrics --writer W` keeps the runs W wrote to.",
    chart=Chart("bars", "Events per writer", "{writer}", ("events",)),
    # Shown when some event in scope came over HTTP: otherwise neither the runs' writers (208,024 rows at 10^7
    # events) nor the API messages' usage (0.1 s in a store of 10^6 transcript lines) are read; a row found from
    # the writers column's statistics says so (1 ms). Behind a row in the SQL, DuckDB still computed the usage.
    when=f"SELECT 1 FROM run_writers WHERE writer IS NOT NULL AND {_IN} LIMIT 1")


def quantiles_by_count(source: str, group: str, value: str, qs: Sequence[float]) -> str:
    """SQL of one row per ``group`` of ``source`` (a SELECT) with ``q1``, ``q2``, ... the quantiles ``qs`` of
    ``value`` (NULLs left out) as ``quantile_cont`` defines them, and ``mx`` its maximum, read from a count of
    each distinct value: the quantile's two neighbouring values are found by the counts' running sum, then
    interpolated (``lo + (hi - lo) * d``, with ``d`` the fraction of the index ``(n - 1) * q``).

    ``quantile_cont`` holds every value of a group at once, and a state per thread, which DuckDB cannot
    spill; the counts are a GROUP BY and a window, which it can, and hold a row per distinct value.  The
    values found are the same; the interpolation's last bit may differ from DuckDB's arithmetic, far below
    the report's four decimal places (``tests/test_metrics_sections.py``)."""
    found, interpolated = [], []
    for i, q in enumerate(qs, 1):
        at = f"((n - 1)::DOUBLE * {float(q)!r}::DOUBLE)"
        found.append(f"min(v) FILTER (WHERE seen > floor({at})) AS lo{i}, "
                     f"min(v) FILTER (WHERE seen > ceil({at})) AS hi{i}, any_value({at}) AS at{i}")
        interpolated.append(f"CASE WHEN floor(at{i}) = at{i} THEN lo{i} "
                            f"ELSE lo{i} + (hi{i} - lo{i}) * (at{i} - floor(at{i})) END AS q{i}")
    return f"""WITH counted AS (SELECT {group} AS g, {value} AS v, count(*) AS c FROM ({source}) s
                              WHERE {value} IS NOT NULL GROUP BY ALL),
        running AS (SELECT g, v, sum(c) OVER (PARTITION BY g ORDER BY v ROWS UNBOUNDED PRECEDING) AS seen,
                           sum(c) OVER (PARTITION BY g) AS n FROM counted),
        ends AS (SELECT g, {", ".join(found)}, max(v) AS mx FROM running GROUP BY g)
        SELECT g AS {group}, {", ".join(interpolated)}, mx FROM ends"""


#: Metric sections over the shared views (after the dialects' own in ``evstore metrics``).
CORE_SECTIONS: tuple[MetricSection, ...] = (
    MetricSection(
        "histories", "State histories: versions per stream, write intervals, unreadable versions (per dialect)",
        ("dialect", "streams", "versions", "versions_p50", "versions_max", "interval_p50_s", "interval_p90_s",
         "interval_max_s", "unreadable", "removed", "lens_failures"),
        # The versions counted per stream (the kept run view ``version_counts``) and one scan of the
        # intervals, none held: a CTE read three times was materialised whole, every column (the section took
        # 300+ MB at 10^7 events).  The interval quantiles are taken from a count of each
        # interval's value (quantiles_by_count): quantile_cont holds every interval of a dialect, and a state
        # per thread, which did not fit the report's 100 MB at 10^7 events (3.3 million intervals; run again
        # on one thread: 0.8 s), where the counts (a few thousand values) take 0.09 s.
        f"""WITH n AS (SELECT dialect, count(*) AS streams, sum(n) AS versions, quantile_cont(n, 0.5) AS p50,
                         max(n) AS mx, sum(unreadable)::BIGINT AS unreadable, sum(removed)::BIGINT AS removed,
                         sum(lens_failures)::BIGINT AS lens_failures
                  FROM version_counts WHERE {_IN} GROUP BY dialect),
            g AS MATERIALIZED ({quantiles_by_count(f"SELECT dialect, gap_s FROM version_gaps WHERE {_IN}", "dialect",
                                                   "gap_s", (0.5, 0.9))})
            SELECT n.dialect, n.streams, n.versions, n.p50 AS versions_p50, n.mx AS versions_max,
                   g.q1 AS interval_p50_s, g.q2 AS interval_p90_s, g.mx AS interval_max_s,
                   n.unreadable, n.removed, n.lens_failures
            FROM n LEFT JOIN g USING (dialect) ORDER BY n.versions DESC, n.dialect""",
        None,
        "a version = one captured write of the state (a file, a commit, a watch observation); interval = time "
        "between consecutive versions of a stream (source time, else store time); unreadable = versions that were "
        "no readable document; lens_failures = versions the dialect's lens could not explain (recorded exactly).",
        per_run=True),
    MetricSection(
        "changing_keys", "Top-level keys that change most (document patches, per dialect)",
        ("dialect", "key", "changes", "streams", "last_changed"),
        f"""SELECT dialect, key, sum(changes)::BIGINT AS changes, count(*) AS streams,
                   max(last_changed) AS last_changed
            FROM key_changes WHERE {_IN}
            GROUP BY dialect, key ORDER BY changes DESC, dialect, key LIMIT 20""",
        None,
        "changes = document.patched events touching the key (a version's changes the dialect's domain events do "
        "not explain, and every change of a document of any dialect).", per_run=True),
    MetricSection(
        "gates", "Gates: verdicts, first-pass yield, fail -> pass recovery",
        ("gate", "pass", "fail", "not_applicable", "other", "runs", "first_pass_yield", "runs_failed", "recovered",
         "recovery_rate"),
        # From a row per run and gate (the kept run view ``gate_runs``): grouping every verdict by run and gate
        # held a group per pair, 61 MB at 10^7 events.
        f"""SELECT gate, sum(pass)::BIGINT AS pass, sum(fail)::BIGINT AS fail,
                   sum(not_applicable)::BIGINT AS not_applicable, sum(other)::BIGINT AS other,
                   count(*) AS runs,
                   count(first_verdict) AS runs_judged,
                   CASE WHEN count(first_verdict) > 0
                        THEN count_if(first_verdict = 'pass') / count(first_verdict) END AS first_pass_yield,
                   count(first_fail) AS runs_failed,
                   coalesce(count_if(last_pass > first_fail), 0) AS recovered,
                   CASE WHEN count(first_fail) > 0 THEN count_if(last_pass > first_fail) / count(first_fail) END
                       AS recovery_rate
            FROM gate_runs WHERE {_IN} GROUP BY gate ORDER BY gate""",
        None,
        "first-pass yield = runs whose first pass/fail verdict for the gate is pass / runs with a "
        "pass/fail verdict; recovery = runs with a pass after their first fail / runs with a fail.",
        chart=Chart("bars", "First-pass yield per gate", "{gate}", ("first_pass_yield",), max_value=1.0), per_run=True),
    MetricSection(
        "phase_durations", "Phase durations and retries",
        ("dialect", "phase", "executions", "finished", "p50_s", "p90_s", "max_s", "retries", "failures", "skips"),
        f"""SELECT dialect, phase, count(*) AS executions, count(duration_s) AS finished,
                   quantile_cont(duration_s, 0.5) AS p50_s, quantile_cont(duration_s, 0.9) AS p90_s,
                   max(duration_s) AS max_s, sum(retries) AS retries, sum(failures) AS failures,
                   count_if(skipped) AS skips
            FROM phases WHERE {_IN}
            GROUP BY dialect, phase ORDER BY dialect, phase""",
        chart=Chart("groups", "Phase duration percentiles", "{dialect} {phase}", ("p50_s", "p90_s"),
                    series=("p50", "p90"), scale=60), per_run=True),
    USAGE_SECTION,
    WRITERS_SECTION,
)

#: The sections of ``evstore metrics STREAM`` every run has: the dialect's run sections go between
#: the phases and the gates.
CORE_RUN_SECTIONS: tuple[MetricSection, ...] = (
    MetricSection("timeline", "Timeline", ("version", "type", "at"),
                  f"""SELECT version, type, coalesce(occurred_at, recorded_at) AS at FROM events
                      WHERE {_IN} ORDER BY position"""),
    MetricSection("phases", "Phases",
                  ("phase", "status", "model", "started_at", "finished_at", "duration_s", "retries", "failures"),
                  f"""SELECT phase, status, model, started_at, finished_at, duration_s, retries, failures
                      FROM phases WHERE {_IN} ORDER BY started_at, phase"""),
    MetricSection("gates", "Gate verdicts", ("attempt", "gate", "verdict", "verdict_at"),
                  f"""SELECT attempt, gate, verdict, verdict_at FROM gates WHERE {_IN} ORDER BY position"""),
    RUN_USAGE_SECTION,
)


def arrow_schema(table: Table) -> pa.Schema:
    """The Arrow schema of a declared table (``position``, ``stream_id``, then its columns)."""
    import pyarrow as pa

    types = arrow_types()
    return pa.schema([pa.field(name, types[kind]) for name, kind in table.all_columns()])


def empty_select(columns: Sequence[tuple[str, str]]) -> str:
    return "SELECT " + ", ".join(f"NULL::{kind} AS {name}" for name, kind in columns) + " WHERE false"


@dataclass(frozen=True)
class Catalog:
    """Every fact table, row function, view and metric section: the shared ones and each registered
    dialect's, checked for clashes (one owner per table, view and event type)."""

    version: str  # FLATTEN_VERSION, the dialects' Analytics.version and a digest of every table declared
    dialects: tuple[str, ...]  # every dialect that loads (its name marks its events in ``events.dialect``)
    tables: dict[str, Table]
    owners: dict[str, str]  # table or view -> the dialect declaring it ("" shared)
    rows: dict[str, RowFunction]  # domain event type -> row function
    document_rows: dict[tuple[str, str], RowFunction]  # (dialect, document.* type) -> row function
    views: dict[str, str]  # in dependency order: shared, then each dialect's
    sections: tuple[tuple[str, MetricSection], ...]  # (dialect, section), dialects first, shared last
    run_sections: dict[str, tuple[MetricSection, ...]]  # dialect -> its sections for one of its runs
    every_run_sections: tuple[MetricSection, ...]  # the dialects' sections for a run of any dialect
    run_views: tuple[str, ...] = ()  # views computed stream by stream (``Analytics.run_views``), in ``views`` order

    @cached_property
    def every_section(self) -> tuple[MetricSection, ...]:
        """Every metric section a report may compute: the cross-run ones, then a run's (the shared ones, those of
        a run of any dialect, each dialect's own)."""
        return (*(m for _d, m in self.sections), *CORE_RUN_SECTIONS, *self.every_run_sections,
                *(m for ms in self.run_sections.values() for m in ms))

    @cached_property
    def schemas(self) -> dict[str, pa.Schema]:
        """Each table's Arrow schema (made when first asked: writing facts needs them, reading does not)."""
        return {n: arrow_schema(t) for n, t in self.tables.items()}


_cache: tuple[tuple[str, ...], Catalog] | None = None


def _order(name: str) -> tuple[int, str]:
    return -get_dialect(name).demo_weight, name


def catalog() -> Catalog:
    """The analytics catalog of the dialects registered now (rebuilt when that list changes)."""
    global _cache
    names = tuple(available())
    if _cache is None or _cache[0] != names:
        _cache = (names, _build(names))
    return _cache[1]


def built() -> bool:
    """Whether this process has built the catalog (so :func:`catalog` costs nothing more)."""
    return _cache is not None


def code_stamp() -> list[Any]:
    """What the catalog of this process was built from, as Python checks a cached ``.pyc`` against its
    source: the registered dialects (entry points, read without importing them) and the modification time
    and size of the source file of every loaded module of their packages and of ``projections``.  The
    manifest keeps it beside the catalog's version (:func:`stamp_holds`)."""
    import os
    import sys

    catalog()  # every dialect's analytics declared, so their modules are loaded
    regs, roots = _registrations()
    files: dict[str, list[int]] = {}
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if name.partition(".")[0] in roots and path:
            try:
                st = os.stat(path)
            except OSError:
                continue
            files[path] = [st.st_mtime_ns, st.st_size]
    # The modules that declare the report's own sections and the price table each report reads are part of
    # what a kept report depends on, loaded or not in the process that stamps.
    from importlib.util import find_spec

    for extra in ("projections.metrics", "projections.prices"):
        spec = find_spec(extra)
        if spec is not None and spec.origin:
            try:
                st = os.stat(spec.origin)
            except OSError:
                continue
            files[spec.origin] = [st.st_mtime_ns, st.st_size]
    return [FLATTEN_VERSION, regs, files]


def stamp_holds(stamp: Any) -> bool:
    """Whether the code a stamp of :func:`code_stamp` describes is the code installed now: the same dialects
    registered, and not one of its files changed.  A reader that needs only the catalog's version
    (``evstore projections status``) then takes the manifest's instead of importing every dialect to build
    the catalog (a sixth of the command).  What this cannot see, a plugin's dependency removed so that the
    plugin no longer loads, is seen by the next refresh, which always builds the catalog."""
    import os

    try:
        version, regs, files = stamp
        if version != FLATTEN_VERSION or regs != _registrations()[0] or not files:
            return False
        for path, (mtime, size) in files.items():
            st = os.stat(path)
            if st.st_mtime_ns != mtime or st.st_size != size:
                return False
    except (OSError, TypeError, ValueError):
        return False
    return True


def _registrations() -> tuple[list[list[str]], set[str]]:
    """The registered dialects as (name, ``module:attr``, distribution), and their top-level packages."""
    from eventstore.dialects import _scan

    one, conflicts = _scan()
    regs = [[n, r.value, r.distribution] for n, r in sorted(one.items())]
    regs += [[n, r.value, r.distribution] for n, rs in sorted(conflicts.items()) for r in rs]
    return regs, {r.value.partition(":")[0].strip().partition(".")[0] for r in one.values()} | {"projections"}


def _build(names: tuple[str, ...]) -> Catalog:
    tables = {t.name: t for t in CORE}
    owners = {t.name: "" for t in CORE} | {v: "" for v in (*SHARED_VIEWS, *CORE_VIEWS)}
    rows: dict[str, RowFunction] = {}
    document_rows: dict[tuple[str, str], RowFunction] = {}
    parts: dict[str, list[str]] = {v: [] for v in SHARED_VIEWS}
    views: dict[str, str] = {}
    sections: list[tuple[str, MetricSection]] = []
    run_sections: dict[str, tuple[MetricSection, ...]] = {}
    every_run: list[MetricSection] = []
    per_run: set[str] = set(CORE_RUN_VIEWS)
    early: list[str] = []
    versions: list[Any] = [FLATTEN_VERSION, [(t.name, t.columns) for t in CORE]]
    for name in sorted(names, key=_order):
        a = get_dialect(name).analytics()
        if a is None:
            continue

        def clash(what: str, key: str) -> EvstoreError:
            other = owners.get(key)
            by = "the shared analytics" if other == "" else f'dialect "{other}"'
            return EvstoreError(f'Dialect "{name}" declares the analytics {what} "{key}", which {by} '  # noqa: B023
                                "already declares; rename it (prefix it with the dialect's name).")

        for t in a.tables:
            if t.name in owners:
                raise clash("table", t.name)
            bad = [f"{c} {k}" for c, k in t.columns if k not in COLUMN_TYPES]
            if bad:
                raise EvstoreError(f'Dialect "{name}" declares analytics table "{t.name}" with column type(s) '
                                   f'{", ".join(bad)}; use one of {", ".join(COLUMN_TYPES)}.')
            tables[t.name], owners[t.name] = t, name
        for event_type, fn in a.rows.items():
            if event_type.startswith("document."):
                document_rows[(name, event_type)] = fn
            elif event_type.startswith(f"{name}."):
                rows[event_type] = fn
            else:
                raise EvstoreError(f'Dialect "{name}" declares analytics rows for event type "{event_type}", '
                                   f'which is neither its own ("{name}.…") nor a document event.')
        for view, sql in a.views.items():
            if view in owners:
                raise clash("view", view)
            views[view], owners[view] = sql, name
        # A dialect's views its parts of the shared views read come before the shared views (they may read
        # only its fact tables and each other, not a shared or core view).
        early += [v for v in a.views if any(re.search(rf"\b{re.escape(v)}\b", p) for p in a.view_parts.values())]
        for view, sql in a.view_parts.items():
            if view not in parts:
                raise EvstoreError(f'Dialect "{name}" adds rows to the view "{view}", which is no shared view '
                                   f'({", ".join(SHARED_VIEWS)}).')
            parts[view].append(sql)
        for view in a.run_views:
            if a.views.get(view) is None:
                raise EvstoreError(f'Dialect "{name}" lists "{view}" in its run views, but declares no such view.')
            per_run.add(view)
        sections += [(name, m) for m in a.sections]
        run_sections[name] = a.run_sections
        every_run += a.every_run_sections
        versions.append([name, a.version, [(t.name, t.columns) for t in a.tables]])
    shared = {v: " UNION ALL BY NAME ".join([empty_select(cols), *(f"({p})" for p in parts[v])])
              for v, cols in SHARED_VIEWS.items()}
    digest = hashlib.sha256(json.dumps(versions).encode()).hexdigest()[:10]
    ordered = {**{v: views[v] for v in early}, **shared, **CORE_VIEWS, **views}
    return Catalog(version=f"{FLATTEN_VERSION}-{digest}", dialects=names, tables=tables,
                   owners=owners, rows=rows,
                   document_rows=document_rows, views=ordered,
                   sections=(*sections, *(("", m) for m in CORE_SECTIONS)), run_sections=run_sections,
                   every_run_sections=tuple(every_run),
                   run_views=tuple(v for v in ordered if v in per_run))


def __getattr__(name: str) -> Any:
    # The catalog's tables and views as module constants (computed on first use, from the registry).
    if name == "SCHEMAS":
        return catalog().schemas
    if name == "VIEWS":
        return catalog().views
    raise AttributeError(name)


_KINDS = {"document.unreadable": "unreadable", "document.removed": "removed"}


def _top_keys(ops: Any) -> list[str]:
    """The top-level keys (RFC 6901 unescaped) a JSON Patch changes, each once, in order."""
    keys: dict[str, None] = {}
    for op in ops if isinstance(ops, list) else ():
        path = d(op).get("path")
        if isinstance(path, str):
            keys[path[1:].split("/", 1)[0].replace("~1", "/").replace("~0", "~") if path else ""] = None
    return list(keys)


def writer_key(token: str | None, machine: str | None) -> str | None:
    """An event's writer as ``evstore usage --by writer`` and ``metrics --writer`` name it: ``TOKEN/MACHINE``
    (a token name has no "/"), ``TOKEN`` when the client named no machine; None: not sent over HTTP."""
    if token is None and machine is None:
        return None
    return (token or "?") + (f"/{machine}" if machine is not None else "")


class Flattener:
    """Turns recorded events into fact rows (stateless: see the module docstring)."""

    def __init__(self, cat: Catalog | None = None) -> None:
        self.catalog = cat or catalog()
        self.rows: Rows = {name: [] for name in self.catalog.tables}
        self._recorded: tuple[str, datetime | None] = ("", None)  # one value per append transaction
        # The ``events`` table of add_batch, a list per column (occurred_at, recorded_at as stored text:
        # columns.iso_times converts them); add_one writes row tuples to rows["events"] instead.
        self._events: tuple[list[Any], ...] = ([], [], [], [], [], [], [], [], [], [])

    def add_one(self, e: RecordedEvent) -> None:
        cat = self.catalog
        dialect = None
        meta: dict[str, Any] = {}
        if e.meta and e.meta != b"{}":  # (empty: a purged or erased payload)
            meta = d(_decode(e.meta))
            dialect = s(meta.get("dialect"))
        if not dialect:
            prefix = e.type.split(".", 1)[0]
            dialect = prefix if prefix in cat.dialects else None
        occurred = ts(e.occurred_at)
        if e.recorded_at != self._recorded[0]:
            self._recorded = (e.recorded_at, ts(e.recorded_at))
        sender = d(meta.get("sent_by")) if meta else {}
        token, machine = s(sender.get("token")), s(sender.get("machine"))
        self.rows["events"].append((e.position, e.stream_id, e.version, e.type, dialect, occurred,
                                    self._recorded[1], writer_key(token, machine), token, machine))
        if meta and "source" in meta:  # the event closing a captured version
            found = meta.get("findings")
            lens = isinstance(found, list) and any(d(f).get("code") == "lens-failed" for f in found)
            kind = _KINDS.get(e.type, "valid")
            self.rows["state_versions"].append((e.position, e.stream_id, e.version, dialect, kind, lens,
                                                occurred or self._recorded[1]))
        if e.type == "document.patched" and e.data:
            for key in _top_keys(d(_decode(e.data)).get("ops")):
                self.rows["patched_keys"].append((e.position, e.stream_id, dialect, key, occurred or self._recorded[1]))
        fn = cat.rows.get(e.type)
        if fn is None and dialect is not None:
            fn = cat.document_rows.get((dialect, e.type))
        if fn is not None and e.data:  # a purged or erased event keeps its row in events, no facts
            fn(self.rows, e, d(_decode(e.data)), occurred)

    def add_batch(self, events: Sequence[RecordedEvent] | Sequence[FactEvent]) -> None:
        """:meth:`add_one` of each of ``events`` (in position order), the same facts at a fraction of the
        cost: the ``events`` table is kept as columns (no row tuple, no datetime per event: its times
        are converted a column at a time), ``meta`` is decoded into a :class:`_Meta` (the three keys the
        facts read, not a dict of everything), and an event's time is parsed only when a row needs it."""
        if self.rows["events"]:
            raise ValueError("add_batch after add_one: one Flattener takes one or the other")
        cat = self.catalog
        rows, state_versions, patched = self.rows, self.rows["state_versions"], self.rows["patched_keys"]
        fns, document_fns, dialects = cat.rows, cat.document_rows, cat.dialects
        (position, stream, version, types, dialect_col, occurred_col, recorded_col,
         writer_col, token_col, machine_col) = self._events
        position += [e.position for e in events]
        stream += [e.stream_id for e in events]
        version += [e.version for e in events]
        types += [e.type for e in events]
        occurred_col += [e.occurred_at for e in events]
        recorded_col += [e.recorded_at for e in events]
        decode_meta, decode, unset, invalid = _META.decode, _DATA.decode, msgspec.UNSET, msgspec.ValidationError
        occurred_text: str | None = ""
        occurred: datetime | None = None  # the last event's time (a snapshot's events share it)
        recorded_text, recorded = self._recorded
        # A FactEvent has every field a row function reads of a RecordedEvent, by the same names.
        each: Sequence[Any] = events
        for e in each:
            meta = dialect = token = machine = None
            raw = e.meta
            if raw and raw != b"{}":  # (empty: a purged or erased payload)
                try:
                    meta = decode_meta(raw)
                except invalid:  # not an object: no dialect, no source (add_one's d())
                    pass
                else:
                    dialect = meta.dialect
                    if type(dialect) is not str:
                        dialect = None
                    sender = meta.sent_by
                    if sender is not None:
                        sender = d(sender)
                        token, machine = s(sender.get("token")), s(sender.get("machine"))
            writer_col.append(None if token is None and machine is None else writer_key(token, machine))
            token_col.append(token)
            machine_col.append(machine)
            type_ = e.type
            if not dialect:
                prefix = type_.split(".", 1)[0]
                dialect = prefix if prefix in dialects else None
            dialect_col.append(dialect)
            fn = fns.get(type_)
            if fn is None and dialect is not None:
                fn = document_fns.get((dialect, type_))
            source = meta is not None and meta.source is not unset
            patch = type_ == "document.patched"
            if fn is None and not source and not patch:
                continue  # its row in events is all it has
            if e.occurred_at != occurred_text:
                occurred_text, occurred = e.occurred_at, ts(e.occurred_at)
            if source or patch:
                if e.recorded_at != recorded_text:
                    recorded_text, recorded = e.recorded_at, ts(e.recorded_at)
                at = occurred or recorded
                if source:
                    assert meta is not None
                    lens = _lens_failed(meta.findings)
                    state_versions.append((e.position, e.stream_id, e.version, dialect, _KINDS.get(type_, "valid"),
                                           lens, at))
                if patch and e.data:
                    for key in _top_keys(d(decode(e.data)).get("ops")):
                        patched.append((e.position, e.stream_id, dialect, key, at))
            if fn is not None and e.data:  # a purged or erased event keeps its row in events, no facts
                payload = decode(e.data)
                fn(rows, e, payload if type(payload) is dict else {}, occurred)
        self._recorded = (recorded_text, recorded)

    def tables(self) -> dict[str, pa.Table]:
        from projections.analytics import columns

        out = {}
        for name, schema in self.catalog.schemas.items():
            if name == "events" and self._events[0]:
                *plain, occurred, recorded = self._events[:7]
                arrays = [columns.column(values, f.type) for values, f in zip(plain, schema, strict=False)]
                arrays += [columns.iso_times(occurred), columns.iso_times(recorded)]
                arrays += [columns.column(values, schema.field(i).type) for i, values in enumerate(self._events[7:], 7)]
                out[name] = columns.from_arrays(arrays, schema)
                continue
            cols: list[Sequence[Any]] = list(zip(*self.rows[name], strict=True)) if self.rows[name] else [
                [] for _ in schema]
            out[name] = columns.table(cols, schema, name)  # not pa.array: see projections/analytics/columns.py
        return out


class _Meta(msgspec.Struct):
    """What the facts read of an event's ``meta``: its dialect, whether it closes a captured version
    (``source``, any value: kept undecoded), the lens findings of that version and its sender."""

    dialect: Any = None
    source: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    # kept undecoded: decoding every version's findings into dicts was a third of the meta's decoding,
    # and only those that may hold a lens failure are read (_lens_failed)
    findings: msgspec.Raw = msgspec.Raw(b"null")
    sent_by: Any = None  # who sent it over the HTTP API (token, machine): the events' writer columns


def _lens_failed(found: msgspec.Raw) -> bool:
    """Whether a version's findings (meta.findings, undecoded) hold one of code "lens-failed", as
    :meth:`Flattener.add_one` reads them.  Findings whose text has neither "lens" nor an escape
    cannot (the code's text appears as written or escaped), so most are never decoded."""
    raw = bytes(found)
    if b"lens" not in raw and b"\\u" not in raw:
        return False
    value = _DATA.decode(raw)
    return isinstance(value, list) and any(d(f).get("code") == "lens-failed" for f in value)


_META = msgspec.json.Decoder(_Meta)
_DATA = msgspec.json.Decoder()  # codec.decode's, without its call


__all__ = ["CORE", "CORE_RUN_SECTIONS", "CORE_RUN_VIEWS", "CORE_SECTIONS", "CORE_VIEWS", "Catalog", "FLATTEN_VERSION",
           "Flattener", "SHARED_VIEWS", "arrow_schema", "arrow_types", "catalog", "empty_select"]
