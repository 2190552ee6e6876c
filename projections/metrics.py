"""Run metrics over the analytics views (DuckDB): the definitions of DESIGN.md section 6.

Every metric is one function ``metric(con, scope) -> Section`` over a DuckDB connection from
:func:`projections.analytics.connect`; :func:`cross_run_report` and :func:`run_report` collect
them into a :class:`Report` that :mod:`projections.report` renders (table, JSON, CSV, HTML).
The formulas are documented in the README (section "Metrics"); the tests recompute each one from raw
simulator snapshots.

    >>> con = open_analytics(store)
    >>> report = cross_run_report(con, Scope(project="payments-api"))
    >>> report.section("reviewer_acceptance").rows[0]
    {'model': 'claude-opus-4', 'raised': 412, 'accepted': 171, 'ratio': 0.415, ...}
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import duckdb

from eventstore.errors import EvstoreError

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


@dataclass(frozen=True)
class Scope:
    """Which runs a report covers (all filters optional, combined with AND)."""

    project: str | None = None
    dialect: str | None = None
    since: str | None = None  # ISO time: runs with activity at or after it
    stream_id: str | None = None

    def where(self) -> tuple[str, list[str]]:
        """The condition on ``runs`` selecting this scope, and its bound parameters (the values come
        from command lines and from ``evstore serve``'s query strings: they never become SQL text)."""
        conds, params = ["true"], []
        for col, value in (("project", self.project), ("dialect", self.dialect), ("stream_id", self.stream_id)):
            if value is not None:
                conds.append(f"{col} = ?")
                params.append(value)
        if self.since is not None:
            conds.append("last_event_at >= ?::TIMESTAMPTZ")
            params.append(_iso(self.since))
        return " AND ".join(conds), params

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in (("project", self.project), ("dialect", self.dialect), ("since", self.since),
                                  ("stream", self.stream_id)) if v is not None}


def _iso(value: str) -> str:
    from projections.runs import parse_since

    return parse_since(value).isoformat()


@dataclass
class Section:
    """One block of a report: a table of rows plus summary figures and a chart hint."""

    name: str
    title: str
    columns: list[str]
    rows: list[dict[str, Any]]
    summary: dict[str, Any] = field(default_factory=dict)
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "title": self.title, "columns": self.columns, "rows": self.rows,
                "summary": self.summary, "note": self.note}


@dataclass
class Report:
    title: str
    scope: dict[str, Any]
    sections: list[Section]

    def section(self, name: str) -> Section:
        for s in self.sections:
            if s.name == name:
                return s
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return {"title": self.title, "scope": self.scope, "sections": [s.to_dict() for s in self.sections]}


def _rows(con: duckdb.DuckDBPyConnection, sql: str) -> list[dict[str, Any]]:
    rel = con.execute(sql)
    cols = [d[0] for d in rel.description or []]
    return [dict(zip(cols, (_plain(v) for v in r), strict=True)) for r in rel.fetchall()]


def _plain(v: Any) -> Any:
    """JSON-friendly values: floats rounded to 4 places, times as ISO text."""
    if isinstance(v, float):
        return None if math.isnan(v) else round(v, 4)
    if hasattr(v, "isoformat"):
        return v.isoformat()
    if hasattr(v, "as_integer_ratio") and not isinstance(v, (int, bool)):  # Decimal
        return round(float(v), 4)
    return v


def _select(con: duckdb.DuckDBPyConnection, scope: Scope) -> None:
    """(Re)define ``sel``: the stream ids in scope, used by every metric below."""
    where, params = scope.where()
    con.execute(f"CREATE OR REPLACE TEMP TABLE sel AS SELECT stream_id FROM runs WHERE {where}", params)


# ---------------------------------------------------------------- review


def reviewer_acceptance(con: duckdb.DuckDBPyConnection) -> Section:
    rows = _rows(con, """
        SELECT model, count(*) AS raised, count_if(accepted) AS accepted
        FROM review_findings WHERE has_map AND stream_id IN (SELECT stream_id FROM sel)
        GROUP BY model ORDER BY raised DESC, model""")
    for r in rows:
        r["ratio"] = round(r["accepted"] / r["raised"], 4) if r["raised"] else None
        lo, hi = wilson(r["accepted"], r["raised"])
        r["ci_low"], r["ci_high"] = (None if lo is None else round(lo, 4)), (None if hi is None else round(hi, 4))
    counts = _rows(con, """
        SELECT count_if(has_map) AS iterations_with_map, count_if(NOT has_map) AS unavailable
        FROM review_iterations WHERE stream_id IN (SELECT stream_id FROM sel)""")[0]
    return Section("reviewer_acceptance", "Reviewer acceptance per model (Wilson 95 %)",
                   ["model", "raised", "accepted", "ratio", "ci_low", "ci_high"], rows,
                   {k: int(v or 0) for k, v in counts.items()},
                   "raised = reviewer x distinct fingerprint in iterations with an anonymizationMap; "
                   "iterations without one are counted as unavailable, not as zero.")


