"""Token usage and cost of agent sessions, grouped by session, task, model, subagent, day, project or
writer (``evstore usage``), over the analytics view ``usage`` (:mod:`projections.analytics.facts`).

What is counted (docs/metrics.md, "Usage and cost"):

* one row per API message: a message id and request id, with the usage of the *last* transcript
  line of that message (the agent writes a line per content block, each with the usage so far);
  a message recorded in two streams (a resumed session repeats earlier ones) once, in the first;
* subagents (inline sidechains, ``agent-*.jsonl``, ``<session>/subagents/*.jsonl``) inside the
  session that started them, and on rows of their own with ``by="subagent"``;
* a task (an orchestrator run of any snapshot dialect) costs what the sessions that wrote
  its state versions cost (``projections.writers``: hook, content or path+time links); a session
  that wrote two tasks counts in both, so the ``task`` rows may add up to more than the total;
* the writer of a message (``--by writer``, ``token``, ``machine``): the token and machine that
  sent it to a team server (``meta.sent_by`` of the event that recorded it first), none for a
  message recorded where the store is;
* cost from a dated price table (:mod:`projections.prices`): the price in force at the message's
  time; a model without a price has ``cost_usd`` None and is counted in ``unpriced_messages``;
* cache writes at two prices: ``cache_creation_5m_tokens`` (5-minute, ``cache_write``) and
  ``cache_creation_1h_tokens`` (1-hour, ``cache_write_1h``), as the transcript's
  ``usage.cache_creation`` splits them; a message without the split has all its
  ``cache_creation_tokens`` (the total) as 5-minute writes.

    >>> with reading(store) as con:
    ...     report = usage_report(con, by="model")
    >>> report.rows[0]["cost_usd"]
    12.41
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from eventstore.errors import EvstoreError
from projections.prices import PriceTable, load_prices

if TYPE_CHECKING:  # `evstore serve` imports this module for cost_text; DuckDB only when a page asks for usage
    import duckdb

#: ``--by`` choices: the SQL naming each row, and the join it needs (``u`` is the ``usage`` view).
_TASK_JOIN = """LEFT JOIN (SELECT DISTINCT rs.stream_id AS run, rs.session_id, r.task_id, r.project, r.dialect AS run_dialect
                          FROM run_sessions rs LEFT JOIN runs r ON r.stream_id = rs.stream_id) t
                ON t.session_id = u.session_id"""
_PROJECT_JOIN = """LEFT JOIN (SELECT rs.session_id, min(r.project) AS project FROM run_sessions rs
                              JOIN runs r ON r.stream_id = rs.stream_id WHERE r.project IS NOT NULL GROUP BY ALL) t
                   ON t.session_id = u.session_id"""
_DIMENSIONS: dict[str, tuple[str, str, str]] = {
    # by: (key expression, label expression, join)
    "session": ("u.session_id", "min(u.cwd)", ""),
    "task": ("t.run", "min(t.task_id) || coalesce(' (' || min(t.run_dialect) || ')', '')", _TASK_JOIN),
    "model": ("u.model", "NULL", ""),
    "subagent": ("u.subagent", "min(u.session_id)", ""),
    "day": ("strftime(timezone('UTC', u.occurred_at), '%Y-%m-%d')", "NULL", ""),
    "project": ("coalesce(t.project, u.cwd)", "NULL", _PROJECT_JOIN),
    # Who sent the messages' transcripts to a team server (meta.sent_by): TOKEN/MACHINE, the token, the machine.
    "writer": ("u.writer", "NULL", ""),
    "token": ("u.writer_token", "NULL", ""),
    "machine": ("u.writer_machine", "NULL", ""),
}
#: The dimensions that say who sent the messages (their key None: recorded where the store is, not over HTTP).
WRITER_BY = ("writer", "token", "machine")
BY = tuple(_DIMENSIONS)

_SUMS = """count(DISTINCT u.session_id) AS sessions, count(DISTINCT u.subagent) AS subagents,
           count(*) AS api_messages, coalesce(sum(u.input_tokens), 0) AS input_tokens,
           coalesce(sum(u.output_tokens), 0) AS output_tokens,
           coalesce(sum(u.cache_creation_tokens), 0) AS cache_creation_tokens,
           coalesce(sum(u.cache_creation_5m_tokens), 0) AS cache_creation_5m_tokens,
           coalesce(sum(u.cache_creation_1h_tokens), 0) AS cache_creation_1h_tokens,
           coalesce(sum(u.cache_read_tokens), 0) AS cache_read_tokens,
           sum(u.cost_usd) AS cost_usd, count_if(NOT u.priced) AS unpriced_messages,
           coalesce(list(DISTINCT u.model ORDER BY u.model) FILTER (WHERE NOT u.priced), []) AS unpriced_models,
           min(u.occurred_at) AS first_at, max(u.occurred_at) AS last_at"""

COLUMNS = ("key", "label", "sessions", "subagents", "api_messages", "input_tokens", "output_tokens",
           "cache_creation_tokens", "cache_creation_5m_tokens", "cache_creation_1h_tokens", "cache_read_tokens", "cost_usd", "unpriced_messages", "unpriced_models",
           "first_at", "last_at")


@dataclass
class UsageReport:
    """Rows (one per ``by`` value, most expensive first; the key None: messages that have none,
    e.g. sessions that wrote no task), the total over every message in scope, and the prices used."""

    by: str
    rows: list[dict[str, Any]]
    total: dict[str, Any]
    prices: PriceTable
    since: str | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"by": self.by, "since": self.since, "prices": self.prices.to_dict(), "rows": self.rows,
                "total": self.total, "notes": self.notes}


def _since_sql(since: str | None) -> tuple[str, list[Any]]:
    if since is None:
        return "true", []
    from projections.runs import parse_since

    return "u.occurred_at >= ?", [parse_since(since)]


def _fetch(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> list[dict[str, Any]]:
    from projections.analytics import jsonable

    rel = con.execute(sql, params)
    names = [d[0] for d in rel.description or []]
    return [{k: jsonable(v) for k, v in zip(names, row, strict=True)} for row in rel.fetchall()]


def usage_report(con: duckdb.DuckDBPyConnection, *, by: str = "session", since: str | None = None,
                 prices: PriceTable | None = None) -> UsageReport:
    """Usage and cost per ``by`` (one of :data:`BY`) of the messages at or after ``since`` (ISO), priced
    by ``prices`` (default: :func:`projections.prices.load_prices`).  ``con``: a connection from
    :func:`projections.analytics.reading` (the link tables filled)."""
    from projections.analytics.views import fill_prices

    if by not in _DIMENSIONS:
        raise EvstoreError(f'Cannot group usage by "{by}" — use one of {", ".join(BY)}.')
    table = prices if prices is not None else load_prices()
    fill_prices(con, table)
    key, label, join = _DIMENSIONS[by]
    where, params = _since_sql(since)
    not_null = " AND u.subagent IS NOT NULL" if by == "subagent" else ""
    rows = _fetch(con, f"""SELECT {key} AS key, {label} AS label, {_SUMS}
                           FROM usage u {join} WHERE {where}{not_null}
                           GROUP BY {key} ORDER BY cost_usd DESC NULLS LAST, api_messages DESC, key NULLS LAST""",
                  params)
    total = _fetch(con, f"SELECT {_SUMS} FROM usage u WHERE {where}", params)[0]
    notes = []
    if total["unpriced_messages"]:
        notes.append(f"{total['unpriced_messages']} message(s) of model(s) without a price "
                     f"({', '.join(str(m) for m in total['unpriced_models'])}; or with 1-hour cache writes and no "
                     "cache_write_1h price): their tokens are counted, their cost is not; add a [[price]] row "
                     "(--prices FILE).")
    if by in WRITER_BY and any(r["key"] is None for r in rows):
        notes.append(f"{by} (none): messages recorded on the store's own machine, not sent over the HTTP API "
                     "(`evstore remote`); a message's writer is the one that sent it first.")
    if by == "task":
        notes.append("a session that wrote several tasks counts in each: the rows may add up to more than the total.")
    return UsageReport(by=by, rows=rows, total=total, prices=table, since=since, notes=notes)


def cost_text(row: dict[str, Any]) -> str:
    """A row's cost as people read it: ``$1.23``, ``no price``, or ``$1.23 + 4 unpriced``."""
    cost, unpriced = row.get("cost_usd"), row.get("unpriced_messages") or 0
    if cost is None:
        return "no price" if unpriced else "-"
    text = f"${cost:,.2f}" if cost >= 0.01 or cost == 0 else f"${cost:.4f}"
    return f"{text} + {unpriced} unpriced" if unpriced else text





