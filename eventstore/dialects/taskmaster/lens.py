"""The task-master lens: typed events for what task-master changes, found by task id.

``derive`` recognises tags created and removed (tagged format), and per tag present before and
after (the legacy format is the tag ``None``): tasks removed and added (by id), and per task kept a
status or priority changed, dependencies removed and added, its other top-level fields updated,
subtasks removed and added (by id) and a subtask's status or other fields changed.  Between two
``state.json`` documents it recognises a switch of ``currentTag``.  Everything else (tag metadata,
a switch between the formats, lists whose ids are not unique, a reordered list or object) is left
to the exact patch :meth:`Dialect.observe` adds, which repairs what the events do not place
exactly: the lens law holds either way.
"""

from __future__ import annotations

from typing import Any

from msgspec import UNSET

from eventstore import documents
from eventstore.dialects.taskmaster import events as ev
from eventstore.events import Event

JSON = Any


def is_legacy(doc: JSON) -> bool:
    return type(doc) is dict and type(doc.get("tasks")) is list


#: The members of ``.taskmaster/state.json`` and their JSON types (tag-management.js, switchCurrentTag).
STATE_KEYS: dict[str, type] = {"currentTag": str, "lastSwitched": str, "branchTagMapping": dict,
                               "migrationNoticeShown": bool}


def is_state(doc: JSON) -> bool:
    """Whether ``doc`` is a ``state.json`` document: an object holding at least one of its members
    with its type (task-master 0.4x writes ``{"migrationNoticeShown": true}`` alone) and no task list."""
    return (type(doc) is dict and not is_legacy(doc)
            and any(type(doc.get(k)) is t for k, t in STATE_KEYS.items())
            and not any(type(v) is dict and type(v.get("tasks")) is list for v in doc.values()))


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


def _dep_keys(deps: Any) -> list[tuple[str, Any]] | None:
    """The keys of a ``dependencies`` list of unique int or string ids (else None)."""
    if type(deps) is not list or any(type(d) not in (int, str) for d in deps):
        return None
    keys = [_key(d) for d in deps]
    return keys if len(set(keys)) == len(keys) else None


def _fields(was: dict[str, Any], now: dict[str, Any], typed: set[str]) -> tuple[dict[str, Any], list[str]]:
    """The members of ``now`` that are new or changed, and those ``was`` had that ``now`` lacks,
    leaving out ``typed`` (members other events state)."""
    fields = {k: documents.copy(v) for k, v in now.items()
              if k not in typed and (k not in was or _differ(was[k], v))}
    return fields, [k for k in was if k not in now and k not in typed]


def _dependencies(tag: str | None, was: dict[str, Any], now: dict[str, Any]) -> list[Event] | None:
    """DependenciesRemoved/Added turning ``was``'s list into ``now``'s, or None when they cannot
    (not both lists of unique ids, or the ids kept changed their order)."""
    old, new = _dep_keys(was.get("dependencies")), _dep_keys(now.get("dependencies"))
    if old is None or new is None:
        return None
    gone, came = set(old) - set(new), set(new) - set(old)
    if [k for k in old if k not in gone] != [k for k in new if k not in came]:
        return None
    out: list[Event] = []
    if gone:
        out.append(ev.DependenciesRemoved(tag=tag, id=was["id"], dependencies=[k[1] for k in old if k in gone]))
    if came:
        at = [i for i, k in enumerate(new) if k in came]
        out.append(ev.DependenciesAdded(tag=tag, id=was["id"], dependencies=[new[i][1] for i in at], indexes=at))
    return out


