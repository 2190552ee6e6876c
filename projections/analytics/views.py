"""DuckDB over the Parquet tables: the views (:data:`VIEWS`), connections that read one consistent
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
from projections.analytics.facts import SCHEMAS
from projections.analytics.files import Manifest, analytics_dir, io_error, mismatch, refresh

# Views over the facts (DuckDB SQL).  Each "latest state" view keeps the newest fact by position.
VIEWS: dict[str, str] = {
    "runs": """
        WITH ev AS (
            SELECT stream_id, max(dialect) AS dialect, min(coalesce(occurred_at, recorded_at)) AS started_at,
                   max(coalesce(occurred_at, recorded_at)) AS last_event_at, count(*) AS events,
                   max(version) AS version
            FROM events GROUP BY stream_id),
        attrs AS (
            SELECT stream_id, attr, arg_max(value, position) AS value FROM run_attrs GROUP BY ALL)
        SELECT ev.stream_id, ev.dialect,
               (SELECT value FROM attrs a WHERE a.stream_id = ev.stream_id AND attr = 'project') AS project,
               coalesce((SELECT value FROM attrs a WHERE a.stream_id = ev.stream_id AND attr = 'task_id'),
                        ev.stream_id) AS task_id,
               (SELECT value FROM attrs a WHERE a.stream_id = ev.stream_id AND attr = 'title') AS title,
               (SELECT value FROM attrs a WHERE a.stream_id = ev.stream_id AND attr = 'status') AS status,
               ev.started_at, ev.last_event_at, ev.events, ev.version
        FROM ev""",
    "phases": """
        SELECT stream_id, dialect, phase, started_at, arg_max(finished_at, position) AS finished_at,
               arg_max(status, position) AS status, arg_max(model, position) AS model,
               coalesce(max(retry_count), 0) AS retries,
               count_if(kind = 'failed') AS failures, count_if(kind = 'skipped') > 0 AS skipped,
               CASE WHEN arg_max(status, position) = 'done'
                    THEN epoch(arg_max(finished_at, position)) - epoch(started_at) END AS duration_s
        FROM phase_events WHERE dialect = 'mapipe' AND started_at IS NOT NULL GROUP BY stream_id, dialect, phase, started_at
        UNION ALL
        SELECT stream_id, dialect, phase, occurred_at AS started_at, next_at AS finished_at,
               CASE WHEN next_at IS NULL THEN 'in_progress' ELSE 'done' END AS status, NULL AS model, 0 AS retries,
               0 AS failures, false AS skipped, epoch(next_at) - epoch(occurred_at) AS duration_s
        FROM (SELECT *, lead(occurred_at) OVER (PARTITION BY stream_id ORDER BY position) AS next_at
              FROM phase_events WHERE dialect = 'taskflow')""",
    "review_iterations": """
        SELECT it.*, d.verdict AS decision_verdict, d.approved
        FROM (SELECT * FROM review_iteration_events
              QUALIFY row_number() OVER (PARTITION BY stream_id, idx ORDER BY position DESC) = 1) it
        LEFT JOIN (SELECT * FROM review_decision_events
                   QUALIFY row_number() OVER (PARTITION BY stream_id, idx ORDER BY position DESC) = 1) d
          USING (stream_id, idx)""",
    "review_findings": """
        SELECT it.stream_id, it.iteration, it.idx, r.reviewer, r.model, r.fingerprint, r.severity, r.file,
               it.has_map, a.fingerprint IS NOT NULL AS accepted
        FROM review_iterations it
        JOIN review_raised r ON r.stream_id = it.stream_id AND r.position = it.position AND r.idx = it.idx
        LEFT JOIN review_accepted a ON a.stream_id = it.stream_id AND a.position = it.position
             AND a.idx = it.idx AND a.fingerprint = r.fingerprint""",
    "review_deltas": """
        WITH d AS (
            SELECT * FROM review_delta_events
            QUALIFY row_number() OVER (PARTITION BY stream_id, idx ORDER BY position DESC) = 1),
        still AS (
            SELECT stream_id, idx, position, list_sort(list(fingerprint)) AS fps
            FROM review_delta_items WHERE kind = 'stillPresent' GROUP BY ALL),
        j AS (
            SELECT d.*, coalesce(it.iteration, d.idx + 1) AS iteration, coalesce(s.fps, []) AS still_fps
            FROM d LEFT JOIN still s USING (stream_id, idx, position)
            LEFT JOIN review_iterations it USING (stream_id, idx))
        SELECT stream_id, iteration, idx, new, still_present, resolved, downgraded, still_present_blocking,
               CASE WHEN resolved + still_present + downgraded > 0
                    THEN resolved / (resolved + still_present + downgraded) END AS resolution_rate,
               coalesce(len(still_fps) > 0 AND still_fps = lag(still_fps) OVER w, false) AS plateau,
               plateau_recorded, tripped, max_recurrence, position
        FROM j WINDOW w AS (PARTITION BY stream_id ORDER BY iteration)""",
    "review_recurrence": """
        SELECT i.stream_id, i.idx, i.fingerprint, i.severity, i.file, i.recurrence
        FROM review_delta_items i JOIN review_deltas d USING (stream_id, idx, position)
        WHERE i.kind = 'recurrence'""",
    "gates": """
        SELECT stream_id, dialect, gate, verdict, verdict_at, sha, occurred_at, position,
               row_number() OVER (PARTITION BY stream_id, gate ORDER BY position) AS attempt
        FROM gate_events""",
    "breaker_trips": """
        SELECT stream_id, trigger, detail, phase, step, iteration, tripped_at, counters, occurred_at, position
        FROM breaker_events WHERE kind = 'tripped'""",
    "questions": """
        WITH asked AS (
            SELECT stream_id, question_id, step_id, event_at AS asked_at, min(position) AS position
            FROM question_events WHERE kind = 'asked' AND question_id IS NOT NULL GROUP BY ALL),
        answered AS (SELECT * FROM question_events WHERE kind = 'answered'),
        pairs AS (
            SELECT q.stream_id, q.question_id, q.step_id, q.asked_at, q.position,
                   arg_min(a.event_at, a.position) AS answered_at
            FROM asked q LEFT JOIN answered a ON a.stream_id = q.stream_id AND a.question_id = q.question_id
                 AND a.position > q.position
            GROUP BY ALL)
        SELECT stream_id, question_id, step_id, asked_at, answered_at,
               epoch(answered_at) - epoch(asked_at) AS latency_s, position
        FROM pairs""",
    "friday_cycles": """
        WITH e AS (
            SELECT *, sum(CASE WHEN kind = 'cycle_opened' THEN 1 ELSE 0 END)
                      OVER (PARTITION BY stream_id ORDER BY position) AS cycle_no
            FROM friday_events)
        SELECT stream_id, cycle_no, arg_min(agent, position) AS agent, arg_min(cycle_type, position) AS cycle_type,
               min(occurred_at) AS opened_at, max(occurred_at) FILTER (WHERE kind = 'cycle_closed') AS closed_at,
               1 + count_if(kind = 'report') AS rounds, count_if(kind = 'question') AS questions,
               count_if(kind = 'answer') AS answers, count_if(kind = 'cycle_closed') > 0 AS closed
        FROM e WHERE cycle_no > 0 GROUP BY stream_id, cycle_no""",
    "envelope_turns": """
        SELECT stream_id, position, kind, skill, state, from_state, unit_id, turn, ok, occurred_at
        FROM envelope_events""",
    "taskflow_verdicts": """
        SELECT stream_id, position, verdict, parsed_by, occurred_at FROM taskflow_events
        WHERE kind IN ('verdict', 'unparseable')""",
    "taskflow_follow_ups": """
        SELECT stream_id, position, follow_kind AS kind, task, parent, occurred_at FROM taskflow_events
        WHERE kind = 'follow_up'""",
    # Claude Code: one row per API message (its lines share message.id and repeat the usage).
    "token_usage": """
        SELECT stream_id, split_part(stream_id, '/', 1) AS session_id, message_id,
               arg_max(model, position) AS model, arg_max(request_id, position) AS request_id,
               arg_max(input_tokens, position) AS input_tokens, arg_max(output_tokens, position) AS output_tokens,
               arg_max(cache_read_tokens, position) AS cache_read_tokens,
               arg_max(cache_creation_tokens, position) AS cache_creation_tokens,
               min(occurred_at) AS occurred_at
        FROM claude_events WHERE message_id IS NOT NULL AND kind IN ('assistant_message', 'tool_use')
        GROUP BY stream_id, message_id""",
    "tool_calls": """
        WITH uses AS (SELECT stream_id, tool_use_id, tool_name, model, occurred_at AS called_at, position
                      FROM claude_events WHERE kind = 'tool_use' AND tool_use_id IS NOT NULL),
        results AS (SELECT stream_id, tool_use_id, bool_or(coalesce(is_error, false)) AS is_error,
                           min(occurred_at) AS result_at
                    FROM claude_events WHERE kind = 'tool_result' AND tool_use_id IS NOT NULL GROUP BY ALL)
        SELECT u.stream_id, split_part(u.stream_id, '/', 1) AS session_id, u.tool_use_id, u.tool_name, u.model,
               u.called_at, r.result_at, r.is_error, r.tool_use_id IS NOT NULL AS has_result
        FROM uses u LEFT JOIN results r USING (stream_id, tool_use_id)""",
    "sessions": """
        WITH c AS (SELECT * FROM claude_events),
        tok AS (SELECT stream_id, sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
                       sum(cache_read_tokens) AS cache_read_tokens,
                       sum(cache_creation_tokens) AS cache_creation_tokens, count(*) AS api_messages
                FROM token_usage GROUP BY stream_id)
        SELECT c.stream_id, split_part(c.stream_id, '/', 1) AS session_id, c.stream_id LIKE '%/%' AS is_subagent,
               string_agg(DISTINCT c.model, ', ' ORDER BY c.model) AS models,
               count_if(c.kind = 'user_message') AS turns, count_if(c.kind = 'tool_use') AS tool_calls,
               count_if(c.kind = 'tool_result' AND c.is_error) AS tool_errors,
               count_if(c.kind = 'compact_boundary') AS compactions, count_if(c.kind = 'hook') AS hooks,
               count_if(c.kind = 'unreadable_line') AS unreadable_lines,
               min(c.occurred_at) AS started_at, max(c.occurred_at) AS ended_at,
               epoch(max(c.occurred_at) - min(c.occurred_at)) AS wall_s,
               any_value(t.api_messages) AS api_messages, any_value(t.input_tokens) AS input_tokens,
               any_value(t.output_tokens) AS output_tokens, any_value(t.cache_read_tokens) AS cache_read_tokens,
               any_value(t.cache_creation_tokens) AS cache_creation_tokens
        FROM c LEFT JOIN tok t USING (stream_id) GROUP BY c.stream_id""",
    # Per orchestrator run: its linked sessions (run_sessions: the sessions that wrote its state
    # versions) summed, subagent transcripts included; wall time of the main transcripts, the
    # subagents' apart (they run inside their session's time).
    "run_claude": """
        WITH links AS (SELECT DISTINCT stream_id, session_id FROM run_sessions)
        SELECT l.stream_id, count(DISTINCT l.session_id) AS sessions, count(s.stream_id) AS transcripts,
               count_if(s.is_subagent) AS subagents, sum(s.api_messages) AS api_messages,
               sum(s.input_tokens) AS input_tokens, sum(s.output_tokens) AS output_tokens,
               sum(s.cache_read_tokens) AS cache_read_tokens, sum(s.cache_creation_tokens) AS cache_creation_tokens,
               sum(s.turns) AS turns, sum(s.tool_calls) AS tool_calls, sum(s.tool_errors) AS tool_errors,
               sum(s.compactions) AS compactions, sum(s.wall_s) FILTER (WHERE NOT s.is_subagent) AS wall_s,
               sum(s.wall_s) FILTER (WHERE s.is_subagent) AS subagent_wall_s
        FROM links l LEFT JOIN sessions s ON s.session_id = l.session_id GROUP BY l.stream_id""",
}

#: Tables filled from the store when a connection is bound to one (:func:`reading`): what the
#: log does not state event by event (a run's sessions are matched across streams,
#: ``projections.writers``).  Empty on a bare :func:`connect`.
LINKS: dict[str, str] = {"run_sessions": "stream_id VARCHAR, session_id VARCHAR"}


def table_names() -> list[str]:
    return list(SCHEMAS) + list(LINKS) + list(VIEWS)


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
            for table in SCHEMAS:
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
        for table in SCHEMAS:
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet({_sql_list(paths[table])})")
        for table, columns in LINKS.items():
            con.execute(f"CREATE TABLE {table} ({columns})")
        for view, sql in VIEWS.items():
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


