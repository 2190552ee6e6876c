"""Taskflow analytics: verdicts and follow-up tasks as one fact table, its views and metric section
(declared as data: see :mod:`eventstore.dialects.analytics`).  Phases entered go to the shared
``phase_events`` table and this dialect's part of the ``phases`` view."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from eventstore.dialects import analytics as an
from eventstore.dialects.analytics import Analytics, MetricSection, RowFunctions, Rows, Table
from eventstore.store import RecordedEvent

_attr, _s = an.attr, an.s
_ROWS = RowFunctions()
_on = _ROWS.on


def _tf(rows: Rows, e: RecordedEvent, kind: str, at: datetime | None, *, verdict: Any = None, parsed_by: Any = None,
        follow_kind: Any = None, task: Any = None, parent: Any = None) -> None:
    rows["taskflow_events"].append((e.position, e.stream_id, kind, _s(verdict), _s(parsed_by), _s(follow_kind),
                                    _s(task), _s(parent), at))


@_on("taskflow.task_created")
def _t_created(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _attr(rows, e, "task_id", p.get("task"))
    _tf(rows, e, "created", at, follow_kind=p.get("kind"), task=p.get("task"), parent=p.get("parent"))


@_on("taskflow.task_status_changed")
def _t_status(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _attr(rows, e, "status", p.get("status"))


@_on("taskflow.phase_entered")
def _t_phase(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    rows["phase_events"].append((e.position, e.stream_id, "taskflow", _s(p.get("phase")), "entered", None, None,
                                 None, None, at, None, at))


@_on("taskflow.verdict_issued")
def _t_verdict(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _tf(rows, e, "verdict", at, verdict=p.get("verdict"), parsed_by=p.get("parsed_by"))


@_on("taskflow.verdict_unparseable")
def _t_unparseable(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _tf(rows, e, "unparseable", at, verdict="UNPARSEABLE")


@_on("taskflow.follow_up_task_spawned")
def _t_follow(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _tf(rows, e, "follow_up", at, follow_kind=p.get("kind"), task=p.get("task"), parent=p.get("parent"))


@_on("taskflow.autopilot_paused")
def _t_paused(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _tf(rows, e, "paused", at, verdict=p.get("verdict"))



TABLES = (
    Table("taskflow_events", (("kind", "VARCHAR"), ("verdict", "VARCHAR"), ("parsed_by", "VARCHAR"),
                              ("follow_kind", "VARCHAR"), ("task", "VARCHAR"), ("parent", "VARCHAR"),
                              ("occurred_at", "TIMESTAMPTZ"))),
)

VIEWS = {
    "taskflow_verdicts": """
        SELECT stream_id, position, verdict, parsed_by, occurred_at FROM taskflow_events
        WHERE kind IN ('verdict', 'unparseable')""",
    "taskflow_follow_ups": """
        SELECT stream_id, position, follow_kind AS kind, task, parent, occurred_at FROM taskflow_events
        WHERE kind = 'follow_up'""",
}

# This dialect's rows of the shared ``phases`` view: a phase lasts until the next one is entered.
PHASES = """
        SELECT stream_id, dialect, phase, occurred_at AS started_at, next_at AS finished_at,
               CASE WHEN next_at IS NULL THEN 'in_progress' ELSE 'done' END AS status, NULL AS model, 0 AS retries,
               0 AS failures, false AS skipped, epoch(next_at) - epoch(occurred_at) AS duration_s
        FROM (SELECT *, lead(occurred_at) OVER (PARTITION BY stream_id ORDER BY position) AS next_at
              FROM phase_events WHERE dialect = 'taskflow')"""

_IN = "stream_id IN (SELECT stream_id FROM sel)"

SECTIONS = (
    MetricSection(
        "taskflow_verdicts", "Taskflow verdict mix and follow-up spawn rate", ("verdict", "verdicts"),
        f"""SELECT verdict, count(*) AS verdicts FROM taskflow_verdicts
            WHERE {_IN} GROUP BY ALL ORDER BY verdict""",
        f"""WITH v AS (SELECT count(*) AS n FROM taskflow_verdicts WHERE {_IN}),
            f AS (SELECT * FROM taskflow_follow_ups WHERE {_IN})
            SELECT (SELECT n FROM v) AS verdicts,
                   (SELECT count_if(kind = 'fix') FROM f) AS fix_spawned,
                   (SELECT count_if(kind = 'review') FROM f) AS review_spawned,
                   (SELECT count_if(kind = 'tiebreak') FROM f) AS tiebreak_spawned,
                   CASE WHEN (SELECT n FROM v) > 0 THEN (SELECT count_if(kind = 'fix') FROM f) / (SELECT n FROM v)
                        END AS fix_spawn_rate,
                   CASE WHEN (SELECT n FROM v) > 0 THEN (SELECT count(*) FROM f) / (SELECT n FROM v) END
                       AS follow_up_spawn_rate""",
        "spawn rate = follow-up tasks of the kind / verdicts (issued or unparseable).", per_run=True),
)

ANALYTICS = Analytics(version=1, tables=TABLES, rows=_ROWS, views=VIEWS, view_parts={"phases": PHASES},
                      run_views=("taskflow_verdicts", "taskflow_follow_ups"),
                      sections=SECTIONS)