def _task_changes(tag: str | None, was: dict[str, Any], now: dict[str, Any]) -> list[Event]:
    """What changed in one task kept by id: status, priority, dependencies, other fields, subtasks."""
    out: list[Event] = []
    typed = {"id"}
    if "status" in was and "status" in now:
        typed.add("status")
        if _differ(was["status"], now["status"]):
            out.append(ev.StatusChanged(tag=tag, id=was["id"], from_status=documents.copy(was["status"]),
                                        to_status=documents.copy(now["status"])))
    if "priority" in was and "priority" in now:
        typed.add("priority")
        if _differ(was["priority"], now["priority"]):
            out.append(ev.PriorityChanged(tag=tag, id=was["id"], from_priority=documents.copy(was["priority"]),
                                          to_priority=documents.copy(now["priority"])))
    deps = _dependencies(tag, was, now)
    if deps is not None:
        typed.add("dependencies")
        out += deps
    subs_was, subs_now = was.get("subtasks"), now.get("subtasks")
    sub_old = _ids(subs_was) if type(subs_was) is list else None
    sub_new = _ids(subs_now) if type(subs_now) is list else None
    if sub_old is not None and sub_new is not None:
        typed.add("subtasks")
    fields, removed = _fields(was, now, typed)
    if fields or removed:
        out.append(ev.TaskUpdated(tag=tag, id=was["id"], fields=fields, removed=removed))
    if sub_old is None or sub_new is None:
        return out
    for skey, s_was in sub_old.items():
        if skey not in sub_new:
            out.append(ev.SubtaskRemoved(tag=tag, task_id=was["id"], id=s_was["id"],
                                         title=documents.copy(s_was.get("title"))))
    for j, s_now in enumerate(now["subtasks"]):
        if _key(s_now["id"]) not in sub_old:
            out.append(ev.SubtaskAdded(tag=tag, task_id=was["id"], index=j, subtask=documents.copy(s_now)))
    for skey, s_was in sub_old.items():
        s_now = sub_new.get(skey)
        if s_now is None or not _differ(s_was, s_now):
            continue
        styped = {"id"}
        if "status" in s_was and "status" in s_now:
            styped.add("status")
            if _differ(s_was["status"], s_now["status"]):
                out.append(ev.SubtaskStatusChanged(
                    tag=tag, task_id=was["id"], subtask_id=s_was["id"],
                    from_status=documents.copy(s_was["status"]), to_status=documents.copy(s_now["status"])))
        sfields, sremoved = _fields(s_was, s_now, styped)
        if sfields or sremoved:
            out.append(ev.SubtaskUpdated(tag=tag, task_id=was["id"], subtask_id=s_was["id"], fields=sfields,
                                         removed=sremoved))
    return out


def _state_changes(prev: dict[str, Any], next_doc: dict[str, Any]) -> list[Event]:
    """A switch of ``currentTag`` between two state.json documents (the rest is the patch's)."""
    if "currentTag" not in next_doc or ("currentTag" in prev and not _differ(prev["currentTag"],
                                                                             next_doc["currentTag"])):
        return []
    stamped = "lastSwitched" in next_doc and ("lastSwitched" not in prev
                                              or _differ(prev["lastSwitched"], next_doc["lastSwitched"]))
    return [ev.TagSwitched(from_tag=documents.copy(prev.get("currentTag")),
                           to_tag=documents.copy(next_doc["currentTag"]),
                           switched_at=documents.copy(next_doc["lastSwitched"]) if stamped else UNSET)]


def derive_events(prev: JSON, next_doc: JSON) -> list[Event]:
    if is_state(prev) and is_state(next_doc):
        return _state_changes(prev, next_doc)
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
            if now is not None and _differ(was, now):  # most tasks are unchanged: one comparison each
                out += _task_changes(tag, was, now)
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


def _assign(item: dict[str, Any], fields: dict[str, Any], removed: list[str]) -> None:
    for key, value in fields.items():
        item[key] = documents.copy(value)  # a key the item has keeps its place; a new one goes last
    for key in removed:
        del item[key]


def _dependency_list(doc: JSON, event: ev.DependenciesAdded | ev.DependenciesRemoved) -> list[Any]:
    deps = _find(_tasks(doc, event.tag), event.id).get("dependencies")
    if type(deps) is not list:
        raise ValueError(f"task {event.id!r} has no dependencies list")
    return deps


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
    elif isinstance(event, ev.PriorityChanged):
        _find(_tasks(doc, event.tag), event.id)["priority"] = documents.copy(event.to_priority)
    elif isinstance(event, ev.DependenciesRemoved):
        deps = _dependency_list(doc, event)
        gone = {_key(d) for d in event.dependencies}
        deps[:] = [d for d in deps if _key(d) not in gone]
    elif isinstance(event, ev.DependenciesAdded):
        deps = _dependency_list(doc, event)
        for at, dep in sorted(zip(event.indexes, event.dependencies, strict=True), key=lambda p: p[0]):
            deps.insert(at, dep)
    elif isinstance(event, ev.TaskUpdated):
        _assign(_find(_tasks(doc, event.tag), event.id), event.fields, event.removed)
    elif isinstance(event, ev.SubtaskUpdated):
        task = _find(_tasks(doc, event.tag), event.task_id)
        _assign(_find(task["subtasks"], event.subtask_id), event.fields, event.removed)
    elif isinstance(event, ev.TagSwitched):
        if type(doc) is not dict:
            raise ValueError("state.json is no object")
        doc["currentTag"] = documents.copy(event.to_tag)
        if event.switched_at is not UNSET:
            doc["lastSwitched"] = documents.copy(event.switched_at)
    else:
        raise TypeError(f"taskmaster cannot apply {type(event).__name__}")
    return doc