def review_deltas(con: duckdb.DuckDBPyConnection) -> Section:
    rows = _rows(con, """
        SELECT iteration, count(*) AS runs, sum(new) AS new, sum(still_present) AS still_present,
               sum(resolved) AS resolved, sum(downgraded) AS downgraded,
               sum(still_present_blocking) AS still_present_blocking,
               CASE WHEN sum(resolved + still_present + downgraded) > 0
                    THEN sum(resolved) / sum(resolved + still_present + downgraded) END AS resolution_rate,
               avg(CASE WHEN plateau THEN 1.0 ELSE 0.0 END) AS plateau_rate,
               max(max_recurrence) AS max_recurrence
        FROM review_deltas WHERE stream_id IN (SELECT stream_id FROM sel)
        GROUP BY iteration ORDER BY iteration""")
    rec = _rows(con, """
        SELECT count(*) AS survivors, avg(recurrence) AS mean_recurrence, max(recurrence) AS max_recurrence
        FROM review_recurrence WHERE stream_id IN (SELECT stream_id FROM sel)""")[0]
    return Section("review_deltas", "Review deltas per iteration (iteration >= 2)",
                   ["iteration", "runs", "new", "still_present", "resolved", "downgraded", "still_present_blocking",
                    "resolution_rate", "plateau_rate", "max_recurrence"], rows, rec,
                   "resolution rate = resolved / (resolved + stillPresent + downgraded); plateau = still-present "
                   "set equal to the previous delta's and non-empty.")


def iterations_until_approval(con: duckdb.DuckDBPyConnection) -> Section:
    per_run = """
        SELECT stream_id, min(iteration) FILTER (WHERE decision = 'accept') AS approved_at
        FROM review_iterations WHERE stream_id IN (SELECT stream_id FROM sel) GROUP BY stream_id"""
    rows = _rows(con, f"""
        SELECT approved_at AS iterations, count(*) AS runs FROM ({per_run})
        WHERE approved_at IS NOT NULL GROUP BY ALL ORDER BY 1""")
    summary = _rows(con, f"""
        SELECT count(*) AS runs_reviewed, count(approved_at) AS approved,
               count(*) - count(approved_at) AS not_approved, avg(approved_at) AS mean,
               median(approved_at) AS median FROM ({per_run})""")[0]
    return Section("iterations_until_approval", "Review iterations until approval",
                   ["iterations", "runs"], rows, summary,
                   "approval = the first iteration whose decision is \"accept\".")


# ---------------------------------------------------------------- gates, breaker


def gates(con: duckdb.DuckDBPyConnection) -> Section:
    rows = _rows(con, """
        WITH g AS (SELECT * FROM gates WHERE stream_id IN (SELECT stream_id FROM sel)),
        runs_g AS (
            SELECT gate, stream_id,
                   arg_min(verdict, position) FILTER (WHERE verdict IN ('pass', 'fail')) AS first_verdict,
                   min(position) FILTER (WHERE verdict = 'fail') AS first_fail,
                   max(position) FILTER (WHERE verdict = 'pass') AS last_pass
            FROM g GROUP BY ALL)
        SELECT gate,
               (SELECT count_if(verdict = 'pass') FROM g WHERE g.gate = r.gate) AS pass,
               (SELECT count_if(verdict = 'fail') FROM g WHERE g.gate = r.gate) AS fail,
               (SELECT count_if(verdict = 'not-applicable') FROM g WHERE g.gate = r.gate) AS not_applicable,
               (SELECT count_if(verdict NOT IN ('pass', 'fail', 'not-applicable') OR verdict IS NULL)
                  FROM g WHERE g.gate = r.gate) AS other,
               count(*) AS runs,
               count(first_verdict) AS runs_judged,
               CASE WHEN count(first_verdict) > 0
                    THEN count_if(first_verdict = 'pass') / count(first_verdict) END AS first_pass_yield,
               count(first_fail) AS runs_failed,
               coalesce(count_if(last_pass > first_fail), 0) AS recovered,
               CASE WHEN count(first_fail) > 0 THEN count_if(last_pass > first_fail) / count(first_fail) END
                   AS recovery_rate
        FROM runs_g r GROUP BY gate ORDER BY gate""")
    return Section("gates", "Gates: verdicts, first-pass yield, fail -> pass recovery",
                   ["gate", "pass", "fail", "not_applicable", "other", "runs", "first_pass_yield",
                    "runs_failed", "recovered", "recovery_rate"], rows, {},
                   "first-pass yield = runs whose first pass/fail verdict for the gate is pass / runs with a "
                   "pass/fail verdict; recovery = runs with a pass after their first fail / runs with a fail.")


