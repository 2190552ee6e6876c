"""The task-master lens: typed events for what task-master changes, found by task id.

``derive`` recognises tags created and removed (tagged format), and per tag present before and
after (the legacy format is the tag ``None``): tasks removed and added (by id), a task's status
changed, subtasks removed and added (by id) and a subtask's status changed.  Everything else
(titles, details, priority, dependencies, metadata, a switch between the formats, lists whose ids
are not unique) is left to the exact patch :meth:`Dialect.observe` adds, which also repairs what
the events do not place exactly (a reordered list): the lens law holds either way.
"""

from __future__ import annotations

from typing import Any

from eventstore import documents
from eventstore.dialects.taskmaster import events as ev
from eventstore.events import Event

JSON = Any


def is_legacy(doc: JSON) -> bool:
    return type(doc) is dict and type(doc.get("tasks")) is list


def task_lists(doc: JSON) -> dict[str | None, list[Any]]:
    """Each tag's task list (``None``: the legacy format's own list)."""
    if type(doc) is not dict:
        return {}
    if is_legacy(doc):
        return {None: doc["tasks"]}
    return {tag: v["tasks"] for tag, v in doc.items() if type(v) is dict and type(v.get("tasks")) is list}


def _ids(items: list[Any]) -> dict[Any, dict[str, Any]] | None:
    """id -> item when every item is an object with a unique int or string id (else None)."""
    out: dict[Any, dict[str, Any]] = {}
    for item in items:
        if type(item) is not dict or type(item.get("id")) not in (int, str):
            return None
        key = (type(item["id"]).__name__, item["id"])
        if key in out:
            return None
        out[key] = item
    return out


def _key(task_id: Any) -> tuple[str, Any]:
    return type(task_id).__name__, task_id


def _differ(a: Any, b: Any) -> bool:
    return not documents.same(a, b)


def derive_events(prev: JSON, next_doc: JSON) -> list[Event]:
    out: list[Event] = []
    before, after = task_lists(prev), task_lists(next_doc)
    if not is_legacy(prev) and not is_legacy(next_doc):
        for tag in before:
            if tag is not None and tag not in after and tag not in next_doc:
                out.append(ev.TagRemoved(tag=tag))
        for tag in after:
            if tag is not None and tag not in before and tag not in prev:
                out.append(ev.TagCreated(tag=tag, value=documents.copy(next_doc[tag])))
    for tag, old in before.items():
        new = after.get(tag)
        if new is None:
            continue
        old_ids, new_ids = _ids(old), _ids(new)
        if old_ids is None or new_ids is None:
            continue
        for key, task in old_ids.items():
            if key not in new_ids:
                out.append(ev.TaskRemoved(tag=tag, id=task["id"], title=documents.copy(task.get("title"))))
        for i, task in enumerate(new):
            if _key(task["id"]) not in old_ids:
                out.append(ev.TaskAdded(tag=tag, index=i, task=documents.copy(task)))
        for key, was in old_ids.items():
            now = new_ids.get(key)
            if now is None:
                continue
            if "status" in was and "status" in now and _differ(was["status"], now["status"]):
                out.append(ev.StatusChanged(tag=tag, id=was["id"], from_status=documents.copy(was["status"]),
                                            to_status=documents.copy(now["status"])))
            subs_was, subs_now = was.get("subtasks"), now.get("subtasks")
            if type(subs_was) is not list or type(subs_now) is not list:
                continue
            sub_old, sub_new = _ids(subs_was), _ids(subs_now)
            if sub_old is None or sub_new is None:
                continue
            for skey, s_was in sub_old.items():
                if skey not in sub_new:
                    out.append(ev.SubtaskRemoved(tag=tag, task_id=was["id"], id=s_was["id"],
                                                 title=documents.copy(s_was.get("title"))))
            for j, s_now in enumerate(subs_now):
                if _key(s_now["id"]) not in sub_old:
                    out.append(ev.SubtaskAdded(tag=tag, task_id=was["id"], index=j, subtask=documents.copy(s_now)))
            for skey, s_was in sub_old.items():
                s_now = sub_new.get(skey)
                if s_now is not None and "status" in s_was and "status" in s_now \
                        and _differ(s_was["status"], s_now["status"]):
                    out.append(ev.SubtaskStatusChanged(
                        tag=tag, task_id=was["id"], subtask_id=s_was["id"],
                        from_status=documents.copy(s_was["status"]), to_status=documents.copy(s_now["status"])))
    return out


def _tasks(doc: JSON, tag: str | None) -> list[Any]:
    lists = task_lists(doc)
    if tag not in lists:
        raise ValueError(f"no task list for tag {tag!r}")
    return lists[tag]


def _find(items: list[Any], task_id: Any) -> dict[str, Any]:
    for item in items:
        if type(item) is dict and _key(item.get("id")) == _key(task_id):
            return item
    raise ValueError(f"no task {task_id!r}")


def apply_event(doc: JSON, event: Event) -> JSON:
    if isinstance(event, ev.TaskAdded):
        _tasks(doc, event.tag).insert(event.index, documents.copy(event.task))
    elif isinstance(event, ev.TaskRemoved):
        tasks = _tasks(doc, event.tag)
        found = _find(tasks, event.id)
        del tasks[next(i for i, t in enumerate(tasks) if t is found)]  # by identity: an equal twin stays
    elif isinstance(event, ev.StatusChanged):
        _find(_tasks(doc, event.tag), event.id)["status"] = documents.copy(event.to_status)
    elif isinstance(event, ev.SubtaskAdded):
        _find(_tasks(doc, event.tag), event.task_id)["subtasks"].insert(event.index, documents.copy(event.subtask))
    elif isinstance(event, ev.SubtaskRemoved):
        subs = _find(_tasks(doc, event.tag), event.task_id)["subtasks"]
        found = _find(subs, event.id)
        del subs[next(i for i, t in enumerate(subs) if t is found)]
    elif isinstance(event, ev.TagCreated):
        if type(doc) is not dict or event.tag in doc:
            raise ValueError(f"tag {event.tag!r} exists already")
        doc[event.tag] = documents.copy(event.value)
    elif isinstance(event, ev.TagRemoved):
        _tasks(doc, event.tag)
        del doc[event.tag]
    elif isinstance(event, ev.SubtaskStatusChanged):
        task = _find(_tasks(doc, event.tag), event.task_id)
        _find(task["subtasks"], event.subtask_id)["status"] = documents.copy(event.to_status)
    else:
        raise TypeError(f"taskmaster cannot apply {type(event).__name__}")
    return doc
