"""Claude Code analytics: one fact row per transcript line, hook or subagent link, the views
``sessions``, ``subagents``, ``tool_calls`` and ``token_usage`` and the ``claude_sessions`` metric section (declared as data: see
:mod:`eventstore.dialects.analytics`).

``token_usage`` and ``tool_calls`` are per transcript (a stream: a session's own or a subagent's), and so are
``claude_model_tokens`` and ``claude_model_tools``, their counts per stream and model, which the section's
per-model rows sum, and ``claude_stream_messages`` and ``claude_stream_cwd``, each transcript's part of the
shared view ``api_usage`` (a message counted once across transcripts: this dialect's part combines the
parts): run views, so that a report after new events counts again only the transcripts they touched.
``sessions`` and ``subagents`` relate a session to its subagents' transcripts (other streams) and
``run_claude`` reads the runs' links to sessions: not run views."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from eventstore.dialects import analytics as an
from eventstore.dialects.analytics import Analytics, MetricSection, RowFunctions, Rows, Table
from eventstore.store import RecordedEvent

_b, _d, _i, _s, _ts = an.b, an.d, an.i, an.s, an.ts
_ROWS = RowFunctions()
_on = _ROWS.on


_CLAUDE_KINDS = ("user_message", "assistant_message", "tool_use", "tool_result", "summary", "compact_boundary",
                 "system", "file_history_snapshot", "attachment", "queue_operation", "unknown_record",
                 "unreadable_line", "hook", "subagent_linked")


# The working folder a line names (Claude Code writes "cwd" on user and assistant lines): the session's
# project when no orchestrator run it wrote says otherwise.  A regular expression over the stored line,
# not a parse: the row function runs on every line of every transcript.
_CWD = re.compile(r'"cwd":"((?:[^"\\]|\\.)*)"')
_CWD_KINDS = frozenset({"claude.user_message", "claude.assistant_message", "claude.tool_use"})


def _cwd(e: RecordedEvent, p: dict[str, Any]) -> str | None:
    line = p.get("line")
    if e.type not in _CWD_KINDS or not isinstance(line, str):
        return None
    m = _CWD.search(line)
    return m.group(1).replace("\\\\", "\\") if m else None


def _claude(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    usage = _d(p.get("usage"))
    # The cache writes by lifetime (Claude Code 1.0.8x on): usage.cache_creation.ephemeral_5m_input_tokens
    # and ephemeral_1h_input_tokens beside the total; None (both) when the line does not split them.
    split = usage.get("cache_creation")
    split = split if isinstance(split, dict) else {}
    # A subagent link names the subagent in ``agent`` (its agent id, or its sidechain's first line).
    agent = _s(p.get("agent")) if e.type == "claude.subagent_linked" else _s(p.get("agent_id"))
    rows["claude_events"].append((
        e.position, e.stream_id, e.type.split(".", 1)[1], _s(p.get("model")), _s(p.get("message_id")),
        _s(p.get("request_id")), _s(p.get("tool_name")), _s(p.get("tool_use_id")), _b(p.get("is_error")),
        _i(usage.get("input_tokens")), _i(usage.get("output_tokens")), _i(usage.get("cache_read_input_tokens")),
        _i(usage.get("cache_creation_input_tokens")), agent, _ts(p.get("timestamp")) or at,
        _s(p.get("sidechain")), _s(p.get("stream")), _s(p.get("by")), _cwd(e, p),
        _i(split.get("ephemeral_5m_input_tokens")), _i(split.get("ephemeral_1h_input_tokens"))))


_on(*(f"claude.{kind}" for kind in _CLAUDE_KINDS))(_claude)


TABLES = (
    # One row per transcript line / hook of a Claude Code session (usage repeats on every line of a
    # message split over several lines: the token_usage view keeps one row per message id).
    Table("claude_events", (
        ("kind", "VARCHAR"), ("model", "VARCHAR"), ("message_id", "VARCHAR"), ("request_id", "VARCHAR"),
        ("tool_name", "VARCHAR"), ("tool_use_id", "VARCHAR"), ("is_error", "BOOLEAN"), ("input_tokens", "BIGINT"),
        ("output_tokens", "BIGINT"), ("cache_read_tokens", "BIGINT"), ("cache_creation_tokens", "BIGINT"),
        ("agent_id", "VARCHAR"), ("occurred_at", "TIMESTAMPTZ"), ("sidechain", "VARCHAR"),
        ("subagent_stream", "VARCHAR"), ("linked_by", "VARCHAR"), ("cwd", "VARCHAR"),
        ("cache_write_5m_tokens", "BIGINT"), ("cache_write_1h_tokens", "BIGINT"))),
)

# One row per API message for the shared view ``api_usage`` (and so ``usage``, priced, and ``evstore usage``).
# A message is its message id and request id: Claude Code writes one line per content block, each with the
# message's usage *so far*, so its output tokens are those of its LAST line (``first_output_tokens``: what a
# reader of the first line would count).  Counted once across the store (a resumed session's file repeats
# earlier messages): in the stream that recorded it first.  A subagent is its own stream
# (``<session>/agent-<id>``) or, inline (1.0.x), ``<session>#<first line uuid of its sidechain>``.
# Cache writes by lifetime: a message whose usage splits them (``cache_creation``) has its 5-minute and
# 1-hour writes as written; one that does not has them all as 5-minute writes (the API's default).
# A message's lines may be in several streams, so this view is not per stream; it combines the run views
# ``claude_stream_messages`` and ``claude_stream_cwd`` (each stream's part, kept between reports): a value is
# the latest (``arg_max`` skips NULLs) or earliest line's that has one, over every stream, as over the lines.
API_USAGE = """
    WITH m AS (
        SELECT message_id, request_key, arg_min(stream_id, position) AS stream_id,
               first(sidechain ORDER BY position) AS sidechain,
               arg_max(request_id, request_id_at) AS request_id, arg_max(model, model_at) AS model,
               min(occurred_at) AS occurred_at, sum(lines)::BIGINT AS lines,
               arg_max(input_tokens, input_tokens_at) AS input_tokens,
               arg_max(output_tokens, output_tokens_at) AS output_tokens,
               arg_max(cache_read_tokens, cache_read_tokens_at) AS cache_read_tokens,
               arg_max(cache_creation_tokens, cache_creation_tokens_at) AS cache_creation_tokens,
               arg_max(split_5m, split_5m_at) AS split_5m, arg_max(split_1h, split_1h_at) AS split_1h,
               arg_min(first_output_tokens, first_output_at) AS first_output_tokens, min(position) AS position,
               arg_min_null(writer, position) AS writer, arg_min_null(writer_token, position) AS writer_token,
               arg_min_null(writer_machine, position) AS writer_machine
        FROM claude_stream_messages GROUP BY message_id, request_key),
    cwd AS (SELECT split_part(stream_id, '/', 1) AS session_id, arg_max(cwd, cwd_at) AS cwd
            FROM claude_stream_cwd GROUP BY ALL)
    SELECT m.stream_id, split_part(m.stream_id, '/', 1) AS session_id,
           CASE WHEN m.stream_id LIKE '%/%' THEN m.stream_id
                WHEN m.sidechain IS NOT NULL THEN m.stream_id || '#' || m.sidechain END AS subagent,
           'claude' AS dialect, m.message_id, m.request_id, m.model, m.occurred_at, c.cwd, m.lines,
           m.input_tokens, m.output_tokens, m.cache_read_tokens, m.cache_creation_tokens, m.first_output_tokens,
           m.position, m.writer, m.writer_token, m.writer_machine,
           CASE WHEN m.split_5m IS NULL AND m.split_1h IS NULL THEN m.cache_creation_tokens
                ELSE coalesce(m.split_5m, 0) END AS cache_creation_5m_tokens,
           coalesce(m.split_1h, 0) AS cache_creation_1h_tokens
    FROM m LEFT JOIN cwd c ON c.session_id = split_part(m.stream_id, '/', 1)"""


def _latest(column: str, name: str | None = None) -> str:
    """A column's value on the stream's latest line that has one, and that line's position."""
    name = name or column
    return (f"arg_max({column}, position) AS {name}, "
            f"max(position) FILTER (WHERE {column} IS NOT NULL) AS {name}_at")