def breaker_trips(con: duckdb.DuckDBPyConnection) -> Section:
    rows = _rows(con, """
        SELECT trigger, count(*) AS trips, count(DISTINCT stream_id) AS runs,
               string_agg(DISTINCT concat_ws(' / ', 'phase ' || phase, 'step ' || step,
                                             'iteration ' || iteration::VARCHAR), '; ') AS "where",
               max(TRY_CAST(json_extract(counters, '$.identicalFindingCycles') AS BIGINT)) AS max_identical_cycles,
               max(TRY_CAST(json_extract(counters, '$.reworkCycles') AS BIGINT)) AS max_rework_cycles
        FROM breaker_trips WHERE stream_id IN (SELECT stream_id FROM sel)
        GROUP BY trigger ORDER BY trigger""")
    total = _rows(con, """SELECT count(*) AS trips, count(DISTINCT stream_id) AS runs_tripped,
                          (SELECT count(*) FROM sel) AS runs FROM breaker_trips
                          WHERE stream_id IN (SELECT stream_id FROM sel)""")[0]
    return Section("breaker_trips", "Circuit-breaker trips per trigger",
                   ["trigger", "trips", "runs", "where", "max_identical_cycles", "max_rework_cycles"], rows, total)


# ---------------------------------------------------------------- phases, questions


def phase_durations(con: duckdb.DuckDBPyConnection) -> Section:
    rows = _rows(con, """
        SELECT dialect, phase, count(*) AS executions, count(duration_s) AS finished,
               quantile_cont(duration_s, 0.5) AS p50_s, quantile_cont(duration_s, 0.9) AS p90_s,
               max(duration_s) AS max_s, sum(retries) AS retries, sum(failures) AS failures,
               count_if(skipped) AS skips
        FROM phases WHERE stream_id IN (SELECT stream_id FROM sel)
        GROUP BY dialect, phase ORDER BY dialect, phase""")
    return Section("phase_durations", "Phase durations and retries",
                   ["dialect", "phase", "executions", "finished", "p50_s", "p90_s", "max_s", "retries", "failures",
                    "skips"], rows)


def question_latency(con: duckdb.DuckDBPyConnection) -> Section:
    rows = _rows(con, """
        SELECT question_id, count(*) AS asked, count(answered_at) AS answered,
               quantile_cont(latency_s, 0.5) AS p50_s, quantile_cont(latency_s, 0.9) AS p90_s,
               avg(latency_s) AS mean_s
        FROM questions WHERE stream_id IN (SELECT stream_id FROM sel) GROUP BY ALL ORDER BY question_id""")
    total = _rows(con, """SELECT count(*) AS asked, count(answered_at) AS answered,
                          quantile_cont(latency_s, 0.5) AS p50_s, avg(latency_s) AS mean_s
                          FROM questions WHERE stream_id IN (SELECT stream_id FROM sel)""")[0]
    return Section("question_latency", "Question latency (asked -> answered)",
                   ["question_id", "asked", "answered", "p50_s", "p90_s", "mean_s"], rows, total)


# ---------------------------------------------------------------- other dialects


