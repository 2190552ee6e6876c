"""FRIDAY analytics: specialist cycles and risk-score writes as fact tables, the ``friday_cycles`` and
``friday_risk_runs`` views (per run: its risk-score writes, summed by the section, so that a report after
new events recounts only the runs they touched) and their metric section (declared as data: see
:mod:`eventstore.dialects.analytics`).  A run's first snapshot, recorded whole, is read as its
state_initialised."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from eventstore import codec
from eventstore.dialects import analytics as an
from eventstore.dialects.analytics import Analytics, MetricSection, RowFunctions, Rows, Table
from eventstore.dialects.friday.validate import computed_risk_score
from eventstore.store import RecordedEvent

_attr, _d, _i, _s = an.attr, an.d, an.i, an.s
_ROWS = RowFunctions()
_on = _ROWS.on


def _friday(rows: Rows, e: RecordedEvent, kind: str, at: datetime | None, *, agent: Any = None,
            cycle_type: Any = None, item_id: Any = None) -> None:
    rows["friday_events"].append((e.position, e.stream_id, kind, _s(agent), _s(cycle_type), _s(item_id), at))


@_on("friday.state_initialised")
def _f_init(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    doc = _d(p.get("doc"))
    _attr(rows, e, "status", doc.get("status"))
    _attr(rows, e, "title", doc.get("request_summary"))
    _attr(rows, e, "project", _d(doc.get("context")).get("project"))
    metrics = doc.get("session_metrics")
    if isinstance(metrics, dict):  # the first write already carries metrics: no separate event
        _f_risk(rows, e, {"risk_score": metrics.get("risk_score"), "computed_risk_score": computed_risk_score(doc)},
                at)


@_on("friday.status_changed")
def _f_status(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _attr(rows, e, "status", p.get("status"))


@_on("friday.request_changed")
def _f_request(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _attr(rows, e, "title", p.get("request_summary"))


@_on("friday.context_changed")
def _f_context(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _attr(rows, e, "project", _d(p.get("context")).get("project"))


@_on("friday.cycle_opened")
def _f_open(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _friday(rows, e, "cycle_opened", at, agent=p.get("agent"), cycle_type=p.get("cycle_type"))


@_on("friday.report_received")
def _f_report(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _friday(rows, e, "report", at, agent=p.get("agent"))


@_on("friday.interaction_surfaced")
def _f_question(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    if isinstance(p.get("pending_interaction"), dict):
        _friday(rows, e, "question", at, item_id=p.get("item_id"))


@_on("friday.answer_captured")
def _f_answer(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _friday(rows, e, "answer", at, item_id=p.get("item_id"))


@_on("friday.cycle_closed")
def _f_close(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _friday(rows, e, "cycle_closed", at, agent=p.get("agent"), cycle_type=p.get("cycle_type"))


@_on("friday.session_metrics_recorded")
def _f_risk(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    computed = _i(p.get("computed_risk_score"))
    if computed is None:
        return
    recorded = p.get("risk_score")
    mismatch = not (_i(recorded) is not None and recorded == computed)
    rows["friday_risk"].append((e.position, e.stream_id, codec.encode(recorded).decode(), _i(recorded), computed,
                                mismatch, at))



@_on("document.observed")
def _first_snapshot(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    # A run's first snapshot is recorded whole when no domain event explains it: read it as the
    # StateInitialised event would carry it.
    _f_init(rows, e, {"doc": p.get("doc")}, at)


_T = "TIMESTAMPTZ"
TABLES = (
    Table("friday_events", (("kind", "VARCHAR"), ("agent", "VARCHAR"), ("cycle_type", "VARCHAR"),
                            ("item_id", "VARCHAR"), ("occurred_at", _T))),
    Table("friday_risk", (("recorded", "VARCHAR"), ("recorded_int", "BIGINT"), ("computed", "BIGINT"),
                          ("mismatch", "BOOLEAN"), ("occurred_at", _T))),
)

VIEWS = {
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
    # Per stream: its risk-score writes and those whose recorded score is not the computed one.
    "friday_risk_runs": """
        SELECT stream_id, count(*) AS writes, count_if(mismatch) AS mismatching_writes
        FROM friday_risk GROUP BY stream_id""",
}

_IN = "stream_id IN (SELECT stream_id FROM sel)"

SECTIONS = (
    MetricSection(
        "friday_cycles", "FRIDAY specialist cycles and risk-score mismatches",
        ("cycle_type", "cycles", "closed", "mean_rounds", "max_rounds", "questions", "answers"),
        f"""SELECT cycle_type, count(*) AS cycles, count_if(closed) AS closed, avg(rounds) AS mean_rounds,
               max(rounds) AS max_rounds, sum(questions) AS questions, sum(answers) AS answers
            FROM friday_cycles WHERE {_IN} GROUP BY ALL ORDER BY cycle_type""",
        # The runs' counts summed: a run with a mismatch is a row; mismatching_writes stays NULL when no write
        # is in scope, as count_if (a sum) over no row was.
        f"""SELECT coalesce(sum(writes), 0)::BIGINT AS metrics_writes,
               sum(mismatching_writes) AS mismatching_writes,
               count(*) FILTER (WHERE mismatching_writes > 0) AS runs_with_mismatch
            FROM friday_risk_runs WHERE {_IN}""",
        "rounds = 1 + reports received inside the cycle; a mismatch = recorded risk_score is not "
        "the integer the documented formula gives (history is never rewritten).", per_run=True),
)

ANALYTICS = Analytics(version=1, tables=TABLES, rows=_ROWS, views=VIEWS, sections=SECTIONS,
                      run_views=("friday_cycles", "friday_risk_runs"))
