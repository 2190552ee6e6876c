"""task-master analytics, declared as data (see :mod:`eventstore.dialects.analytics`).

Facts (stateless: one event, its rows): ``taskmaster_tasks`` (a task listed by a whole snapshot or a
tag created, added, removed, or its status changed), ``taskmaster_subtasks`` (the same for
subtasks), ``taskmaster_documents`` (a whole document or tag restated or removed: the tasks it
does not list are gone) and ``taskmaster_changes`` (planning edits: a priority changed, a
dependency added or removed, a task's or subtask's field updated or removed, one row each; and
state.json's current tag switched).  Tasks and subtasks are named by their tag (the legacy format counts as
tag ``master``, where task-master's own migration puts it) and their id as text.

Views: ``taskmaster_task_history`` (each task's status after every event that touched it, with
when the next one came), ``taskmaster_task_stats`` (per task: current status, cycle time,
reopenings, blocked time, subtasks), ``taskmaster_run_changes`` (per run: its planning changes, which
the ``taskmaster_changes`` section sums, so that a report after new events recounts only the runs they
touched) and the sections' SQL over them.  The project is the run's
``project`` (legacy ``metadata.projectName``), else its stream id.

Definitions (docs/metrics.md, "task-master"):

* cycle time: from the task's first ``in-progress`` to its first ``done`` after that;
* a reopening: a status change from ``done`` to another status (removal is not one);
* blocked time: time spent in ``blocked``, up to the run's last event if it is blocked still;
* subtask completion: subtasks ``done`` / subtasks, of the tasks present now;
* throughput: status changes to ``done`` per UTC day (a task done, reopened and done again counts twice);
* tasks by status over time: each task's status at the end of each UTC day of the run's activity;
* planning changes: priority changes, dependencies added and removed, task updates (events, not
  fields) and tag switches, per project (a state.json stream is a project of its own: its path).

Changes no typed event states (a tag whose task ids are not unique, a switch between the formats)
are exact patches and give no task facts.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from eventstore.dialects import analytics as an
from eventstore.dialects.analytics import Analytics, Chart, MetricSection, RowFunctions, Rows, Table
from eventstore.dialects.taskmaster.lens import is_legacy, task_lists
from eventstore.store import RecordedEvent

_ROWS = RowFunctions()
_on = _ROWS.on


def _id(value: Any) -> str | None:
    return None if value is None or isinstance(value, (dict, list, bool)) else str(value)


def _tag(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _task(rows: Rows, e: RecordedEvent, tag: str | None, task: Any, kind: str, at: datetime | None) -> None:
    t = an.d(task)
    task_id = _id(t.get("id"))
    rows["taskmaster_tasks"].append((e.position, e.stream_id, tag, task_id, kind, None, an.s(t.get("status")), at))
    for sub in an.items(t.get("subtasks")):
        st = an.d(sub)
        rows["taskmaster_subtasks"].append((e.position, e.stream_id, tag, task_id, _id(st.get("id")), kind, None,
                                            an.s(st.get("status")), at))


def _document(rows: Rows, e: RecordedEvent, kind: str, tag: str | None, at: datetime | None) -> None:
    rows["taskmaster_documents"].append((e.position, e.stream_id, kind, tag, at))


@_on("document.observed")
def _observed(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    doc = p.get("doc")
    _document(rows, e, "observed", None, at)
    for tag, tasks in task_lists(doc).items():
        for task in tasks:
            _task(rows, e, tag, task, "listed", at)
    if is_legacy(doc):
        an.attr(rows, e, "project", an.d(an.d(doc).get("metadata")).get("projectName"))


@_on("document.removed")
def _removed(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _document(rows, e, "removed", None, at)


@_on("taskmaster.tag_created")
def _tag_created(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    tag = _tag(p.get("tag"))
    _document(rows, e, "tag_created", tag, at)
    for task in an.items(an.d(p.get("value")).get("tasks")):
        _task(rows, e, tag, task, "listed", at)


@_on("taskmaster.tag_removed")
def _tag_removed(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _document(rows, e, "tag_removed", _tag(p.get("tag")), at)


@_on("taskmaster.task_added")
def _task_added(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _task(rows, e, _tag(p.get("tag")), p.get("task"), "added", at)


@_on("taskmaster.task_removed")
def _task_removed(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    rows["taskmaster_tasks"].append((e.position, e.stream_id, _tag(p.get("tag")), _id(p.get("id")), "removed",
                                     None, None, at))


@_on("taskmaster.status_changed")
def _status(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    rows["taskmaster_tasks"].append((e.position, e.stream_id, _tag(p.get("tag")), _id(p.get("id")), "status",
                                     an.s(p.get("from_status")), an.s(p.get("to_status")), at))


@_on("taskmaster.subtask_added")
def _subtask_added(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    sub = an.d(p.get("subtask"))
    rows["taskmaster_subtasks"].append((e.position, e.stream_id, _tag(p.get("tag")), _id(p.get("task_id")),
                                        _id(sub.get("id")), "added", None, an.s(sub.get("status")), at))


@_on("taskmaster.subtask_removed")
def _subtask_removed(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    rows["taskmaster_subtasks"].append((e.position, e.stream_id, _tag(p.get("tag")), _id(p.get("task_id")),
                                        _id(p.get("id")), "removed", None, None, at))


@_on("taskmaster.subtask_status_changed")
def _subtask_status(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    rows["taskmaster_subtasks"].append((e.position, e.stream_id, _tag(p.get("tag")), _id(p.get("task_id")),
                                        _id(p.get("subtask_id")), "status", an.s(p.get("from_status")),
                                        an.s(p.get("to_status")), at))


def _change(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None, kind: str, *,
            field: str | None = None, from_value: Any = None, to_value: Any = None) -> None:
    task_id = _id(p.get("id", p.get("task_id")))
    rows["taskmaster_changes"].append((e.position, e.stream_id, kind, _tag(p.get("tag")), task_id,
                                       _id(p.get("subtask_id")), field, _id(from_value), _id(to_value), at))


@_on("taskmaster.priority_changed")
def _priority(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    _change(rows, e, p, at, "priority", field="priority", from_value=p.get("from_priority"),
            to_value=p.get("to_priority"))


@_on("taskmaster.dependencies_added")
def _dependencies_added(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    for dep in an.items(p.get("dependencies")):
        _change(rows, e, p, at, "dependency_added", field="dependencies", to_value=dep)


@_on("taskmaster.dependencies_removed")
def _dependencies_removed(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    for dep in an.items(p.get("dependencies")):
        _change(rows, e, p, at, "dependency_removed", field="dependencies", from_value=dep)


@_on("taskmaster.task_updated", "taskmaster.subtask_updated")
def _updated(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    kind = "subtask_" if "subtask_id" in p else ""
    for name in an.d(p.get("fields")):
        _change(rows, e, p, at, f"{kind}field_updated", field=name)
    for name in an.items(p.get("removed")):
        _change(rows, e, p, at, f"{kind}field_removed", field=_id(name))


@_on("taskmaster.tag_switched")
def _tag_switched(rows: Rows, e: RecordedEvent, p: dict[str, Any], at: datetime | None) -> None:
    rows["taskmaster_changes"].append((e.position, e.stream_id, "tag_switched", _tag(p.get("to_tag")), None, None,
                                       "currentTag", _id(p.get("from_tag")), _id(p.get("to_tag")), at))


_T = "TIMESTAMPTZ"
TABLES = (
    Table("taskmaster_tasks", (("tag", "VARCHAR"), ("task_id", "VARCHAR"), ("kind", "VARCHAR"),
                               ("from_status", "VARCHAR"), ("status", "VARCHAR"), ("occurred_at", _T))),
    Table("taskmaster_subtasks", (("tag", "VARCHAR"), ("task_id", "VARCHAR"), ("subtask_id", "VARCHAR"),
                                  ("kind", "VARCHAR"), ("from_status", "VARCHAR"), ("status", "VARCHAR"),
                                  ("occurred_at", _T))),
    Table("taskmaster_documents", (("kind", "VARCHAR"), ("tag", "VARCHAR"), ("occurred_at", _T))),
    Table("taskmaster_changes", (("kind", "VARCHAR"), ("tag", "VARCHAR"), ("task_id", "VARCHAR"),
                                 ("subtask_id", "VARCHAR"), ("field", "VARCHAR"), ("from_value", "VARCHAR"),
                                 ("to_value", "VARCHAR"), ("occurred_at", _T))),
)

VIEWS = {
    # A task's status after each event touching it (NULL: gone), from when until the next one.  A
    # document or tag restated whole drops the tasks it no longer lists ("dropped").
    "taskmaster_task_history": """
        WITH t AS (
            SELECT t.stream_id, t.position, t.tag, t.task_id, t.kind, t.status,
                   coalesce(t.occurred_at, e.recorded_at) AS at
            FROM taskmaster_tasks t JOIN events e USING (stream_id, position)),
        resets AS (
            SELECT d.stream_id, d.position, d.kind, d.tag, coalesce(d.occurred_at, e.recorded_at) AS at
            FROM taskmaster_documents d JOIN events e USING (stream_id, position)),
        known AS (SELECT stream_id, tag, task_id, min(position) AS first_position FROM t GROUP BY ALL),
        dropped AS (
            SELECT r.stream_id, r.position, k.tag, k.task_id, 'dropped' AS kind, NULL::VARCHAR AS status, r.at
            FROM resets r JOIN known k ON k.stream_id = r.stream_id AND k.first_position < r.position
                 AND (r.kind IN ('observed', 'removed') OR r.tag IS NOT DISTINCT FROM k.tag)
            WHERE NOT EXISTS (SELECT 1 FROM t WHERE t.stream_id = r.stream_id AND t.position = r.position
                              AND t.tag IS NOT DISTINCT FROM k.tag AND t.task_id IS NOT DISTINCT FROM k.task_id)),
        h AS (SELECT * FROM t UNION ALL BY NAME SELECT * FROM dropped)
        SELECT h.stream_id, coalesce(r.project, h.stream_id) AS project, coalesce(h.tag, 'master') AS tag,
               h.task_id, h.position, h.kind, lag(h.status) OVER w AS from_status, h.status, h.at,
               timezone('UTC', h.at) AS at_utc, coalesce(lead(h.at) OVER w, r.last_event_at) AS until
        FROM h LEFT JOIN runs r USING (stream_id)
        WINDOW w AS (PARTITION BY h.stream_id, h.tag, h.task_id ORDER BY h.position)""",
    # Per task (removed ones too: status NULL): cycle time, reopenings, blocked time, and the subtasks
    # it has now (those restated with the task, or added since, and not removed).
    # Per stream, day and status: its tasks whose last status at the end of the day (UTC) is that one, for
    # every day from the run's first to its last (the status-over-time section adds these up over the runs
    # in scope; kept per run, the range join of days and history is not evaluated again for every report).
    "taskmaster_status_days": """
        WITH span AS (SELECT stream_id, min(at_utc)::DATE AS first_day, max(at_utc)::DATE AS last_day
                      FROM taskmaster_task_history GROUP BY stream_id),
        days AS (SELECT stream_id, unnest(generate_series(first_day, last_day, INTERVAL 1 DAY))::DATE AS day
                 FROM span),
        at_end AS (
            SELECT d.stream_id, d.day, h.project, h.tag, h.task_id, arg_max_null(h.status, h.position) AS status
            FROM days d JOIN taskmaster_task_history h ON h.stream_id = d.stream_id
                 AND h.at_utc < d.day + INTERVAL 1 DAY
            GROUP BY ALL)
        SELECT stream_id, project, tag, day, status, count(*) AS tasks FROM at_end WHERE status IS NOT NULL
        GROUP BY ALL""",
    "taskmaster_task_stats": """
        WITH h AS (SELECT * FROM taskmaster_task_history),
        started AS (SELECT stream_id, tag, task_id, min(position) FILTER (WHERE status = 'in-progress') AS ip
                    FROM h GROUP BY ALL),
        per AS (
            SELECT h.stream_id, any_value(h.project) AS project, h.tag, h.task_id,
                   arg_max_null(h.status, h.position) AS status,
                   min(h.at) FILTER (WHERE h.position = s.ip) AS started_at,
                   min(h.at) FILTER (WHERE h.status = 'done' AND h.position > s.ip) AS done_at,
                   count(*) FILTER (WHERE h.from_status = 'done' AND h.status IS NOT NULL
                                    AND h.status <> 'done') AS reopenings,
                   coalesce(sum(epoch(h.until) - epoch(h.at)) FILTER (WHERE h.status = 'blocked'), 0) AS blocked_s,
                   max(h.position) FILTER (WHERE h.kind IN ('listed', 'added')) AS restated
            FROM h JOIN started s ON s.stream_id = h.stream_id AND s.tag = h.tag
                 AND s.task_id IS NOT DISTINCT FROM h.task_id
            GROUP BY h.stream_id, h.tag, h.task_id),
        sub AS (
            SELECT stream_id, coalesce(tag, 'master') AS tag, task_id, subtask_id, arg_max(kind, position) AS kind,
                   arg_max_null(status, position) AS status, max(position) AS position
            FROM taskmaster_subtasks GROUP BY ALL),
        subs AS (
            SELECT p.stream_id, p.tag, p.task_id, count(*) AS subtasks,
                   count(*) FILTER (WHERE s.status = 'done') AS subtasks_done
            FROM per p JOIN sub s ON s.stream_id = p.stream_id AND s.tag = p.tag
                 AND s.task_id IS NOT DISTINCT FROM p.task_id AND s.position >= p.restated AND s.kind <> 'removed'
            WHERE p.status IS NOT NULL GROUP BY ALL)
        SELECT p.stream_id, p.project, p.tag, p.task_id, p.status, p.started_at, p.done_at,
               epoch(p.done_at) - epoch(p.started_at) AS cycle_s, p.reopenings, p.blocked_s,
               coalesce(s.subtasks, 0) AS subtasks, coalesce(s.subtasks_done, 0) AS subtasks_done
        FROM per p LEFT JOIN subs s ON s.stream_id = p.stream_id AND s.tag = p.tag
             AND s.task_id IS NOT DISTINCT FROM p.task_id""",
    # Per stream: its planning changes, counted as the ``taskmaster_changes`` section counts them (an update
    # is an event: its position, counted once however many fields it changed; a position is one stream's).
    "taskmaster_run_changes": """
        SELECT stream_id, count(*) FILTER (WHERE kind = 'priority') AS priority_changes,
               count(*) FILTER (WHERE kind = 'dependency_added') AS dependencies_added,
               count(*) FILTER (WHERE kind = 'dependency_removed') AS dependencies_removed,
               count(DISTINCT position) FILTER (WHERE kind IN ('field_updated', 'field_removed')) AS task_updates,
               count(DISTINCT position) FILTER (WHERE kind LIKE 'subtask_field_%') AS subtask_updates,
               count(*) FILTER (WHERE kind = 'tag_switched') AS tag_switches
        FROM taskmaster_changes GROUP BY stream_id""",
}

_IN = "stream_id IN (SELECT stream_id FROM sel)"

TASKS = MetricSection(
    "taskmaster_tasks", "task-master: tasks, cycle time, reopenings, blocked time, subtasks (per project and tag)",
    ("project", "tag", "tasks", "pending", "in_progress", "review", "blocked", "done", "deferred_or_cancelled",
     "cycles", "cycle_p50_s", "cycle_p90_s", "cycle_max_s", "reopenings", "blocked_s", "subtasks", "subtasks_done",
     "subtask_completion"),
    f"""SELECT project, tag, count(status) AS tasks, count(*) FILTER (WHERE status = 'pending') AS pending,
               count(*) FILTER (WHERE status = 'in-progress') AS in_progress,
               count(*) FILTER (WHERE status = 'review') AS review,
               count(*) FILTER (WHERE status = 'blocked') AS blocked, count(*) FILTER (WHERE status = 'done') AS done,
               count(*) FILTER (WHERE status IN ('deferred', 'cancelled')) AS deferred_or_cancelled,
               count(cycle_s) AS cycles, quantile_cont(cycle_s, 0.5) AS cycle_p50_s,
               quantile_cont(cycle_s, 0.9) AS cycle_p90_s, max(cycle_s) AS cycle_max_s,
               sum(reopenings) AS reopenings, sum(blocked_s) AS blocked_s,
               sum(subtasks) AS subtasks, sum(subtasks_done) AS subtasks_done,
               CASE WHEN sum(subtasks) > 0 THEN sum(subtasks_done) / sum(subtasks) END AS subtask_completion
        FROM taskmaster_task_stats WHERE {_IN} GROUP BY project, tag ORDER BY project, tag""",
    f"""SELECT count(DISTINCT stream_id) AS projects, count(status) AS tasks,
               count(*) FILTER (WHERE status = 'done') AS done,
               count(cycle_s) AS cycles, quantile_cont(cycle_s, 0.5) AS cycle_p50_s,
               coalesce(sum(reopenings), 0) AS reopenings, coalesce(sum(blocked_s), 0) AS blocked_s,
               CASE WHEN sum(subtasks) > 0 THEN sum(subtasks_done) / sum(subtasks) END AS subtask_completion
        FROM taskmaster_task_stats WHERE {_IN}""",
    "tasks = present now (removed tasks still count for cycle time, reopenings and blocked time); cycle time = "
    "first in-progress to the first done after it; a reopening = done -> another status; blocked time runs to "
    "the run's last event while blocked; subtask completion = done / subtasks of the tasks present; "
    "views: taskmaster_task_stats, taskmaster_task_history.", per_run=True)

THROUGHPUT = MetricSection(
    "taskmaster_throughput", "task-master: tasks completed and reopened per day (UTC)",
    ("project", "tag", "day", "completed", "reopened"),
    f"""SELECT project, tag, at_utc::DATE AS day, count(*) FILTER (WHERE status = 'done') AS completed,
               count(*) FILTER (WHERE from_status = 'done' AND status IS NOT NULL AND status <> 'done') AS reopened
        FROM taskmaster_task_history WHERE kind = 'status' AND {_IN}
        GROUP BY ALL HAVING completed > 0 OR reopened > 0 ORDER BY project, tag, day""",
    f"""SELECT count(*) FILTER (WHERE status = 'done') AS completed,
               count(DISTINCT at_utc::DATE) FILTER (WHERE status = 'done') AS days_with_completions
        FROM taskmaster_task_history WHERE kind = 'status' AND {_IN}""",
    "completed = status changes to done that day (a task done again after a reopening counts again).",
    chart=Chart("bars", "task-master: tasks completed per day", "{day} {project} {tag}", ("completed",),
                integer=True), per_run=True)

STATUS_OVER_TIME = MetricSection(
    "taskmaster_status_over_time", "task-master: tasks by status at the end of each day (UTC)",
    ("project", "tag", "day", "status", "tasks"),
    f"""SELECT project, tag, day, status, sum(tasks)::BIGINT AS tasks FROM taskmaster_status_days WHERE {_IN}
        GROUP BY ALL ORDER BY project, tag, day, status""",
    None,
    "each task's last status at or before the end of the day, for every day from the run's first to its last.",
    per_run=True)

CHANGES = MetricSection(
    "taskmaster_changes", "task-master: planning changes (per project)",
    ("project", "priority_changes", "dependencies_added", "dependencies_removed", "task_updates",
     "subtask_updates", "tag_switches"),
    f"""SELECT coalesce(r.project, c.stream_id) AS project, sum(c.priority_changes)::BIGINT AS priority_changes,
               sum(c.dependencies_added)::BIGINT AS dependencies_added,
               sum(c.dependencies_removed)::BIGINT AS dependencies_removed,
               sum(c.task_updates)::BIGINT AS task_updates, sum(c.subtask_updates)::BIGINT AS subtask_updates,
               sum(c.tag_switches)::BIGINT AS tag_switches
        FROM taskmaster_run_changes c LEFT JOIN runs r USING (stream_id)
        WHERE c.{_IN} GROUP BY ALL ORDER BY project""",
    f"""SELECT coalesce(sum(priority_changes), 0)::BIGINT AS priority_changes,
               coalesce(sum(dependencies_added + dependencies_removed), 0)::BIGINT AS dependency_edits,
               coalesce(sum(task_updates), 0)::BIGINT AS task_updates,
               coalesce(sum(tag_switches), 0)::BIGINT AS tag_switches
        FROM taskmaster_run_changes WHERE {_IN}""",
    "one priority change, dependency added or removed, or tag switch is one event's row; task and subtask "
    "updates count events (one may change several fields); a state.json stream is a project of its own "
    "(its path).", per_run=True)

PER_TASK = MetricSection(
    "taskmaster_task_stats", "task-master: tasks",
    ("tag", "task_id", "status", "cycle_s", "reopenings", "blocked_s", "subtasks", "subtasks_done"),
    f"""SELECT tag, task_id, status, cycle_s, reopenings, blocked_s, subtasks, subtasks_done
        FROM taskmaster_task_stats WHERE {_IN}
        ORDER BY tag, TRY_CAST(task_id AS BIGINT) NULLS LAST, task_id""")

ANALYTICS = Analytics(version=2, tables=TABLES, rows=_ROWS, views=VIEWS,
                      run_views=("taskmaster_task_history", "taskmaster_status_days", "taskmaster_task_stats",
                                 "taskmaster_run_changes"),
                      sections=(TASKS, THROUGHPUT, STATUS_OVER_TIME, CHANGES),
                      run_sections=(PER_TASK, TASKS, THROUGHPUT, STATUS_OVER_TIME, CHANGES))