def friday_cycles(con: duckdb.DuckDBPyConnection) -> Section:
    rows = _rows(con, """
        SELECT cycle_type, count(*) AS cycles, count_if(closed) AS closed, avg(rounds) AS mean_rounds,
               max(rounds) AS max_rounds, sum(questions) AS questions, sum(answers) AS answers
        FROM friday_cycles WHERE stream_id IN (SELECT stream_id FROM sel) GROUP BY ALL ORDER BY cycle_type""")
    risk = _rows(con, """
        SELECT count(*) AS metrics_writes, count_if(mismatch) AS mismatching_writes,
               count(DISTINCT stream_id) FILTER (WHERE mismatch) AS runs_with_mismatch
        FROM friday_risk WHERE stream_id IN (SELECT stream_id FROM sel)""")[0]
    return Section("friday_cycles", "FRIDAY specialist cycles and risk-score mismatches",
                   ["cycle_type", "cycles", "closed", "mean_rounds", "max_rounds", "questions", "answers"], rows,
                   risk, "rounds = 1 + reports received inside the cycle; a mismatch = recorded risk_score is not "
                   "the integer the documented formula gives (history is never rewritten).")


def envelope_turns(con: duckdb.DuckDBPyConnection) -> Section:
    rows = _rows(con, """
        SELECT skill, state, count(*) AS turns FROM envelope_turns
        WHERE kind = 'accepted' AND stream_id IN (SELECT stream_id FROM sel) GROUP BY ALL ORDER BY skill, state""")
    summary = _rows(con, """
        WITH e AS (SELECT * FROM envelope_turns WHERE stream_id IN (SELECT stream_id FROM sel)),
        units AS (
            SELECT stream_id, count_if(kind = 'accepted' AND skill = 'review-change' AND state = 'NEEDS_FIXES')
                   AS folds FROM e GROUP BY stream_id)
        SELECT count_if(kind = 'accepted') AS accepted_turns, count_if(kind = 'rejected') AS rejected_turns,
               CASE WHEN count_if(kind IN ('accepted', 'rejected')) > 0
                    THEN count_if(kind = 'rejected') / count_if(kind IN ('accepted', 'rejected')) END AS repair_rate,
               count_if(kind = 'repair' AND ok) AS repairs_ok, count_if(kind = 'failed') AS turns_failed,
               count_if(kind = 'halted') AS halts, count_if(kind = 'no_progress') AS no_progress,
               (SELECT avg(folds) FROM units) AS mean_review_fold_cycles,
               (SELECT max(folds) FROM units) AS max_review_fold_cycles
        FROM e""")[0]
    return Section("envelope_turns", "Envelope: state mix per skill, repairs, review -> fold cycles",
                   ["skill", "state", "turns"], rows, summary,
                   "repair rate = rejected turns / (accepted + rejected turns); a review -> fold cycle = an accepted "
                   "review-change envelope in state NEEDS_FIXES (per unit = per stream).")


def taskflow_verdicts(con: duckdb.DuckDBPyConnection) -> Section:
    rows = _rows(con, """
        SELECT verdict, count(*) AS verdicts FROM taskflow_verdicts
        WHERE stream_id IN (SELECT stream_id FROM sel) GROUP BY ALL ORDER BY verdict""")
    summary = _rows(con, """
        WITH v AS (SELECT count(*) AS n FROM taskflow_verdicts WHERE stream_id IN (SELECT stream_id FROM sel)),
        f AS (SELECT * FROM taskflow_follow_ups WHERE stream_id IN (SELECT stream_id FROM sel))
        SELECT (SELECT n FROM v) AS verdicts,
               (SELECT count_if(kind = 'fix') FROM f) AS fix_spawned,
               (SELECT count_if(kind = 'review') FROM f) AS review_spawned,
               (SELECT count_if(kind = 'tiebreak') FROM f) AS tiebreak_spawned,
               CASE WHEN (SELECT n FROM v) > 0 THEN (SELECT count_if(kind = 'fix') FROM f) / (SELECT n FROM v) END
                   AS fix_spawn_rate,
               CASE WHEN (SELECT n FROM v) > 0 THEN (SELECT count(*) FROM f) / (SELECT n FROM v) END
                   AS follow_up_spawn_rate""")[0]
    return Section("taskflow_verdicts", "Taskflow verdict mix and follow-up spawn rate", ["verdict", "verdicts"],
                   rows, summary, "spawn rate = follow-up tasks of the kind / verdicts (issued or unparseable).")


