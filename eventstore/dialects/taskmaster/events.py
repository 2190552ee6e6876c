"""The task-master event catalog (tags ``taskmaster.<snake_name>``).

claude-task-master keeps its tasks in ``.taskmaster/tasks/tasks.json``: one object per tag, each
``{"tasks": [...], "metadata": {...}}`` (the tagged format), or, in older projects,
``tasks/tasks.json`` holding ``{"tasks": [...], "metadata": {...}}`` itself (the legacy format).
Every event names its ``tag`` (``None``: the legacy format, whose task list is the document's
own) and the task by its ``id``; a subtask by its task's id and its own.

Every class repeats ``frozen=True`` so mypy sees it frozen too.  Evolution rules: new fields get
defaults and go last; a breaking change bumps ``schema_version`` and registers an upcaster.
"""

from __future__ import annotations

from typing import Any

from eventstore.events import Event

TaskId = int | str


class TaskAdded(Event, tag="taskmaster.task_added", frozen=True):
    """A task appeared in a tag's list, at ``index`` (the whole task as written)."""

    tag: str | None
    index: int
    task: dict[str, Any]


class TaskRemoved(Event, tag="taskmaster.task_removed", frozen=True):
    """A task left a tag's list (deleted, or moved to another tag)."""

    tag: str | None
    id: TaskId
    title: Any = None


class StatusChanged(Event, tag="taskmaster.status_changed", frozen=True):
    """``task-master set-status``: a task's status went from ``from_status`` to ``to_status``."""

    tag: str | None
    id: TaskId
    from_status: Any
    to_status: Any


class SubtaskStatusChanged(Event, tag="taskmaster.subtask_status_changed", frozen=True):
    """A subtask's status changed (``set-status --id=<task>.<subtask>``)."""

    tag: str | None
    task_id: TaskId
    subtask_id: TaskId
    from_status: Any
    to_status: Any


class SubtaskAdded(Event, tag="taskmaster.subtask_added", frozen=True):
    """A subtask appeared in a task's ``subtasks``, at ``index`` (``expand``, ``add-subtask``)."""

    tag: str | None
    task_id: TaskId
    index: int
    subtask: dict[str, Any]


class SubtaskRemoved(Event, tag="taskmaster.subtask_removed", frozen=True):
    """A subtask left its task's ``subtasks`` (``remove-subtask``, ``clear-subtasks``)."""

    tag: str | None
    task_id: TaskId
    id: TaskId
    title: Any = None


class TagCreated(Event, tag="taskmaster.tag_created", frozen=True):
    """A tag appeared (``add-tag``, ``copy-tag``): its whole ``{"tasks", "metadata"}`` object."""

    tag: str
    value: dict[str, Any]


class TagRemoved(Event, tag="taskmaster.tag_removed", frozen=True):
    """A tag and its task list left the document (``delete-tag``)."""

    tag: str


CATALOG: tuple[type[Event], ...] = (TaskAdded, TaskRemoved, StatusChanged, SubtaskStatusChanged, SubtaskAdded,
                                    SubtaskRemoved, TagCreated, TagRemoved)