def _sessions_of(stream_ids_param: str) -> str:
    """SQL: the sessions whose usage a stream carries (its own session, or those that wrote it)."""
    return f"""SELECT split_part(s, '/', 1) AS session_id, s AS stream_id FROM (SELECT unnest({stream_ids_param}) AS s)
               UNION SELECT session_id, stream_id FROM run_sessions WHERE stream_id IN (SELECT unnest({stream_ids_param}))"""


#: A query reading what :func:`stream_costs` and :func:`stream_usage` read: ``views.reading(sql=STREAM_READS)``
#: defines only those views (the runs page of ``evstore serve`` asks for its rows' costs on every request).
STREAM_READS = f"WITH l AS ({_sessions_of('$1')}) SELECT * FROM l JOIN usage u ON u.session_id = l.session_id"


def stream_costs(con: duckdb.DuckDBPyConnection, stream_ids: list[str]) -> dict[str, dict[str, Any]]:
    """Per stream (a run or a session) of ``stream_ids``: tokens and cost of its sessions (a session
    stream: itself and its subagents; a run: the sessions that wrote its state versions).  Streams
    without any are left out.  The runs index of ``evstore serve`` shows these."""
    if not stream_ids:
        return {}
    rows = _fetch(con, f"""WITH l AS ({_sessions_of("$1")})
                          SELECT l.stream_id AS key, {_SUMS} FROM l JOIN usage u ON u.session_id = l.session_id
                          GROUP BY l.stream_id""", [stream_ids])
    return {r.pop("key"): r for r in rows}