def claude_sessions(con: duckdb.DuckDBPyConnection) -> Section:
    rows = _rows(con, """
        SELECT u.model, count(DISTINCT u.stream_id) AS sessions, count(*) AS api_messages,
               sum(u.input_tokens) AS input_tokens, sum(u.output_tokens) AS output_tokens,
               sum(u.cache_read_tokens) AS cache_read_tokens, sum(u.cache_creation_tokens) AS cache_creation_tokens,
               (SELECT count(*) FROM tool_calls t WHERE t.model = u.model
                AND t.stream_id IN (SELECT stream_id FROM sel)) AS tool_calls,
               (SELECT coalesce(count_if(t.is_error), 0) FROM tool_calls t WHERE t.model = u.model
                AND t.stream_id IN (SELECT stream_id FROM sel)) AS tool_errors
        FROM token_usage u WHERE u.stream_id IN (SELECT stream_id FROM sel) GROUP BY u.model ORDER BY u.model""")
    summary = _rows(con, """
        SELECT count(*) AS transcripts, count_if(is_subagent) AS subagents, sum(turns) AS turns,
               sum(tool_calls) AS tool_calls, sum(tool_errors) AS tool_errors, sum(compactions) AS compactions,
               sum(wall_s) AS wall_s
        FROM sessions WHERE stream_id IN (SELECT stream_id FROM sel)""")[0]
    return Section("claude_sessions", "Claude Code sessions: tokens, tool calls and errors per model",
                   ["model", "sessions", "api_messages", "input_tokens", "output_tokens", "cache_read_tokens",
                    "cache_creation_tokens", "tool_calls", "tool_errors"], rows,
                   {k: v for k, v in summary.items()},
                   "tokens are counted once per API message (its lines share message.id); a tool error is a "
                   "tool_result with is_error; views: sessions, tool_calls, token_usage.")


def claude_runs(con: duckdb.DuckDBPyConnection) -> Section:
    columns = ["stream_id", "sessions", "transcripts", "subagents", "input_tokens", "output_tokens",
               "cache_read_tokens", "cache_creation_tokens", "turns", "tool_calls", "tool_errors", "compactions",
               "wall_s", "subagent_wall_s"]
    rows = _rows(con, f"""SELECT {", ".join(columns)} FROM run_claude
                         WHERE stream_id IN (SELECT stream_id FROM sel) ORDER BY stream_id""")
    summary = _rows(con, """
        SELECT count(*) AS runs_with_sessions, sum(sessions) AS sessions, sum(input_tokens) AS input_tokens,
               sum(output_tokens) AS output_tokens, sum(cache_read_tokens) AS cache_read_tokens,
               sum(cache_creation_tokens) AS cache_creation_tokens, sum(turns) AS turns,
               sum(tool_calls) AS tool_calls, sum(tool_errors) AS tool_errors, sum(subagents) AS subagents,
               sum(compactions) AS compactions, sum(wall_s) AS wall_s
        FROM run_claude WHERE stream_id IN (SELECT stream_id FROM sel)""")[0]
    return Section("claude_runs", "Claude Code sessions per orchestrator run (summed over its linked sessions)",
                   columns, rows, summary,
                   "a run's sessions are those that wrote its state versions (hook, content match or path+time; "
                   "`evstore log RUN`); sums include their subagent transcripts; wall_s: the main transcripts, "
                   "subagent_wall_s: the subagents'; view: run_claude.")


CROSS_RUN: list[Callable[[duckdb.DuckDBPyConnection], Section]] = [
    reviewer_acceptance, review_deltas, iterations_until_approval, gates, breaker_trips, phase_durations,
    question_latency, friday_cycles, envelope_turns, taskflow_verdicts, claude_sessions, claude_runs,
]


def cross_run_report(con: duckdb.DuckDBPyConnection, scope: Scope | None = None) -> Report:
    """Every cross-run metric for the runs in ``scope``."""
    scope = scope or Scope()
    _select(con, scope)
    runs = _rows(con, "SELECT count(*) AS runs FROM sel")[0]["runs"]
    report = Report("evstore metrics", {**scope.to_dict(), "runs": runs}, [m(con) for m in CROSS_RUN])
    return report