def _stream_tokens(where: str = "") -> str:
    """Per stream (of ``token_usage``'s, ``where`` they are): its API messages and their tokens summed."""
    return f"""SELECT stream_id, sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
                   sum(cache_read_tokens) AS cache_read_tokens, sum(cache_creation_tokens) AS cache_creation_tokens,
                   count(*) AS api_messages
               FROM token_usage {where} GROUP BY stream_id"""


VIEWS = {
    # One row per API message (its lines share message.id and repeat the usage).
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
    # Per stream and model (the claude_sessions section's rows sum them): its API messages and their tokens,
    # and its tool calls and errors.  A tool call without a model is in no model's row (the section matched
    # tool calls to a message's model by equality, which NULL never is).
    "claude_model_tokens": """
        SELECT stream_id, model, count(*) AS api_messages, sum(input_tokens) AS input_tokens,
               sum(output_tokens) AS output_tokens, sum(cache_read_tokens) AS cache_read_tokens,
               sum(cache_creation_tokens) AS cache_creation_tokens
        FROM token_usage GROUP BY stream_id, model""",
    "claude_model_tools": """
        SELECT stream_id, model, count(*) AS tool_calls, count_if(is_error) AS tool_errors
        FROM tool_calls WHERE model IS NOT NULL GROUP BY stream_id, model""",
    # Per stream and API message (message id and request id): its lines in this stream, for ``api_usage``
    # (which combines the streams a message's lines are in): the first line's position and sidechain, and each
    # value of the latest line that has one (of the output tokens, the earliest too) with that line's position.
    # With the writer of the message's first line in the stream (the ``events`` facts' columns: who sent it
    # over the HTTP API), which ``api_usage`` gives the message: joined here, stream by stream, it costs
    # what a stream's events cost; joined in ``usage``, every report read every event of the store.
    "claude_stream_messages": f"""
        WITH m AS (
            SELECT stream_id, message_id, coalesce(request_id, '') AS request_key, min(position) AS position,
                   first(sidechain ORDER BY position) AS sidechain, min(occurred_at) AS occurred_at,
                   count(*) AS lines, {_latest("request_id")}, {_latest("model")}, {_latest("input_tokens")},
                   {_latest("output_tokens")}, {_latest("cache_read_tokens")}, {_latest("cache_creation_tokens")},
                   {_latest("cache_write_5m_tokens", "split_5m")}, {_latest("cache_write_1h_tokens", "split_1h")},
                   arg_min(output_tokens, position) AS first_output_tokens,
                   min(position) FILTER (WHERE output_tokens IS NOT NULL) AS first_output_at
            FROM claude_events
            WHERE message_id IS NOT NULL AND kind IN ('assistant_message', 'tool_use')
            GROUP BY stream_id, message_id, request_key)
        SELECT m.*, e.writer, e.writer_token, e.writer_machine
        FROM m LEFT JOIN (SELECT stream_id, position, writer, writer_token, writer_machine FROM events
                          WHERE writer IS NOT NULL) e  -- (all NULL or none: writer_key)
            ON e.stream_id = m.stream_id AND e.position = m.position""",
    # Per stream: the working folder its latest line naming one names, and that line's position (a session's
    # is that of its latest line over its own and its subagents' transcripts: ``api_usage``).
    "claude_stream_cwd": """
        SELECT stream_id, arg_max(cwd, position) AS cwd, max(position) AS cwd_at
        FROM claude_events WHERE cwd IS NOT NULL GROUP BY stream_id""",
    # Per stream, what ``sessions`` and ``subagents`` count of its lines (kept between reports: aggregated from
    # every line at each report, ``sessions`` took 0.73 s at 10^6 Claude events and a report read it twice).
    # ``work_*``: over the lines that are not hooks or links (a subagent file's own work).
    "claude_stream_stats": """
        SELECT stream_id, string_agg(DISTINCT model, ', ' ORDER BY model) AS models,
               count_if(kind = 'user_message') AS turns, count_if(kind = 'tool_use') AS tool_calls,
               count_if(kind = 'tool_result' AND is_error) AS tool_errors,
               count_if(kind = 'compact_boundary') AS compactions, count_if(kind = 'hook') AS hooks,
               count_if(kind = 'unreadable_line') AS unreadable_lines,
               min(occurred_at) AS started_at, max(occurred_at) AS ended_at,
               count(*) FILTER (WHERE kind NOT IN ('hook', 'subagent_linked')) AS work_lines,
               min(occurred_at) FILTER (WHERE kind NOT IN ('hook', 'subagent_linked')) AS work_started_at,
               max(occurred_at) FILTER (WHERE kind NOT IN ('hook', 'subagent_linked')) AS work_ended_at
        FROM claude_events GROUP BY stream_id""",
    # Per stream and 1.0.x sidechain (an inline subagent): its first and last line's times.
    "claude_stream_sidechains": """
        SELECT stream_id, sidechain, min(occurred_at) AS started_at, max(occurred_at) AS ended_at
        FROM claude_events WHERE sidechain IS NOT NULL GROUP BY stream_id, sidechain""",
    # The links a session's stream recorded from a Task tool use to the subagent it started.
    "claude_subagent_links": """
        SELECT stream_id, agent_id, subagent_stream, tool_use_id, linked_by, position
        FROM claude_events WHERE kind = 'subagent_linked'""",
    # One row per subagent, and when it worked: a 2.x file of its own (its stream) or a 1.0.x sidechain inline in
    # the session's file (each a stream of claude_stream_stats, or a stream and sidechain of
    # claude_stream_sidechains: no two rows share a subagent).  What ``sessions`` and claude_sessions' summary count
    # and sum of them (joined to their links and Task calls, as ``subagents`` does, a report read every tool call:
    # 50 ms at 10^6 Claude events).
    "claude_subagent_spans": """
        SELECT stream_id AS subagent_stream, split_part(stream_id, '/', 1) AS session_id,
               regexp_extract(stream_id, '/agent-([^/]*)$', 1) AS agent, 'file' AS layout,
               work_started_at AS started_at, work_ended_at AS ended_at
        FROM claude_stream_stats WHERE stream_id LIKE '%/agent-%' AND work_lines > 0
        UNION ALL
        SELECT stream_id, stream_id, sidechain, 'inline', started_at, ended_at
        FROM claude_stream_sidechains WHERE stream_id NOT LIKE '%/%'""",
    # One row per subagent (claude_subagent_spans), with the Task tool use it is linked to (claude.subagent_linked),
    # if known.
    "subagents": """
        WITH links AS (
            SELECT stream_id AS parent_stream, agent_id AS agent, subagent_stream, tool_use_id, linked_by,
                   position AS linked_at_position,
                   -- what a subagent found below is linked by: a file's stream, or an inline one's session and agent
                   CASE WHEN subagent_stream IS NULL THEN 'inline' ELSE 'file' END AS layout,
                   coalesce(subagent_stream, stream_id) AS joined_stream,
                   CASE WHEN subagent_stream IS NULL THEN agent_id END AS joined_agent
            FROM claude_subagent_links)
        SELECT x.session_id, x.subagent_stream AS stream_id, x.agent, x.layout,
               arg_min(l.tool_use_id, l.linked_at_position) AS task_tool_use_id,
               arg_min(l.linked_by, l.linked_at_position) AS linked_by,
               arg_min(t.tool_name, l.linked_at_position) AS task_tool_name,
               arg_min(t.called_at, l.linked_at_position) AS task_called_at,
               any_value(x.started_at) AS started_at, any_value(x.ended_at) AS ended_at,
               epoch(any_value(x.ended_at) - any_value(x.started_at)) AS duration_s
        FROM claude_subagent_spans x
        -- equalities only: a join on (file AND ...) OR (inline AND ...) was a nested loop over every subagent and
        -- every link (0.88 s at 10^6 Claude events, read five times by a report; 0.09 s so)
        LEFT JOIN links l ON l.layout = x.layout AND l.joined_stream = x.subagent_stream
                          AND l.joined_agent IS NOT DISTINCT FROM (CASE WHEN x.layout = 'inline' THEN x.agent END)
        LEFT JOIN tool_calls t ON t.stream_id = l.parent_stream AND t.tool_use_id = l.tool_use_id
        GROUP BY x.session_id, x.subagent_stream, x.agent, x.layout""",
    "sessions": f"""
        WITH sub AS (SELECT session_id, count(*) AS subagents, sum(epoch(ended_at - started_at)) AS subagent_s
                     FROM claude_subagent_spans GROUP BY session_id),
        own AS (SELECT stream_id, task_tool_use_id, duration_s FROM subagents WHERE layout = 'file'),
        tok AS ({_stream_tokens()})
        -- a row a stream (claude_stream_stats), joined to at most one row of each of tok, own (a file's
        -- subagent row) and sub (a session's subagents)
        SELECT c.stream_id, split_part(c.stream_id, '/', 1) AS session_id, c.stream_id LIKE '%/%' AS is_subagent,
               c.models, c.turns, c.tool_calls, c.tool_errors, c.compactions, c.hooks, c.unreadable_lines,
               c.started_at, c.ended_at, epoch(c.ended_at - c.started_at) AS wall_s,
               t.api_messages, t.input_tokens, t.output_tokens, t.cache_read_tokens, t.cache_creation_tokens,
               CASE WHEN c.stream_id LIKE '%/%' THEN split_part(c.stream_id, '/', 1) END AS parent_session,
               o.task_tool_use_id,
               CASE WHEN c.stream_id LIKE '%/%' THEN 0 ELSE coalesce(sb.subagents, 0) END AS subagents,
               CASE WHEN c.stream_id LIKE '%/%' THEN NULL ELSE sb.subagent_s END AS subagent_s
        FROM claude_stream_stats c LEFT JOIN tok t USING (stream_id) LEFT JOIN own o USING (stream_id)
             LEFT JOIN sub sb ON sb.session_id = c.stream_id""",
    # Per orchestrator run: its linked sessions (run_sessions: the sessions that wrote its state
    # versions) summed, subagent transcripts included; wall time of the main transcripts, the
    # subagents' apart (they run inside their session's time).  The linked sessions' transcripts are read from
    # the streams' counts (claude_stream_stats, as ``sessions`` has them) and their API messages, for those
    # sessions alone: through ``sessions``, every stream's subagents and tokens were joined first (0.15-0.19 s
    # at 10^6 Claude events with no run linked to any).
    "run_claude": f"""
        WITH links AS (SELECT DISTINCT stream_id, session_id FROM run_sessions),
        linked AS (SELECT stream_id FROM claude_stream_stats
                   WHERE split_part(stream_id, '/', 1) IN (SELECT session_id FROM links)),
        tok AS ({_stream_tokens("WHERE stream_id IN (SELECT stream_id FROM linked)")}),
        s AS (SELECT c.stream_id, split_part(c.stream_id, '/', 1) AS session_id, c.stream_id LIKE '%/%' AS is_subagent,
                     c.turns, c.tool_calls, c.tool_errors, c.compactions, epoch(c.ended_at - c.started_at) AS wall_s,
                     t.api_messages, t.input_tokens, t.output_tokens, t.cache_read_tokens, t.cache_creation_tokens
              FROM claude_stream_stats c LEFT JOIN tok t USING (stream_id)
              WHERE c.stream_id IN (SELECT stream_id FROM linked))
        SELECT l.stream_id, count(DISTINCT l.session_id) AS sessions, count(s.stream_id) AS transcripts,
               count_if(s.is_subagent) AS subagents, sum(s.api_messages) AS api_messages,
               sum(s.input_tokens) AS input_tokens, sum(s.output_tokens) AS output_tokens,
               sum(s.cache_read_tokens) AS cache_read_tokens, sum(s.cache_creation_tokens) AS cache_creation_tokens,
               sum(s.turns) AS turns, sum(s.tool_calls) AS tool_calls, sum(s.tool_errors) AS tool_errors,
               sum(s.compactions) AS compactions, sum(s.wall_s) FILTER (WHERE NOT s.is_subagent) AS wall_s,
               sum(s.wall_s) FILTER (WHERE s.is_subagent) AS subagent_wall_s
        FROM links l LEFT JOIN s ON s.session_id = l.session_id GROUP BY l.stream_id""",
}

