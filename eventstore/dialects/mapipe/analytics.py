"""mapipe analytics: review iterations, deltas, breaker trips and questions as fact tables, their
views and the review / breaker / question metric sections (declared as data: see
:mod:`eventstore.dialects.analytics`).  Phases and gate verdicts go to the shared ``phase_events``
and ``gate_events`` tables; a run's first snapshot, recorded whole, is read as its run_started."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from eventstore import codec
from eventstore.dialects import analytics as an
from eventstore.dialects.analytics import Analytics, Chart, MetricSection, RowFunctions, Rows, Table, wilson
from eventstore.store import RecordedEvent

_attr, _b, _d, _i, _l, _s, _ts = an.attr, an.b, an.d, an.i, an.items, an.s, an.ts
_ROWS = RowFunctions()
_on = _ROWS.on


def _fp(item: Any) -> str | None:
    """A finding's fingerprint: a string entry, or an object's ``fingerprint``."""
    return item if isinstance(item, str) else _s(_d(item).get("fingerprint"))



def _phase_row(rows: Rows, e: RecordedEvent, phase: str, kind: str, rec: dict[str, Any], at: datetime | None) -> None:
    rows["phase_events"].append((e.position, e.stream_id, "mapipe", phase, kind, _s(rec.get("status")),
                                 _s(rec.get("model")), _i(rec.get("retryCount")), _s(rec.get("subStep")),
                                 _ts(rec.get("startedAt")), _ts(rec.get("finishedAt")), at))


@_on("mapipe.run_started")
def _run_started(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    state = _d(p.get("state"))
    for key, attr in (("project", "project"), ("taskId", "task_id"), ("title", "title"), ("status", "status")):
        _attr(rows, e, attr, state.get(key))
    for phase, rec in _d(state.get("phases")).items():
        _phase_row(rows, e, phase, "started", _d(rec), at)


@_on("mapipe.run_status_changed")
def _run_status(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _attr(rows, e, "status", p.get("status"))


@_on("mapipe.phase_started", "mapipe.phase_updated", "mapipe.phase_completed", "mapipe.phase_skipped",
     "mapipe.phase_failed")
def _phase(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    kind = e.type.split("_", 1)[1] if "_" in e.type else e.type
    _phase_row(rows, e, str(p.get("phase")), kind, _d(p.get("record")), at)


def _iteration(rows: Rows, e: RecordedEvent, idx: int, it: dict[str, Any], at: datetime | None) -> None:
    raised_total = 0
    distinct: set[str] = set()
    for r_i, reviewer in enumerate(_l(it.get("reviewers"))):
        rv = _d(reviewer)
        model = _s(rv.get("model")) or "unknown"
        seen: set[str] = set()  # one row per reviewer x distinct fingerprint
        for finding in _l(rv.get("findings")):
            fp = _fp(finding)
            if fp is None or fp in seen:
                continue
            seen.add(fp)
            f = _d(finding)
            rows["review_raised"].append((e.position, e.stream_id, idx, r_i, model, fp, _s(f.get("severity")),
                                          _s(f.get("file"))))
        raised_total += len(seen)
        distinct |= seen
    accepted = {fp for fp in (_fp(a) for a in _l(it.get("accepted"))) if fp is not None}
    for fp in sorted(accepted):
        rows["review_accepted"].append((e.position, e.stream_id, idx, fp))
    rows["review_iteration_events"].append((
        e.position, e.stream_id, idx, _i(it.get("iteration")), _s(it.get("decision")),
        isinstance(it.get("anonymizationMap"), dict), len(_l(it.get("reviewers"))), raised_total, len(distinct),
        len(accepted), _i(it.get("blocking")), _i(it.get("important")), _i(it.get("suggestion")), at))
    if isinstance(it.get("delta"), dict):
        _delta(rows, e, idx, it["delta"], at)
    if isinstance(it.get("reviewDecision"), dict):
        _decision(rows, e, idx, it["reviewDecision"])


def _delta(rows: Rows, e: RecordedEvent, idx: int, d: dict[str, Any], at: datetime | None) -> None:
    kinds = ("new", "stillPresent", "resolved", "downgraded", "stillPresentBlocking")
    for kind in kinds:
        for item in _l(d.get(kind)):
            fp = _fp(item)
            if fp is not None:
                f = _d(item)
                rows["review_delta_items"].append((e.position, e.stream_id, idx, kind, fp, _s(f.get("severity")),
                                                   _s(f.get("file")), None))
    recurrence = _d(d.get("recurrence"))
    for fp, cycles in recurrence.items():
        rows["review_delta_items"].append((e.position, e.stream_id, idx, "recurrence", fp, None, None, _i(cycles)))
    counts = [len(_l(d.get(k))) for k in kinds]
    max_rec = max((c for c in (_i(v) for v in recurrence.values()) if c is not None), default=None)
    rows["review_delta_events"].append((e.position, e.stream_id, idx, _i(d.get("previousIteration")), *counts,
                                        _b(d.get("plateau")), _b(d.get("tripped")), max_rec, at))


def _decision(rows: Rows, e: RecordedEvent, idx: int, d: dict[str, Any]) -> None:
    rows["review_decision_events"].append((e.position, e.stream_id, idx, _s(d.get("verdict")), _b(d.get("approved"))))


@_on("mapipe.review_iteration_recorded", "mapipe.review_iteration_updated")
def _review_iteration(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    idx = _i(p.get("index"))
    if idx is not None:
        _iteration(rows, e, idx, _d(p.get("iteration")), at)


@_on("mapipe.review_delta_computed")
def _review_delta(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    idx = _i(p.get("index"))
    if idx is not None:
        _delta(rows, e, idx, _d(p.get("delta")), at)


@_on("mapipe.review_decision_recorded")
def _review_decision(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    idx = _i(p.get("index"))
    if idx is not None:
        _decision(rows, e, idx, _d(p.get("reviewDecision")))


@_on("mapipe.gate_verdict_recorded")
def _gate(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    entry = _d(p.get("entry")) if isinstance(p.get("entry"), dict) else p
    gate, verdict = _s(entry.get("gate")) or _s(p.get("gate")), _s(entry.get("verdict")) or _s(p.get("verdict"))
    rows["gate_events"].append((e.position, e.stream_id, "mapipe", gate, verdict, _ts(entry.get("at")),
                                _s(entry.get("sha")), at))


@_on("mapipe.circuit_breaker_tripped")
def _breaker(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    rec = _d(p.get("record")) if isinstance(p.get("record"), dict) else p
    cp = _d(rec.get("checkpoint"))
    phase = cp.get("phase")
    counters = rec.get("counters")
    rows["breaker_events"].append((
        e.position, e.stream_id, "tripped", _i(rec.get("trigger")), _s(rec.get("detail")),
        None if phase is None else str(phase), None if cp.get("step") is None else str(cp.get("step")),
        _i(cp.get("iteration")), _ts(rec.get("trippedAt")),
        None if counters is None else codec.encode(counters).decode(), at))


@_on("mapipe.circuit_breaker_reset")
def _breaker_reset(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    rows["breaker_events"].append((e.position, e.stream_id, "reset", None, None, None, None, None, None, None, at))


@_on("mapipe.question_asked")
def _asked(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    q = p.get("pendingQuestion")
    if isinstance(q, dict):
        rows["question_events"].append((e.position, e.stream_id, "asked", _s(q.get("id")), _s(q.get("stepId")),
                                        _ts(q.get("askedAt")) or at, at))


@_on("mapipe.question_answered")
def _answered(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    a = _d(p.get("lastAnswer"))
    rows["question_events"].append((e.position, e.stream_id, "answered", _s(a.get("questionId")),
                                    _s(a.get("stepId")), _ts(a.get("answeredAt")) or at, at))



@_on("document.observed")
def _first_snapshot(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    # A run's first snapshot is recorded whole when no domain event explains it: read it as the
    # RunStarted event would carry it.
    _run_started(rows, e, {"state": p.get("doc")}, at)


_T = "TIMESTAMPTZ"
TABLES = (
    Table("review_iteration_events", (
        ("idx", "BIGINT"), ("iteration", "BIGINT"), ("decision", "VARCHAR"), ("has_map", "BOOLEAN"),
        ("reviewers", "BIGINT"), ("raised", "BIGINT"), ("distinct_findings", "BIGINT"), ("accepted", "BIGINT"),
        ("blocking", "BIGINT"), ("important", "BIGINT"), ("suggestion", "BIGINT"), ("occurred_at", _T))),
    Table("review_raised", (("idx", "BIGINT"), ("reviewer", "BIGINT"), ("model", "VARCHAR"),
                            ("fingerprint", "VARCHAR"), ("severity", "VARCHAR"), ("file", "VARCHAR"))),
    Table("review_accepted", (("idx", "BIGINT"), ("fingerprint", "VARCHAR"))),
    Table("review_delta_events", (
        ("idx", "BIGINT"), ("previous_iteration", "BIGINT"), ("new", "BIGINT"), ("still_present", "BIGINT"),
        ("resolved", "BIGINT"), ("downgraded", "BIGINT"), ("still_present_blocking", "BIGINT"),
        ("plateau_recorded", "BOOLEAN"), ("tripped", "BOOLEAN"), ("max_recurrence", "BIGINT"),
        ("occurred_at", _T))),
    Table("review_delta_items", (("idx", "BIGINT"), ("kind", "VARCHAR"), ("fingerprint", "VARCHAR"),
                                 ("severity", "VARCHAR"), ("file", "VARCHAR"), ("recurrence", "BIGINT"))),
    Table("review_decision_events", (("idx", "BIGINT"), ("verdict", "VARCHAR"), ("approved", "BOOLEAN"))),
    Table("breaker_events", (
        ("kind", "VARCHAR"), ("trigger", "BIGINT"), ("detail", "VARCHAR"), ("phase", "VARCHAR"), ("step", "VARCHAR"),
        ("iteration", "BIGINT"), ("tripped_at", _T), ("counters", "VARCHAR"), ("occurred_at", _T))),
    Table("question_events", (("kind", "VARCHAR"), ("question_id", "VARCHAR"), ("step_id", "VARCHAR"),
                              ("event_at", _T), ("occurred_at", _T))),
)

# Each "latest state" view keeps the newest fact by position.
VIEWS = {
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
}

# This dialect's rows of the shared ``phases`` view: one per phase execution (its start time).
PHASES = """
        SELECT stream_id, dialect, phase, started_at, arg_max(finished_at, position) AS finished_at,
               arg_max(status, position) AS status, arg_max(model, position) AS model,
               coalesce(max(retry_count), 0) AS retries,
               count_if(kind = 'failed') AS failures, count_if(kind = 'skipped') > 0 AS skipped,
               CASE WHEN arg_max(status, position) = 'done'
                    THEN epoch(arg_max(finished_at, position)) - epoch(started_at) END AS duration_s
        FROM phase_events WHERE dialect = 'mapipe' AND started_at IS NOT NULL
        GROUP BY stream_id, dialect, phase, started_at"""

_IN = "stream_id IN (SELECT stream_id FROM sel)"


def _acceptance(rows: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    for r in rows:
        r["ratio"] = round(r["accepted"] / r["raised"], 4) if r["raised"] else None
        lo, hi = wilson(r["accepted"], r["raised"])
        r["ci_low"], r["ci_high"] = (None if lo is None else round(lo, 4)), (None if hi is None else round(hi, 4))
    for k, v in summary.items():
        summary[k] = int(v or 0)


REVIEWER_ACCEPTANCE = MetricSection(
    "reviewer_acceptance", "Reviewer acceptance per model (Wilson 95 %)",
    ("model", "raised", "accepted", "ratio", "ci_low", "ci_high"),
    f"""SELECT model, count(*) AS raised, count_if(accepted) AS accepted
        FROM review_findings WHERE has_map AND {_IN}
        GROUP BY model ORDER BY raised DESC, model""",
    f"""SELECT count_if(has_map) AS iterations_with_map, count_if(NOT has_map) AS unavailable
        FROM review_iterations WHERE {_IN}""",
    "raised = reviewer x distinct fingerprint in iterations with an anonymizationMap; "
    "iterations without one are counted as unavailable, not as zero.", _acceptance,
    Chart("bars", "Reviewer acceptance per model with Wilson 95% interval", "{model}", ("ratio",),
          interval=("ci_low", "ci_high"), max_value=1.0), per_run=True)

_PER_RUN = f"""
        SELECT stream_id, min(iteration) FILTER (WHERE decision = 'accept') AS approved_at
        FROM review_iterations WHERE {_IN} GROUP BY stream_id"""

SECTIONS = (
    REVIEWER_ACCEPTANCE,
    MetricSection(
        "review_deltas", "Review deltas per iteration (iteration >= 2)",
        ("iteration", "runs", "new", "still_present", "resolved", "downgraded", "still_present_blocking",
         "resolution_rate", "plateau_rate", "max_recurrence"),
        f"""SELECT iteration, count(*) AS runs, sum(new) AS new, sum(still_present) AS still_present,
               sum(resolved) AS resolved, sum(downgraded) AS downgraded,
               sum(still_present_blocking) AS still_present_blocking,
               CASE WHEN sum(resolved + still_present + downgraded) > 0
                    THEN sum(resolved) / sum(resolved + still_present + downgraded) END AS resolution_rate,
               avg(CASE WHEN plateau THEN 1.0 ELSE 0.0 END) AS plateau_rate,
               max(max_recurrence) AS max_recurrence
            FROM review_deltas WHERE {_IN}
            GROUP BY iteration ORDER BY iteration""",
        f"""SELECT count(*) AS survivors, avg(recurrence) AS mean_recurrence, max(recurrence) AS max_recurrence
            FROM review_recurrence WHERE {_IN}""",
        "resolution rate = resolved / (resolved + stillPresent + downgraded); plateau = still-present "
        "set equal to the previous delta's and non-empty.",
        chart=Chart("groups", "Findings resolved vs still present per iteration", "iter {iteration}",
                    ("resolved", "still_present", "new"), series=("resolved", "still present", "new")), per_run=True),
    MetricSection(
        "iterations_until_approval", "Review iterations until approval", ("iterations", "runs"),
        f"""SELECT approved_at AS iterations, count(*) AS runs FROM ({_PER_RUN})
            WHERE approved_at IS NOT NULL GROUP BY ALL ORDER BY 1""",
        f"""SELECT count(*) AS runs_reviewed, count(approved_at) AS approved,
               count(*) - count(approved_at) AS not_approved, avg(approved_at) AS mean,
               median(approved_at) AS median FROM ({_PER_RUN})""",
        "approval = the first iteration whose decision is \"accept\".", per_run=True),
    MetricSection(
        "breaker_trips", "Circuit-breaker trips per trigger",
        ("trigger", "trips", "runs", "where", "max_identical_cycles", "max_rework_cycles"),
        f"""SELECT trigger, count(*) AS trips, count(DISTINCT stream_id) AS runs,
               -- each place once, in (phase, step, iteration) order whatever order the facts' files hold
               array_to_string(list_transform(
                   list_sort(list_distinct(list({{'p': phase, 's': step, 'i': iteration}}))),
                   lambda x: concat_ws(' / ', 'phase ' || x.p, 'step ' || x.s, 'iteration ' || x.i::VARCHAR)),
                   '; ') AS "where",
               max(TRY_CAST(json_extract(counters, '$.identicalFindingCycles') AS BIGINT)) AS max_identical_cycles,
               max(TRY_CAST(json_extract(counters, '$.reworkCycles') AS BIGINT)) AS max_rework_cycles
            FROM breaker_trips WHERE {_IN}
            GROUP BY trigger ORDER BY trigger""",
        f"""SELECT count(*) AS trips, count(DISTINCT stream_id) AS runs_tripped,
               (SELECT count(*) FROM sel) AS runs FROM breaker_trips WHERE {_IN}""",
        chart=Chart("bars", "Circuit-breaker trips per trigger", "trigger {trigger}", ("trips",), integer=True)),
    MetricSection(
        "question_latency", "Question latency (asked -> answered)",
        ("question_id", "asked", "answered", "p50_s", "p90_s", "mean_s"),
        f"""SELECT question_id, count(*) AS asked, count(answered_at) AS answered,
               quantile_cont(latency_s, 0.5) AS p50_s, quantile_cont(latency_s, 0.9) AS p90_s,
               avg(latency_s) AS mean_s
            FROM questions WHERE {_IN} GROUP BY ALL ORDER BY question_id""",
        f"""SELECT count(*) AS asked, count(answered_at) AS answered,
               quantile_cont(latency_s, 0.5) AS p50_s, avg(latency_s) AS mean_s
            FROM questions WHERE {_IN}""", per_run=True),
)

RUN_SECTIONS = (
    MetricSection(
        "review_iterations", "Review iterations",
        ("iteration", "decision", "has_map", "reviewers", "raised", "distinct_findings", "accepted", "blocking",
         "important", "suggestion", "approved"),
        f"""SELECT iteration, decision, has_map, reviewers, raised, distinct_findings, accepted, blocking,
               important, suggestion, approved FROM review_iterations WHERE {_IN} ORDER BY idx"""),
    MetricSection(
        "review_deltas", "Review deltas",
        ("iteration", "new", "still_present", "resolved", "downgraded", "still_present_blocking", "resolution_rate",
         "plateau", "max_recurrence"),
        f"""SELECT iteration, new, still_present, resolved, downgraded, still_present_blocking, resolution_rate,
               plateau, max_recurrence FROM review_deltas WHERE {_IN} ORDER BY iteration"""),
    REVIEWER_ACCEPTANCE,
    MetricSection(
        "breaker_trips", "Circuit-breaker trips",
        ("trigger", "detail", "phase", "step", "iteration", "tripped_at", "counters"),
        f"""SELECT trigger, detail, phase, step, iteration, tripped_at, counters FROM breaker_trips
            WHERE {_IN} ORDER BY position"""),
    MetricSection(
        "questions", "Questions", ("question_id", "step_id", "asked_at", "answered_at", "latency_s"),
        f"""SELECT question_id, step_id, asked_at, answered_at, latency_s FROM questions
            WHERE {_IN} ORDER BY position"""),
)

ANALYTICS = Analytics(version=1, tables=TABLES, rows=_ROWS, views=VIEWS,
                      run_views=("review_iterations", "review_findings", "review_deltas", "review_recurrence",
                                 "questions", "breaker_trips"), view_parts={"phases": PHASES},
                      sections=SECTIONS, run_sections=RUN_SECTIONS)
