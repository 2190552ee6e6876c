"""The task-master event catalog (tags ``taskmaster.<snake_name>``).

claude-task-master keeps its tasks in ``.taskmaster/tasks/tasks.json``: one object per tag, each
``{"tasks": [...], "metadata": {...}}`` (the tagged format), or, in older projects,
``tasks/tasks.json`` holding ``{"tasks": [...], "metadata": {...}}`` itself (the legacy format).
Every event names its ``tag`` (``None``: the legacy format, whose task list is the document's
own) and the task by its ``id``; a subtask by its task's id and its own.

:class:`TagSwitched` is the one event of the other file task-master keeps, ``.taskmaster/state.json``
(``{"currentTag", "lastSwitched", "branchTagMapping", "migrationNoticeShown"}``), recorded as a stream
of its own.

Field updates (:class:`TaskUpdated`, :class:`SubtaskUpdated`) assign as task-master's JavaScript does:
a key the task has keeps its position, a new one goes last (in the order of ``fields``), a removed
one disappears; whatever that does not place exactly is left to the residual patch.

Every class repeats ``frozen=True`` so mypy sees it frozen too.  Evolution rules: new fields get
defaults and go last; a breaking change bumps ``schema_version`` and registers an upcaster.
"""

from __future__ import annotations

from typing import Any

from msgspec import UNSET, UnsetType

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


class PriorityChanged(Event, tag="taskmaster.priority_changed", frozen=True):
    """A task's ``priority`` went from ``from_priority`` to ``to_priority`` (``update-task``, an edit)."""

    tag: str | None
    id: TaskId
    from_priority: Any
    to_priority: Any


class DependenciesAdded(Event, tag="taskmaster.dependencies_added", frozen=True):
    """Task ids joined a task's ``dependencies`` (``add-dependency``): ``dependencies[i]`` is at
    ``indexes[i]`` of the new list (task-master sorts the list after a push)."""

    tag: str | None
    id: TaskId
    dependencies: list[TaskId]
    indexes: list[int]


class DependenciesRemoved(Event, tag="taskmaster.dependencies_removed", frozen=True):
    """Task ids left a task's ``dependencies`` (``remove-dependency``, ``fix-dependencies``)."""

    tag: str | None
    id: TaskId
    dependencies: list[TaskId]


class TaskUpdated(Event, tag="taskmaster.task_updated", frozen=True):
    """Top-level fields of a task changed (``update-task``, ``update``, an edit): ``fields`` holds
    each changed or new field with its new value, ``removed`` the fields it lost."""

    tag: str | None
    id: TaskId
    fields: dict[str, Any]
    removed: list[str] = []


class SubtaskUpdated(Event, tag="taskmaster.subtask_updated", frozen=True):
    """Fields of a subtask changed (``update-subtask`` appends to its ``details``), as :class:`TaskUpdated`."""

    tag: str | None
    task_id: TaskId
    subtask_id: TaskId
    fields: dict[str, Any]
    removed: list[str] = []


class TagSwitched(Event, tag="taskmaster.tag_switched", frozen=True):
    """``.taskmaster/state.json``'s ``currentTag`` changed (``use-tag``, a tag deleted while current):
    from ``from_tag`` (None: the file named none) to ``to_tag``; ``switched_at``: the new
    ``lastSwitched``, when the write set one."""

    from_tag: Any
    to_tag: Any
    switched_at: Any | UnsetType = UNSET


CATALOG: tuple[type[Event], ...] = (TaskAdded, TaskRemoved, StatusChanged, SubtaskStatusChanged, SubtaskAdded,
                                    SubtaskRemoved, TagCreated, TagRemoved, PriorityChanged, DependenciesAdded,
                                    DependenciesRemoved, TaskUpdated, SubtaskUpdated, TagSwitched)