def stream_usage(con: duckdb.DuckDBPyConnection, stream_id: str) -> dict[str, Any] | None:
    """The usage section of a run or session page: ``total``, ``models`` and ``subagents`` rows
    (None: the stream has no sessions with API messages)."""
    scope = f"WITH l AS ({_sessions_of('$1')}), u AS (SELECT * FROM usage WHERE session_id IN (SELECT session_id FROM l))"
    total = _fetch(con, f"{scope} SELECT {_SUMS} FROM u", [[stream_id]])[0]
    if not total["api_messages"]:
        return None
    models = _fetch(con, f"""{scope} SELECT u.model AS key, {_SUMS} FROM u GROUP BY u.model
                             ORDER BY cost_usd DESC NULLS LAST, key""", [[stream_id]])
    sessions = _fetch(con, f"""{scope} SELECT u.session_id AS key, {_SUMS} FROM u GROUP BY u.session_id
                               ORDER BY first_at, key""", [[stream_id]])
    subagents = _fetch(con, f"""{scope} SELECT u.subagent AS key, {_SUMS} FROM u WHERE u.subagent IS NOT NULL
                                GROUP BY u.subagent ORDER BY first_at, key""", [[stream_id]])
    return {"total": total, "models": models, "sessions": sessions, "subagents": subagents}

__all__ = ["BY", "COLUMNS", "WRITER_BY", "UsageReport", "cost_text", "stream_costs", "stream_usage", "usage_report"]
