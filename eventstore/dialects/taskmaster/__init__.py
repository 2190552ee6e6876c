"""The ``taskmaster`` dialect: claude-task-master's ``tasks.json``, version by version.

claude-task-master (repository eyaltoledano/claude-task-master) keeps a project's tasks in
``.taskmaster/tasks/tasks.json``, one object per tag, each ``{"tasks": [...], "metadata": {...}}``;
older projects have ``tasks/tasks.json`` with ``{"tasks": [...], "metadata": {...}}`` itself.  A
task has ``id``, ``title``, ``description``, ``status`` (pending, in-progress, review, done,
deferred, cancelled, blocked), ``priority``, ``dependencies`` (task ids), ``details``,
``testStrategy`` and ``subtasks`` (each with its own ``id`` and ``status``).

The dialect also reads the project's ``.taskmaster/state.json`` (``{"currentTag", "lastSwitched",
"branchTagMapping", "migrationNoticeShown"}``: the tag task-master works in).  Each file is a stream
of its own, named by its path (``streams_by_source``), so a repository's history is recorded with
one ingest per file::

    evstore ingest taskmaster --git .:.taskmaster/tasks/tasks.json
    evstore ingest taskmaster --git .:.taskmaster/state.json

Typed events record tags created and removed, tasks added and removed, status and priority
changes, dependencies added and removed, other task fields updated, subtasks added and removed,
subtask status changes and subtask fields updated, and (state.json) a switch of the current tag
(:mod:`eventstore.dialects.taskmaster.events`); everything else is an exact patch.  Analytics (tasks by status over time, cycle time, reopenings,
blocked time, subtask completion, throughput per day, per project and tag) are declared in
:mod:`eventstore.dialects.taskmaster.analytics`.  The dialect is
a plugin like every other: this folder and its line in the ``evstore.dialects`` entry points.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from eventstore.dialects.analytics import Analytics
from eventstore.dialects.base import Dialect, Finding, RunInfo, Snapshot
from eventstore.dialects.taskmaster import events as ev
from eventstore.dialects.taskmaster.lens import STATE_KEYS, apply_event, derive_events, is_legacy, is_state, task_lists
from eventstore.events import Event

STATUSES = ("pending", "in-progress", "review", "done", "deferred", "cancelled", "blocked")


def _where(tag: str | None) -> str:
    return "/tasks" if tag is None else "/" + tag.replace("~", "~0").replace("/", "~1") + "/tasks"


_JSON_NAMES = {str: "string", dict: "object", bool: "boolean"}


def _at(tag: str | None) -> str:
    return "" if tag is None else f" [{tag}]"


def _changed(fields: dict[str, Any], removed: list[str]) -> str:
    return ", ".join([*fields, *(f"-{k}" for k in removed)]) or "nothing"


class TaskmasterDialect(Dialect):
    name = "taskmaster"
    catalog = ev.CATALOG
    description = ("claude-task-master tasks.json (tagged .taskmaster/tasks/tasks.json or legacy tasks/tasks.json) "
                   "and .taskmaster/state.json")
    # No state_file_names: "tasks.json" is too common a name (Claude Code's own task lists use it) for
    # the capture hook to take every Write of one as task-master's.
    streams_by_source = True  # the document names no project: the file's name or repository path
    demo_weight = 2

    def analytics(self) -> Analytics:
        from eventstore.dialects.taskmaster.analytics import ANALYTICS

        return ANALYTICS

    def identity_problem(self, doc: Any, where: str) -> str | None:
        problem = super().identity_problem(doc, where)
        if problem or doc is None:
            return problem
        if is_legacy(doc) or (doc and len(task_lists(doc)) == len(doc)) or is_state(doc):
            return None
        return (f'{where}: not a taskmaster document: neither {{"tasks": [...]}} (legacy tasks.json), tags '
                'each holding {"tasks": [...]}, nor a state.json with "currentTag" (wrong dialect?).')

    def apply(self, doc: Any, event: Event) -> Any:
        return apply_event(doc, event)

    def derive(self, prev: Any, next_doc: Any) -> list[Event]:
        return derive_events(prev, next_doc)

    def stream_id(self, doc: Any) -> str | None:
        meta = doc.get("metadata") if is_legacy(doc) else None
        name = meta.get("projectName") if isinstance(meta, dict) else None
        return f"taskmaster/{name}" if isinstance(name, str) and name else None

    def describe(self, doc: Any) -> RunInfo:
        if is_state(doc):
            tag = doc.get("currentTag")
            return RunInfo(title="state.json", status=f"current tag {tag}" if isinstance(tag, str) else None)
        lists = task_lists(doc)
        tasks = [t for ts in lists.values() for t in ts if isinstance(t, dict)]
        done = sum(t.get("status") == "done" for t in tasks)
        meta = doc.get("metadata") if is_legacy(doc) else None
        project = meta.get("projectName") if isinstance(meta, dict) else None
        return RunInfo(project=project if isinstance(project, str) else None,
                       title=", ".join(str(t) for t in lists if t is not None) or None,
                       status=f"{done}/{len(tasks)} done" if tasks else None)

    def validate(self, doc: Any) -> list[Finding]:
        out: list[Finding] = []
        if is_state(doc):
            for key, kind in STATE_KEYS.items():
                if key in doc and type(doc[key]) is not kind:
                    out.append(Finding(f"/{key}", "wrong-type", f"{key} is a JSON {_JSON_NAMES[kind]}", "error"))
            return out
        for tag, tasks in task_lists(doc).items():
            base = _where(tag)
            ids = [t.get("id") for t in tasks if isinstance(t, dict)]
            for i, task in enumerate(tasks):
                at = f"{base}/{i}"
                if not isinstance(task, dict):
                    out.append(Finding(at, "task-not-object", "a task is a JSON object", "error"))
                    continue
                for key in ("id", "title", "status"):
                    if key not in task:
                        out.append(Finding(at, "missing-field", f"task has no {key}", "error"))
                if ids.count(task.get("id")) > 1:
                    out.append(Finding(f"{at}/id", "duplicate-id", f"task id {task.get('id')!r} is not unique"))
                if "status" in task and task["status"] not in STATUSES:
                    out.append(Finding(f"{at}/status", "status-not-in-enum",
                                       f"status {task['status']!r} is not one of {', '.join(STATUSES)}", "error"))
                deps = task.get("dependencies")
                for j, dep in enumerate(deps if isinstance(deps, list) else []):
                    if dep not in ids:
                        out.append(Finding(f"{at}/dependencies/{j}", "unknown-dependency",
                                           f"task {task.get('id')!r} depends on {dep!r}, which is no task here"))
                subs = task.get("subtasks")
                for j, sub in enumerate(subs if isinstance(subs, list) else []):
                    if isinstance(sub, dict) and "status" in sub and sub["status"] not in STATUSES:
                        out.append(Finding(f"{at}/subtasks/{j}/status", "status-not-in-enum",
                                           f"subtask status {sub['status']!r} is not one of {', '.join(STATUSES)}",
                                           "error"))
        return out

    def summary(self, event: Event) -> str | None:
        if isinstance(event, ev.TaskAdded):
            return f"task {event.task.get('id')!r} added{_at(event.tag)}: {str(event.task.get('title'))[:70]}"
        if isinstance(event, ev.TaskRemoved):
            return f"task {event.id!r} removed{_at(event.tag)}"
        if isinstance(event, ev.StatusChanged):
            return f"task {event.id!r}{_at(event.tag)}: {event.from_status} -> {event.to_status}"
        if isinstance(event, ev.SubtaskAdded):
            return (f"subtask {event.task_id!r}.{event.subtask.get('id')!r} added{_at(event.tag)}: "
                    f"{str(event.subtask.get('title'))[:70]}")
        if isinstance(event, ev.SubtaskRemoved):
            return f"subtask {event.task_id!r}.{event.id!r} removed{_at(event.tag)}"
        if isinstance(event, ev.TagCreated):
            tasks = event.value.get("tasks")
            return f"tag {event.tag!r} created ({len(tasks) if isinstance(tasks, list) else 0} tasks)"
        if isinstance(event, ev.TagRemoved):
            return f"tag {event.tag!r} removed"
        if isinstance(event, ev.SubtaskStatusChanged):
            return (f"subtask {event.task_id!r}.{event.subtask_id!r}{_at(event.tag)}: "
                    f"{event.from_status} -> {event.to_status}")
        if isinstance(event, ev.PriorityChanged):
            return f"task {event.id!r}{_at(event.tag)}: priority {event.from_priority} -> {event.to_priority}"
        if isinstance(event, ev.DependenciesAdded):
            return f"task {event.id!r}{_at(event.tag)}: now depends on {', '.join(map(repr, event.dependencies))}"
        if isinstance(event, ev.DependenciesRemoved):
            return (f"task {event.id!r}{_at(event.tag)}: no longer depends on "
                    f"{', '.join(map(repr, event.dependencies))}")
        if isinstance(event, ev.TaskUpdated):
            return f"task {event.id!r}{_at(event.tag)} updated: {_changed(event.fields, event.removed)}"
        if isinstance(event, ev.SubtaskUpdated):
            return (f"subtask {event.task_id!r}.{event.subtask_id!r}{_at(event.tag)} updated: "
                    f"{_changed(event.fields, event.removed)}")
        if isinstance(event, ev.TagSwitched):
            when = f" at {event.switched_at}" if isinstance(event.switched_at, str) else ""
            return f"current tag {event.from_tag!r} -> {event.to_tag!r}{when}"
        return None

    def simulate(self, rng: random.Random, *, run_id: str, start: datetime) -> Iterator[Snapshot]:
        from eventstore.dialects.taskmaster.simulate import simulate_project  # only demo and tests need it

        return simulate_project(rng, run_id=run_id, start=start)


__all__ = ["STATUSES", "TaskmasterDialect"]