_IN = "stream_id IN (SELECT stream_id FROM sel)"

SECTIONS = (
    MetricSection(
        "claude_sessions", "Claude Code sessions: tokens, tool calls and errors per model",
        ("model", "sessions", "api_messages", "input_tokens", "output_tokens", "cache_read_tokens",
         "cache_creation_tokens", "tool_calls", "tool_errors"),
        # The streams' counts per model summed: a stream with messages of a model is a row (a count of distinct
        # sessions), the token sums stay HUGEINT and NULL where no message of the model has a count, as
        # summing the messages gave; a model's tool calls are those of its name (none for messages without one).
        f"""WITH u AS (SELECT model, count(*) AS sessions, sum(api_messages)::BIGINT AS api_messages,
                          sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
                          sum(cache_read_tokens) AS cache_read_tokens,
                          sum(cache_creation_tokens) AS cache_creation_tokens
                   FROM claude_model_tokens WHERE {_IN} GROUP BY model),
            t AS (SELECT model, sum(tool_calls)::BIGINT AS tool_calls, sum(tool_errors) AS tool_errors
                  FROM claude_model_tools WHERE {_IN} GROUP BY model)
            SELECT u.model, u.sessions, u.api_messages, u.input_tokens, u.output_tokens, u.cache_read_tokens,
                   u.cache_creation_tokens, coalesce(t.tool_calls, 0) AS tool_calls,
                   coalesce(t.tool_errors, 0) AS tool_errors
            FROM u LEFT JOIN t ON t.model = u.model ORDER BY u.model""",
        # A transcript is a stream of claude_stream_stats (a row of ``sessions`` each, with these counts): the
        # ``sessions`` view's joins, which nothing here reads, held more than the report's 100 MB beside the
        # subagents at 10^6 Claude events (the summary ran again at higher limits: 1.2-1.4 s).
        f"""WITH sa AS (SELECT count(*) AS subagents, sum(epoch(ended_at - started_at)) AS subagent_s
                        FROM claude_subagent_spans WHERE session_id IN (SELECT split_part(stream_id, '/', 1) FROM sel))
            SELECT count(*) AS transcripts, (SELECT subagents FROM sa) AS subagents,
               (SELECT subagent_s FROM sa) AS subagent_s, sum(turns) AS turns,
               sum(tool_calls) AS tool_calls, sum(tool_errors) AS tool_errors, sum(compactions) AS compactions,
               sum(epoch(ended_at - started_at)) AS wall_s
            FROM claude_stream_stats WHERE {_IN}""",
        "tokens are counted once per API message (its lines share message.id); a tool error is a "
        "tool_result with is_error; subagents: 2.x files and 1.0.x inline sidechains, subagent_s their summed "
        "durations; views: sessions, subagents, tool_calls, token_usage."),
)

