"""FRIDAY lens: ``apply`` folds one domain event, ``derive`` recognises the events in a change.

Why canonical key positions: FRIDAY rewrites the whole file in the schema's key order, so a
key that (re)appears lands at its schema position, not at the end.  ``_put`` inserts a new key
before the first existing key the schema orders after it; existing keys are replaced in place.
Anything the events do not reproduce (unknown keys, odd orders, removed unknown keys) is left
to the residual ``DocumentPatched`` that :meth:`Dialect.observe` adds.

``derive`` folds every event it emits into a working copy, so later decisions (e.g. whether the
pending task queue still differs after TaskCompleted) see the document as the events left it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from msgspec import UNSET

from eventstore import documents
from eventstore.dialects.friday import events as ev
from eventstore.dialects.friday.validate import KNOWN_TOP, computed_risk_score
from eventstore.events import Event

JSON = Any

TOP_KEYS: tuple[str, ...] = KNOWN_TOP  # the spec's top-level keys, in the orchestrator's order
CYCLE_KEYS: tuple[str, ...] = (
    "agent", "phase", "cycle_type", "mode", "waiting_for", "last_report_type", "question_origin",
    "pending_interaction", "gap_queue", "collected_gap_answers", "ambiguity_queue",
    "collected_ambiguity_answers", "current_gap_index", "current_ambiguity_index",
    "unresolved_blocking_gaps", "cycle_count",
)
_TOP_RANK = {k: i for i, k in enumerate(TOP_KEYS)}
_CYCLE_RANK = {k: i for i, k in enumerate(CYCLE_KEYS)}

# the current-task fields and the TaskStarted field that carries each
TASK_FIELDS: tuple[tuple[str, str], ...] = (
    ("current_task", "task_id"), ("task_title", "title"),
    ("current_work_item_type", "work_item_type"), ("current_work_item_id", "work_item_id"),
    ("current_task_category", "category"), ("current_task_location", "location"),
)
_REPORT_KEYS = ("last_report_type", "question_origin", "mode", "gap_queue", "ambiguity_queue",
                "unresolved_blocking_gaps", "cycle_count")
_BATCH_WAITS = {"gap-batch-send": "gap", "ambiguity-batch-send": "ambiguity"}


def _batch_wait(value: Any) -> str | None:
    """The queue a ``waiting_for`` value sends a batch of; a value that is no string (a list, say)
    sends none, rather than failing to hash."""
    return _BATCH_WAITS.get(value) if isinstance(value, str) else None
# A tuple, not a set: a status that is no string (a list, say) must compare unequal, not fail to hash.
_APPROVED_STATUSES = ("in-progress", "awaiting-agent-cycle", "awaiting-task-approval", "complete")
_MISSING = object()


# ================================================================== apply


def _put(obj: dict[str, Any], key: str, value: JSON, rank: dict[str, int]) -> None:
    """Set ``obj[key]``: in place when present, else at its schema position."""
    if key in obj:
        obj[key] = value
        return
    r = rank.get(key)
    items = list(obj.items())
    pos = len(items)
    if r is not None:
        for i, (k, _) in enumerate(items):
            rk = rank.get(k)
            if rk is not None and rk > r:
                pos = i
                break
    if pos == len(items):
        obj[key] = value
        return
    items.insert(pos, (key, value))
    obj.clear()
    obj.update(items)


def _top(doc: JSON) -> dict[str, Any]:
    if type(doc) is not dict:
        raise TypeError("FRIDAY state is not a JSON object")
    return doc


def _cycle(doc: dict[str, Any]) -> dict[str, Any]:
    c = doc.get("active_cycle")
    if type(c) is not dict:
        raise TypeError("active_cycle is not an object")
    return c


def _set_fields(obj: dict[str, Any], pairs: Sequence[tuple[str, Any]], rank: dict[str, int]) -> None:
    for key, value in pairs:
        if value is not UNSET:
            _put(obj, key, documents.take(value), rank)


#: Events that set one top-level key: the key and the event's field holding its value.
_TOP_SETTERS: dict[type[Event], tuple[str, str]] = {
    ev.StateSaved: ("last_updated", "last_updated"), ev.StatusChanged: ("status", "status"),
    ev.RequestChanged: ("request_summary", "request_summary"), ev.ContextChanged: ("context", "context"),
    ev.NextActionChanged: ("next_action", "next_action"), ev.Blocked: ("block_reason", "block_reason"),
    ev.Unblocked: ("block_reason", "block_reason"),
}
_REPORT_FIELDS = ("last_report_type", "question_origin", "mode", "gap_queue", "collected_gap_answers",
                  "ambiguity_queue", "collected_ambiguity_answers", "unresolved_blocking_gaps", "cycle_count")


def apply_event(doc: JSON, event: Event) -> JSON:
    """Fold one FRIDAY domain event into ``doc`` (mutates and returns it)."""
    if isinstance(event, ev.StateInitialised):
        return documents.take(event.doc)
    d = _top(doc)
    setter = _TOP_SETTERS.get(type(event))
    if setter is not None:
        _set_fields(d, [(setter[0], getattr(event, setter[1]))], _TOP_RANK)
    elif isinstance(event, ev.StateReset):
        for key in event.removed:
            d.pop(key, None)
    elif isinstance(event, (ev.PlanProposed, ev.PlanReplaced)):
        _set_fields(d, [("approved_plan", event.plan), ("total_steps", event.total_steps)], _TOP_RANK)
    elif isinstance(event, (ev.PlanApproved, ev.BatchSent)):
        pass  # markers: the write they explain is carried by the events around them
    elif isinstance(event, ev.StepDelegated):
        _set_fields(d, [("current_step", event.step), ("total_steps", event.total_steps),
                        ("current_agent", event.agent),
                        ("current_execution_mode", event.execution_mode)], _TOP_RANK)
    elif isinstance(event, ev.StepStatusChanged):
        item = d["approved_plan"][event.index]
        if type(item) is not dict:
            raise TypeError("plan item is not an object")
        _set_fields(item, [("status", event.status), ("output", event.output)], {})
    elif isinstance(event, ev.TaskQueueSet):
        _set_fields(d, [("total_tasks", event.total_tasks), ("completed_tasks", event.completed_tasks),
                        ("pending_tasks", event.pending_tasks)], _TOP_RANK)
    elif isinstance(event, ev.TaskStarted):
        _set_fields(d, [(key, getattr(event, attr)) for key, attr in TASK_FIELDS], _TOP_RANK)
    elif isinstance(event, ev.TaskCompleted):
        _apply_task_completed(d, event)
    elif isinstance(event, ev.CycleOpened):
        _put(d, "active_cycle", documents.take(event.cycle), _TOP_RANK)
    elif isinstance(event, ev.ReportReceived):
        _set_fields(_cycle(d), [(k, getattr(event, k)) for k in _REPORT_FIELDS], _CYCLE_RANK)
    elif isinstance(event, ev.InteractionSurfaced):
        c = _cycle(d)
        if event.pending_interaction_removed:
            c.pop("pending_interaction", None)
        pairs: list[tuple[str, Any]] = [("waiting_for", event.waiting_for),
                                        ("pending_interaction", event.pending_interaction)]
        if event.index_key is not None:
            pairs.append((event.index_key, event.index))
        _set_fields(c, pairs, _CYCLE_RANK)
    elif isinstance(event, ev.ParseFallbackEntered):
        pairs = [("waiting_for", event.waiting_for), ("pending_interaction", event.pending_interaction)]
        if event.index_key is not None:
            pairs.append((event.index_key, event.index))
        _set_fields(_cycle(d), pairs, _CYCLE_RANK)
    elif isinstance(event, ev.AnswerCaptured):
        c = _cycle(d)
        key = f"collected_{event.queue_kind}_answers"
        if type(c.get(key)) is not dict:
            _put(c, key, {}, _CYCLE_RANK)
        c[key][event.item_id] = documents.take(event.answer)
    elif isinstance(event, ev.CycleClosed):
        if event.to_null:
            _put(d, "active_cycle", None, _TOP_RANK)
        else:
            d.pop("active_cycle", None)
    elif isinstance(event, ev.SessionMetricsRecorded):
        _set_fields(d, [("session_metrics", event.metrics)], _TOP_RANK)
    else:
        raise TypeError(f"friday dialect cannot apply {type(event).__name__}")
    return d


def _apply_task_completed(d: dict[str, Any], event: ev.TaskCompleted) -> None:
    pending = d.get("pending_tasks")
    if type(pending) is list:
        for i, t in enumerate(pending):
            if type(t) is dict and documents.same(t.get("task_id"), event.task_id):
                del pending[i]
                break
    done = d.get("completed_tasks")
    if type(done) is not list:
        done = []
        _put(d, "completed_tasks", done, _TOP_RANK)
    done.append(documents.take(event.task))


# ================================================================== derive


def _changed(prev: dict[str, Any], nxt: dict[str, Any], key: str) -> bool:
    """True when ``nxt`` has ``key`` and it differs from (or is absent in) ``prev``."""
    if key not in nxt:
        return False
    return key not in prev or not documents.same(prev[key], nxt[key])


def _val(nxt: dict[str, Any], prev: dict[str, Any], key: str) -> Any:
    return documents.copy(nxt[key]) if _changed(prev, nxt, key) else UNSET


class _Deriver:
    """Collects events and folds each into a working copy as it goes."""

    def __init__(self, prev: dict[str, Any], nxt: dict[str, Any]) -> None:
        self.prev = prev
        self.next = nxt
        self.work: dict[str, Any] = documents.copy(prev)
        self.events: list[Event] = []

    def emit(self, event: Event) -> None:
        self.work = apply_event(self.work, event)
        self.events.append(event)

    # -------------------------------------------------------------- top level

    def run(self) -> list[Event]:
        p, n = self.prev, self.next
        removed = [k for k in p if k not in n and k in _TOP_RANK]
        if removed:
            if "active_cycle" in removed and type(p.get("active_cycle")) is dict:
                self._close_cycle(p["active_cycle"], to_null=False)
                removed.remove("active_cycle")
            if removed:
                self.emit(ev.StateReset(removed=removed))
        if _changed(p, n, "status"):
            self.emit(ev.StatusChanged(status=documents.copy(n["status"]), previous=p.get("status")))
            self._plan_approved()
        if _changed(p, n, "request_summary"):
            self.emit(ev.RequestChanged(request_summary=documents.copy(n["request_summary"])))
        if _changed(p, n, "context"):
            self.emit(ev.ContextChanged(context=documents.copy(n["context"])))
        self._plan()
        self._pointer()
        self._tasks()
        self._active_cycle()
        if _changed(p, n, "session_metrics"):
            m = documents.copy(n["session_metrics"])
            self.emit(ev.SessionMetricsRecorded(
                metrics=m, risk_score=m.get("risk_score") if type(m) is dict else None,
                computed_risk_score=computed_risk_score(n)))
        if _changed(p, n, "block_reason"):
            reason = n["block_reason"]
            if isinstance(reason, str) and reason.strip():
                self.emit(ev.Blocked(block_reason=reason))
            else:
                self.emit(ev.Unblocked(previous_reason=documents.copy(p.get("block_reason")),
                                       block_reason=documents.copy(reason)))
        if _changed(p, n, "next_action"):
            self.emit(ev.NextActionChanged(next_action=documents.copy(n["next_action"])))
        if _changed(p, n, "last_updated"):
            self.emit(ev.StateSaved(last_updated=documents.copy(n["last_updated"])))
        return self.events

    def _plan_approved(self) -> None:
        p, n = self.prev, self.next
        plan = n.get("approved_plan")
        if (p.get("status") == "awaiting-approval" and n.get("status") in _APPROVED_STATUSES
                and type(plan) is list and plan):
            self.emit(ev.PlanApproved(step=documents.copy(n.get("current_step")), steps=len(plan),
                                      status=n.get("status")))

    # -------------------------------------------------------------- plan and pointer

    def _plan(self) -> None:
        p, n = self.prev, self.next
        if not _changed(p, n, "approved_plan"):
            return
        old, new = p.get("approved_plan"), n["approved_plan"]
        total = _val(n, p, "total_steps")
        if type(old) is list and type(new) is list and len(old) == len(new) and all(
                _same_step(a, b) for a, b in zip(old, new, strict=True)):
            for i, (a, b) in enumerate(zip(old, new, strict=True)):
                if documents.same(a, b):
                    continue
                self.emit(ev.StepStatusChanged(
                    index=i, step=documents.copy(b.get("step")), agent=documents.copy(b.get("agent")),
                    status=_val(b, a, "status"), output=_val(b, a, "output")))
            if total is not UNSET:
                self.emit(ev.StepDelegated(total_steps=total))
            return
        if (old is None or old == []) and type(new) is list and new:
            self.emit(ev.PlanProposed(plan=documents.copy(new), total_steps=total))
            return
        self.emit(ev.PlanReplaced(plan=documents.copy(new),
                                  previous_steps=len(old) if type(old) is list else 0,
                                  reason=self._replace_reason(), total_steps=total))

    def _replace_reason(self) -> str:
        p, n = self.prev, self.next
        if n.get("approved_plan") == []:
            return "cleared"
        for doc in (p, n):
            m = doc.get("session_metrics")
            if type(m) is dict and m.get("next_action_type") == "change-direction":
                return "change-direction"
        ctx = n.get("context")
        notes = ctx.get("notes") if type(ctx) is dict else None
        if isinstance(notes, str):
            low = notes.lower()
            if "change-direction" in low or "changing direction" in low or "change direction" in low:
                return "change-direction"
        if _changed(p, n, "request_summary"):
            return "new-request"
        return "revised"

    def _pointer(self) -> None:
        p, n = self.prev, self.next
        step, agent = _val(n, p, "current_step"), _val(n, p, "current_agent")
        mode = _val(n, p, "current_execution_mode")
        total = _val(n, self.work, "total_steps")  # not yet set by a plan event
        if any(v is not UNSET for v in (step, agent, mode, total)):
            self.emit(ev.StepDelegated(step=step, agent=agent, execution_mode=mode, total_steps=total))

    # -------------------------------------------------------------- tasks

    def _tasks(self) -> None:
        p, n = self.prev, self.next
        old_done = p.get("completed_tasks", [])
        new_done = n.get("completed_tasks", _MISSING)
        if (type(old_done) is list and type(new_done) is list and len(new_done) > len(old_done)
                and all(documents.same(a, b) for a, b in zip(old_done, new_done, strict=False))):
            for task in new_done[len(old_done):]:
                tid = task.get("task_id") if type(task) is dict else None
                self.emit(ev.TaskCompleted(task_id=documents.copy(tid), task=documents.copy(task)))
        pending = _val(n, self.work, "pending_tasks")
        done = _val(n, self.work, "completed_tasks")
        total = _val(n, p, "total_tasks")
        if pending is not UNSET or total is not UNSET or done is not UNSET:
            self.emit(ev.TaskQueueSet(pending_tasks=pending, total_tasks=total, completed_tasks=done))
        fields = {attr: _val(n, p, key) for key, attr in TASK_FIELDS}
        if any(v is not UNSET for v in fields.values()):
            self.emit(ev.TaskStarted(**fields))

    # -------------------------------------------------------------- cycles

    def _active_cycle(self) -> None:
        p, n = self.prev, self.next
        if "active_cycle" not in n:
            return  # removal handled with the other removed keys
        pc, nc = p.get("active_cycle"), n["active_cycle"]
        if type(nc) is dict:
            if type(pc) is dict and _same_cycle(pc, nc):
                self._inside_cycle(pc, nc)
            else:
                if type(pc) is dict:
                    self._close_cycle(pc, to_null=False)
                self.emit(ev.CycleOpened(agent=documents.copy(nc.get("agent")),
                                         cycle_type=documents.copy(nc.get("cycle_type")),
                                         phase=documents.copy(nc.get("phase")),
                                         mode=documents.copy(nc.get("mode")), cycle=documents.copy(nc)))
                # FRIDAY opens the loop and surfaces its first question in one write; restating
                # that interaction (an idempotent re-set) lets readers count every question asked
                self._interaction({}, nc)
        elif nc is None and type(pc) is dict:
            self._close_cycle(pc, to_null=True)

    def _close_cycle(self, pc: dict[str, Any], *, to_null: bool) -> None:
        kind = _batch_wait(pc.get("waiting_for"))
        if kind is not None:
            self._batch_sent(pc, kind)
        self.emit(ev.CycleClosed(agent=documents.copy(pc.get("agent")),
                                 cycle_type=documents.copy(pc.get("cycle_type")),
                                 cycle_count=documents.copy(pc.get("cycle_count")),
                                 last_report_type=documents.copy(pc.get("last_report_type")),
                                 to_null=to_null))

    def _batch_sent(self, pc: dict[str, Any], kind: str) -> None:
        answers = pc.get(f"collected_{kind}_answers")
        ids = [k for k in answers] if type(answers) is dict else []
        self.emit(ev.BatchSent(queue_kind=kind, item_ids=ids))

    def _inside_cycle(self, pc: dict[str, Any], nc: dict[str, Any]) -> None:
        reset: dict[str, Any] = {}
        for kind in ("gap", "ambiguity"):
            key = f"collected_{kind}_answers"
            old, new = pc.get(key, _MISSING), nc.get(key, _MISSING)
            if new is _MISSING or (old is not _MISSING and documents.same(old, new)):
                continue
            if type(new) is dict and (old is _MISSING or (type(old) is dict and _extends(old, new))):
                base = old if type(old) is dict else {}
                for item_id, answer in new.items():
                    if item_id not in base or not documents.same(base[item_id], answer):
                        self.emit(ev.AnswerCaptured(queue_kind=kind, item_id=item_id,
                                                    answer=documents.copy(answer)))
            else:
                reset[key] = documents.copy(new)  # a new round resets the collected answers
        report = {k: _val(nc, pc, k) for k in _REPORT_KEYS}
        report_changed = reset or any(v is not UNSET for v in report.values())
        batch_kind = _batch_wait(pc.get("waiting_for"))
        if batch_kind is not None and (report_changed or _changed(pc, nc, "waiting_for")):
            self._batch_sent(pc, batch_kind)
        if report_changed:
            kind_of_queue = ("gap" if report["gap_queue"] is not UNSET
                             else "ambiguity" if report["ambiguity_queue"] is not UNSET else None)
            self.emit(ev.ReportReceived(agent=documents.copy(nc.get("agent")), queue_kind=kind_of_queue,
                                        **report, **reset))
        self._interaction(pc, nc)

    def _interaction(self, pc: dict[str, Any], nc: dict[str, Any]) -> None:
        wait, pending = _val(nc, pc, "waiting_for"), _val(nc, pc, "pending_interaction")
        removed = "pending_interaction" in pc and "pending_interaction" not in nc
        index_key = None
        index: Any = UNSET
        for key in ("current_gap_index", "current_ambiguity_index"):
            if _changed(pc, nc, key):
                index_key, index = key, documents.copy(nc[key])
                break
        if wait is UNSET and pending is UNSET and not removed and index_key is None:
            return
        pi = nc.get("pending_interaction")
        pi_d = pi if type(pi) is dict else {}
        fallback = nc.get("waiting_for") == "manual-review" or pi_d.get("interaction_type") == "parse-fallback"
        if fallback and not removed and "waiting_for" in nc and "pending_interaction" in nc and (
                wait is not UNSET or pending is not UNSET):
            src = pi_d.get("source_ref")
            self.emit(ev.ParseFallbackEntered(
                waiting_for=documents.copy(nc["waiting_for"]), pending_interaction=documents.copy(pi),
                report_type=documents.copy(src.get("report_type")) if type(src) is dict else None,
                fallback_reason=documents.copy(pi_d.get("fallback_reason")), index_key=index_key, index=index))
            return
        src = pi_d.get("source_ref")
        self.emit(ev.InteractionSurfaced(
            waiting_for=wait, pending_interaction=pending, pending_interaction_removed=removed,
            index_key=index_key, index=index,
            item_id=documents.copy(src.get("item_id")) if type(src) is dict else None))


def _same_step(a: JSON, b: JSON) -> bool:
    """Same plan item apart from its status and output (the fields a step's progress changes)."""
    if type(a) is not dict or type(b) is not dict or list(a) != list(b):
        return False
    return all(documents.same(a[k], b[k]) for k in a if k not in ("status", "output"))


def _same_cycle(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(documents.same(a.get(k), b.get(k)) for k in ("agent", "cycle_type", "phase"))


def _extends(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """``new`` keeps every key of ``old`` in the same order (answers only added or amended)."""
    return list(new)[: len(old)] == list(old)


def derive_events(prev: JSON, nxt: JSON) -> list[Event]:
    """Domain events explaining ``prev -> nxt`` (the residual is the caller's job)."""
    if type(nxt) is not dict:
        return []
    if type(prev) is not dict or not prev:
        return [ev.StateInitialised(doc=documents.copy(nxt))]
    return _Deriver(prev, nxt).run()