def check_scope(con: duckdb.DuckDBPyConnection, scope: Scope) -> None:
    """Raise if no run is in ``scope``, naming the filter that matches nothing and the values that
    exist: a typo must not read as a portfolio of 0 runs (``evstore metrics``)."""
    if scope.project is None and scope.dialect is None and scope.since is None:
        return
    _select(con, scope)
    if _rows(con, "SELECT count(*) AS runs FROM sel")[0]["runs"]:
        return
    for option, column, value in (("--dialect", "dialect", scope.dialect), ("--project", "project", scope.project)):
        if value is None:
            continue
        have = [r[0] for r in con.execute(f"SELECT DISTINCT {column} FROM runs WHERE {column} IS NOT NULL "
                                          "ORDER BY 1").fetchall()]
        if value not in have:
            listed = ", ".join(have[:20]) + (f", … ({len(have)} in all)" if len(have) > 20 else "")
            raise EvstoreError(f'No run has {option} "{value}"; '
                               + (f"the {column}s are: {listed}." if have else f"no run records a {column}."))
    given = " ".join(f"{o} {v}" for o, v in (("--project", scope.project), ("--dialect", scope.dialect),
                                             ("--since", scope.since)) if v is not None)
    latest = con.execute("SELECT max(last_event_at) FROM runs").fetchone()
    if scope.since is not None and latest and latest[0] is not None:
        raise EvstoreError(f"No run matches {given}; the latest activity is at {latest[0].isoformat()}.")
    raise EvstoreError(f"No run matches {given}: each value exists, but no run has them all.")


# ---------------------------------------------------------------- one run


def run_report(con: duckdb.DuckDBPyConnection, stream_id: str) -> Report:
    """Timeline, phases, iterations, deltas, gates and trips of one run (stream)."""
    scope = Scope(stream_id=stream_id)
    _select(con, scope)
    sid = "(SELECT stream_id FROM sel)"  # exactly this run; its id stays a bound parameter
    run = _rows(con, f"SELECT * FROM runs WHERE stream_id IN {sid}")
    if not run:
        raise EvstoreError(f'No run "{stream_id}" in the analytics tables; `evstore runs` lists the runs.')
    timeline = _rows(con, f"""SELECT version, type, coalesce(occurred_at, recorded_at) AS at FROM events
                             WHERE stream_id IN {sid} ORDER BY position""")
    iterations = _rows(con, f"""
        SELECT iteration, decision, has_map, reviewers, raised, distinct_findings, accepted, blocking, important,
               suggestion, approved FROM review_iterations WHERE stream_id IN {sid} ORDER BY idx""")
    deltas = _rows(con, f"""
        SELECT iteration, new, still_present, resolved, downgraded, still_present_blocking, resolution_rate,
               plateau, max_recurrence FROM review_deltas WHERE stream_id IN {sid} ORDER BY iteration""")
    gate_rows = _rows(con, f"""SELECT attempt, gate, verdict, verdict_at FROM gates WHERE stream_id IN {sid}
                              ORDER BY position""")
    trips = _rows(con, f"""SELECT trigger, detail, phase, step, iteration, tripped_at, counters FROM breaker_trips
                          WHERE stream_id IN {sid} ORDER BY position""")
    phases = _rows(con, f"""SELECT phase, status, model, started_at, finished_at, duration_s, retries, failures
                           FROM phases WHERE stream_id IN {sid} ORDER BY started_at, phase""")
    questions = _rows(con, f"""SELECT question_id, step_id, asked_at, answered_at, latency_s FROM questions
                              WHERE stream_id IN {sid} ORDER BY position""")
    sections = [
        Section("timeline", "Timeline", ["version", "type", "at"], timeline),
        Section("phases", "Phases", ["phase", "status", "model", "started_at", "finished_at", "duration_s", "retries",
                                     "failures"], phases),
        Section("review_iterations", "Review iterations",
                ["iteration", "decision", "has_map", "reviewers", "raised", "distinct_findings", "accepted",
                 "blocking", "important", "suggestion", "approved"], iterations),
        Section("review_deltas", "Review deltas", ["iteration", "new", "still_present", "resolved", "downgraded",
                                                   "still_present_blocking", "resolution_rate", "plateau",
                                                   "max_recurrence"], deltas),
        reviewer_acceptance(con),
        Section("gates", "Gate verdicts", ["attempt", "gate", "verdict", "verdict_at"], gate_rows),
        Section("breaker_trips", "Circuit-breaker trips", ["trigger", "detail", "phase", "step", "iteration",
                                                           "tripped_at", "counters"], trips),
        Section("questions", "Questions", ["question_id", "step_id", "asked_at", "answered_at", "latency_s"],
                questions),
        claude_runs(con),
    ]
    return Report(f"evstore metrics {stream_id}", {"stream": stream_id, **run[0]}, sections)


__all__ = ["CROSS_RUN", "Report", "Scope", "Section", "check_scope", "cross_run_report", "run_report", "wilson"]