_RUN_COLUMNS = ("stream_id", "sessions", "transcripts", "subagents", "input_tokens", "output_tokens",
                "cache_read_tokens", "cache_creation_tokens", "turns", "tool_calls", "tool_errors", "compactions",
                "wall_s", "subagent_wall_s")

# Any orchestrator run's Claude Code sessions: in the cross-run report and in every run's report.
CLAUDE_RUNS = MetricSection(
    "claude_runs", "Claude Code sessions per orchestrator run (summed over its linked sessions)", _RUN_COLUMNS,
    f"""SELECT {", ".join(_RUN_COLUMNS)} FROM run_claude WHERE {_IN} ORDER BY stream_id""",
    f"""SELECT count(*) AS runs_with_sessions, sum(sessions) AS sessions, sum(input_tokens) AS input_tokens,
           sum(output_tokens) AS output_tokens, sum(cache_read_tokens) AS cache_read_tokens,
           sum(cache_creation_tokens) AS cache_creation_tokens, sum(turns) AS turns,
           sum(tool_calls) AS tool_calls, sum(tool_errors) AS tool_errors, sum(subagents) AS subagents,
           sum(compactions) AS compactions, sum(wall_s) AS wall_s
        FROM run_claude WHERE {_IN}""",
    "a run's sessions are those that wrote its state versions (hook, content match or path+time; "
    "`evstore log RUN`); sums include their subagent transcripts; wall_s: the main transcripts, "
    "subagent_wall_s: the subagents'; view: run_claude.")

# version 2: claude_events' sidechain and subagent-link columns, the subagents view; 3: cwd, api_usage;
# 4: api_usage's position (its first line: whose writer the message's is); 5: the cache writes by lifetime
ANALYTICS = Analytics(version=5, tables=TABLES, rows=_ROWS, views=VIEWS, view_parts={"api_usage": API_USAGE},
                      sections=(*SECTIONS, CLAUDE_RUNS), every_run_sections=(CLAUDE_RUNS,),
                      run_views=("token_usage", "tool_calls", "claude_model_tokens", "claude_model_tools",
                                 "claude_stream_messages", "claude_stream_cwd", "claude_stream_stats",
                                 "claude_stream_sidechains", "claude_subagent_links"))
