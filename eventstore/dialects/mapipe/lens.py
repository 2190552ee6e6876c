"""evolve/observe for ``agent-state.json``: fold ``mapipe`` events, derive them from snapshot pairs.

``apply`` mirrors how the orchestrator writes the file (write-state.mjs assigns members of one
JSON object): assigning an existing key keeps its position, a new key goes last, a removed key
disappears.  ``derive`` therefore only has to name *which* keys changed and why; anything it does
not recognise (or cannot put in a typed event) is left to the base class's residual
``DocumentPatched``.  Each derived event is checked to survive the store's encode/decode (from its
declared types), so an out-of-spec value never turns into an event the store could not decode later.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec
from msgspec import UNSET

from eventstore import documents
from eventstore.dialects.mapipe import events as ev
from eventstore.events import Event, round_trips

JSON = Any


# ------------------------------------------------------------------ apply


def apply_event(doc: JSON, event: Event) -> JSON:
    """Fold one mapipe domain event into ``doc`` (mutated in place where possible)."""
    if isinstance(event, ev.RunStarted):
        return documents.take(event.state)
    if not isinstance(doc, dict):
        raise TypeError(f"cannot apply {type(event).__name__} to a non-object document")
    owns: tuple[str, ...] = getattr(type(event), "OWNS", ())
    if owns:
        for key in owns:
            value = getattr(event, key)
            if value is not UNSET:
                doc[key] = documents.take(value)
        removed = getattr(event, "removed", UNSET)
        for key in removed if removed is not UNSET else ():
            doc.pop(key, None)
        return doc
    if isinstance(event, (ev.PhaseStarted, ev.PhaseUpdated, ev.PhaseCompleted, ev.PhaseSkipped, ev.PhaseFailed)):
        phases = doc.setdefault("phases", {})
        phases[event.phase] = documents.take(event.record)
        if event.currentPhase is not UNSET:
            doc["currentPhase"] = event.currentPhase
        return doc
    if isinstance(event, (ev.ReviewIterationRecorded, ev.ReviewIterationUpdated)):
        items = doc.setdefault("reviewIterations", [])
        if event.index == len(items):
            items.append(documents.take(event.iteration))
        else:
            items[event.index] = documents.take(event.iteration)
        return doc
    if isinstance(event, ev.ReviewDeltaComputed):
        doc["reviewIterations"][event.index]["delta"] = documents.take(event.delta)
        return doc
    if isinstance(event, ev.ReviewDecisionRecorded):
        doc["reviewIterations"][event.index]["reviewDecision"] = documents.take(event.reviewDecision)
        return doc
    if isinstance(event, ev.GateVerdictRecorded):
        doc.setdefault("gates", []).append(documents.take(event.to_entry()))
        return doc
    if isinstance(event, ev.CircuitBreakerTripped):
        doc["circuitBreaker"] = documents.take(event.to_record())
        return doc
    if isinstance(event, ev.CircuitBreakerReset):
        if event.record is not UNSET:
            doc["circuitBreaker"] = documents.take(event.record)
        else:
            doc["circuitBreaker"]["tripped"] = False
        return doc
    raise TypeError(f'Dialect "mapipe" cannot apply {type(event).__name__}')


# ------------------------------------------------------------------ derive


def _decodable(event: Event) -> bool:
    """True when ``event`` survives the store's encode/decode exactly (typed fields fit), decided
    from its declared field types (:func:`~eventstore.events.round_trips`): ingest encodes each
    event once, to store it.  An out-of-spec value is left to the residual patch."""
    return round_trips(event)


def _setter(cls: type[Event], prev: dict[str, Any], nxt: dict[str, Any], keys: Iterable[str]) -> Event | None:
    """A setter event writing every key in ``keys`` that differs between ``prev`` and ``nxt``."""
    values: dict[str, Any] = {}
    removed: list[str] = []
    for key in keys:
        if key in nxt:
            if key not in prev or not documents.same(prev[key], nxt[key]):
                values[key] = documents.copy(nxt[key])
        elif key in prev:
            removed.append(key)
    if not values and not removed:
        return None
    if removed:
        if "removed" not in cls.__struct_fields__:
            return None
        values["removed"] = removed
    try:
        event = cls(**values)
    except TypeError:  # a required field is missing: not this event
        return None
    return event


def _order(nxt: dict[str, Any], prev: dict[str, Any], keys: Iterable[str]) -> int:
    """Position of the first key this event adds to ``nxt`` (new keys are appended in order)."""
    new = {k for k in keys if k in nxt and k not in prev}
    return next((i for i, k in enumerate(nxt) if k in new), -1) if new else -1


def derive_events(prev: JSON, nxt: JSON) -> list[Event]:
    """Domain events explaining ``prev -> nxt``; the caller adds the residual patch."""
    if not isinstance(nxt, dict):
        return []
    if not isinstance(prev, dict) or "taskId" not in prev:
        if isinstance(nxt.get("taskId"), str):
            started = ev.RunStarted(state=documents.copy(nxt))
            return [started] if _decodable(started) else []
        return []
    ordered: list[tuple[int, int, Event]] = []

    def add(order: int, event: Event | None) -> None:
        if event is not None and _decodable(event):
            ordered.append((order, len(ordered), event))

    # Derivation order is narrative order (what happened, then the run status it led to) ...
    _derive_setters(prev, nxt, add)
    _derive_phases(prev, nxt, add)
    _derive_reviews(prev, nxt, add)
    _derive_gates(prev, nxt, add)
    _derive_breaker(prev, nxt, add)
    _derive_status(prev, nxt, add)
    # ... except that events adding new top-level keys must apply in the keys' order in ``nxt``
    # (a new member goes last); only those events are permuted, among their own slots.
    slots = [i for i, (order, _, _) in enumerate(ordered) if order >= 0]
    adding = sorted((ordered[i] for i in slots), key=lambda t: (t[0], t[1]))
    for slot, item in zip(slots, adding, strict=True):
        ordered[slot] = item
    return [e for _, _, e in ordered]


def _derive_setters(prev: dict[str, Any], nxt: dict[str, Any], add: Any) -> None:
    # Questions: an answer owns the clearing of the question it answers; a question asked in
    # the same write (answer one, ask the next) is a separate QuestionAsked.
    answered = "lastAnswer" in nxt and ("lastAnswer" not in prev or not documents.same(prev["lastAnswer"], nxt["lastAnswer"]))
    question_keys: list[str] = []
    if answered:
        clear = [k for k in ("pendingQuestion", "waitingFor") if nxt.get(k) is None]
        add(_order(nxt, prev, ["lastAnswer", *clear]), _setter(ev.QuestionAnswered, prev, nxt, ["lastAnswer", *clear]))
        question_keys = [k for k in ("pendingQuestion", "waitingFor") if k not in clear]
    else:
        question_keys = ["pendingQuestion", "waitingFor"]
    asked = [k for k in question_keys if nxt.get(k) is not None]
    if asked and any(k not in prev or not documents.same(prev[k], nxt[k]) for k in asked):
        keys = question_keys if not answered else asked
        add(_order(nxt, prev, keys), _setter(ev.QuestionAsked, prev, nxt, keys))
    # Steering: queued until a phase consumes it by setting appliedAt.
    if "pendingSteer" in nxt:
        steer = nxt["pendingSteer"]
        applied = isinstance(steer, dict) and steer.get("appliedAt") is not None
        cls: type[Event] = ev.SteerApplied if applied else ev.SteerQueued
        add(_order(nxt, prev, ["pendingSteer"]), _setter(cls, prev, nxt, ["pendingSteer"]))
    # PR: opened where there was none, else updated.
    if nxt.get("pr") is not None:
        cls = ev.PrUpdated if prev.get("pr") is not None else ev.PrOpened
        add(_order(nxt, prev, ["pr"]), _setter(cls, prev, nxt, ["pr"]))
    # Worktree removal counts only when it is actually set (a null is bookkeeping).
    if nxt.get("worktreeRemovedAt") is not None:
        keys = list(ev.WorktreeRemoved.OWNS)
        add(_order(nxt, prev, keys), _setter(ev.WorktreeRemoved, prev, nxt, keys))
    for cls in (ev.MaturityAssessed, ev.MaturityFollowupAsked,
                ev.BaselineCaptured, ev.ResearchPassRecorded, ev.PlanCritiqueRecorded, ev.DiffRiskScored,
                ev.VerificationFailed, ev.PrPublished, ev.CommitRecorded):
        keys = list(cls.OWNS)
        add(_order(nxt, prev, keys), _setter(cls, prev, nxt, keys))


def _derive_status(prev: dict[str, Any], nxt: dict[str, Any], add: Any) -> None:
    keys = list(ev.RunStatusChanged.OWNS)
    add(_order(nxt, prev, keys), _setter(ev.RunStatusChanged, prev, nxt, keys))
    if nxt.get("finishedAt") is not None:  # a null finishedAt is bookkeeping, not a finish
        add(_order(nxt, prev, ["finishedAt"]), _setter(ev.RunFinished, prev, nxt, ["finishedAt"]))


def _derive_phases(prev: dict[str, Any], nxt: dict[str, Any], add: Any) -> None:
    before, after = prev.get("phases", {}), nxt.get("phases")
    if not isinstance(before, dict) or not isinstance(after, dict):
        return
    order = _order(nxt, prev, ["phases"])
    current = nxt.get("currentPhase")
    current_changed = "currentPhase" in prev and "currentPhase" in nxt and not documents.same(prev["currentPhase"], current)
    for key, record in after.items():
        if key in before and documents.same(before[key], record):
            continue
        if not isinstance(record, dict):
            continue
        old = before.get(key)
        old_status = old.get("status") if isinstance(old, dict) else None
        status = record.get("status")
        cls: type[Event] = ev.PhaseUpdated
        if isinstance(status, str) and status != old_status:
            cls = ev.PHASE_EVENTS.get(status, ev.PhaseUpdated)
        event: Event
        if current_changed and type(current) is int and str(current) == key:
            event = cls(phase=key, record=documents.copy(record), currentPhase=current)
            current_changed = False
        else:
            event = cls(phase=key, record=documents.copy(record))
        add(order, event)


def _derive_reviews(prev: dict[str, Any], nxt: dict[str, Any], add: Any) -> None:
    before, after = prev.get("reviewIterations", []), nxt.get("reviewIterations")
    if not isinstance(before, list) or not isinstance(after, list) or len(after) < len(before):
        return
    order = _order(nxt, prev, ["reviewIterations"])
    for index, entry in enumerate(after):
        if index >= len(before):
            if not isinstance(entry, dict):
                return  # later indices would no longer line up; the residual carries the rest
            add(order, ev.ReviewIterationRecorded(index=index, iteration=documents.copy(entry)))
            continue
        old = before[index]
        if documents.same(old, entry) or not isinstance(old, dict) or not isinstance(entry, dict):
            continue
        trial = documents.copy(old)
        for key, cls in (("delta", ev.ReviewDeltaComputed), ("reviewDecision", ev.ReviewDecisionRecorded)):
            value = entry.get(key)
            if isinstance(value, dict) and not documents.same(old.get(key), value):
                add(order, cls(index=index, **{key: documents.copy(value)}))
                trial[key] = documents.copy(value)
        if not documents.same(trial, entry):
            add(order, ev.ReviewIterationUpdated(index=index, iteration=documents.copy(entry)))


_GATE_KEYS = ["gate", "verdict", "at", "sha", "detail"]


def _derive_gates(prev: dict[str, Any], nxt: dict[str, Any], add: Any) -> None:
    before, after = prev.get("gates", []), nxt.get("gates")
    if not isinstance(before, list) or not isinstance(after, list) or len(after) <= len(before):
        return
    if not all(documents.same(a, b) for a, b in zip(before, after, strict=False)):
        return
    order = _order(nxt, prev, ["gates"])
    for entry in after[len(before):]:
        add(order, gate_event(entry))


def gate_event(entry: Any) -> ev.GateVerdictRecorded:
    """The event for one ledger entry: typed when exact, else typed best-effort + ``entry``."""
    def pick(key: str, types: tuple[type, ...], default: Any) -> Any:
        v = entry.get(key, default) if isinstance(entry, dict) else default
        return v if type(v) in types else default

    typed = ev.GateVerdictRecorded(
        gate=pick("gate", (str,), ""), verdict=pick("verdict", (str,), ""),
        at=pick("at", (str, type(None)), None), sha=pick("sha", (str, type(None)), None),
        detail=documents.copy(pick("detail", (dict,), {})),
    )
    if isinstance(entry, dict) and list(entry) == _GATE_KEYS and documents.same(typed.to_entry(), entry) \
            and _decodable(typed):
        return typed
    return msgspec.structs.replace(typed, entry=documents.copy(entry))


_BREAKER_KEYS = ("trigger", "detail", "checkpoint", "trippedAt", "counters")


def _derive_breaker(prev: dict[str, Any], nxt: dict[str, Any], add: Any) -> None:
    if "circuitBreaker" not in nxt:
        return
    old, new = prev.get("circuitBreaker"), nxt["circuitBreaker"]
    if documents.same(old, new) or not isinstance(new, dict):
        return
    order = _order(nxt, prev, ["circuitBreaker"])
    if new.get("tripped") is True:
        same_trip = isinstance(old, dict) and old.get("tripped") is True and all(
            documents.same(old.get(k), new.get(k)) for k in ("trigger", "trippedAt"))
        if not same_trip:  # a changed record of the same trip is not a second trip
            add(order, breaker_event(new))
    elif new.get("tripped") is False and isinstance(old, dict) and old.get("tripped") is True:
        trial = documents.copy(old)
        trial["tripped"] = False
        exact = documents.same(trial, new)
        add(order, ev.CircuitBreakerReset() if exact else ev.CircuitBreakerReset(record=documents.copy(new)))


def breaker_event(record: dict[str, Any]) -> ev.CircuitBreakerTripped:
    fields = {k: documents.copy(record[k]) for k in _BREAKER_KEYS if k in record}
    try:
        typed = ev.CircuitBreakerTripped(**fields)
        if _decodable(typed) and documents.same(typed.to_record(), record):
            return typed
    except TypeError:
        pass
    return ev.CircuitBreakerTripped(
        trigger=record["trigger"] if type(record.get("trigger")) is int else UNSET,
        record=documents.copy(record),
    )
